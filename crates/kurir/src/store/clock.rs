//! The store's [`Clock`]: where every time kurir writes for the database or another process to
//! compare comes from (retry times, circuit breakers, rate-limit buckets, rotated secrets'
//! expiry, tombstones, on SQLite every timestamp), and the database's own clock, read to measure
//! how far this process's is off (see `crate::clock`).
//!
//! Times the database compares in a statement with its own `now()` (leases, claims, the sweep)
//! are written with that `now()` and need no clock here.

use chrono::{DateTime, Utc};
use kurir_core::Clock;

use super::{on_backend, Result, Store};

impl Store {
    /// This store with `clock` as the time it writes and every part of kurir that shares it
    /// reads (the default is the system clock).
    #[must_use]
    pub fn with_clock(mut self, clock: Clock) -> Self {
        on_backend!(&mut self, s => s.clock = clock);
        self
    }

    /// The clock every time compared across processes is read from: the system's, corrected
    /// by the offset measured against the database's in a running `kurir serve`.
    pub fn clock(&self) -> &Clock {
        on_backend!(self, s => &s.clock)
    }

    /// The database server's clock now, as one statement reads it (`None` on SQLite, whose
    /// clock is this process's). No locks.
    pub async fn database_time(&self) -> Result<Option<DateTime<Utc>>> {
        Ok(match self {
            // `clock_timestamp()`, not `now()`: the time of the reading, not of the
            // transaction's start.
            Store::Postgres(s) => Some(
                sqlx::query_scalar("SELECT clock_timestamp()")
                    .fetch_one(s.pool())
                    .await?,
            ),
            Store::Mysql(s) => {
                let at: chrono::NaiveDateTime = sqlx::query_scalar("SELECT UTC_TIMESTAMP(6)")
                    .fetch_one(s.pool())
                    .await?;
                Some(at.and_utc())
            }
            Store::Sqlite(_) => None,
        })
    }
}
