//! The MySQL and MariaDB store: shared by any number of kurir processes, which coordinate only
//! through row locks (`FOR UPDATE SKIP LOCKED`), leases and fences, as on PostgreSQL.
//!
//! What differs from PostgreSQL, and why the SQL here reads as it does:
//!
//! - **Sessions** run with `time_zone = '+00:00'` (sqlx's default, so `DATETIME(3)` values are
//!   UTC both ways) and `READ COMMITTED`: under InnoDB's default `REPEATABLE READ` a locking read
//!   also locks the gaps between the index entries it reads, and the relay's gap locks on the
//!   outbox would hold up the application's inserts of new events until the relay commits.
//! - **Text is read through `CAST(… AS CHAR)`**: kurir's columns are `utf8mb4_bin` (compared byte
//!   for byte, as on the other dialects), which the server reports as binary, and sqlx refuses to
//!   decode a binary column into a `String`.
//! - **No `UPDATE … RETURNING`** (MySQL has none): a statement that changes rows and must say
//!   which locks them first (`SELECT … FOR UPDATE SKIP LOCKED`), then changes them by id, in one
//!   transaction.
//! - **Rows of values are bound as one JSON text** read with `JSON_TABLE`, so a batch never meets
//!   the protocol's limit of 65,535 placeholders. **The rows a statement changes are named by a
//!   list of their primary keys** (`id IN (?, …)`, [`kurir_sql::mysql::in_list`]), never by a join with that JSON:
//!   joined, the optimizer may read the table first, and a locking statement then waits for every
//!   row another transaction holds (an application's uncommitted event, another process's claim).
//! - **No advisory locks are needed**: fan-out reads the enabled endpoints `LOCK IN SHARE MODE`,
//!   which a deletion's exclusive lock on the endpoint row orders against, the way PostgreSQL's
//!   shared advisory lock does (see [`MySqlStore::relay_batch`]).

mod admin;
mod leases;
mod ordered;
mod orphans;
mod relay;

use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::mysql::{MySqlConnectOptions, MySqlConnection, MySqlPool, MySqlPoolOptions};
use sqlx::{Connection, Executor};

use super::pool::reject_unfinished;
use super::{Result, StoreError};
use crate::endpoint::Endpoint;

/// kurir's tables in a MySQL or MariaDB database.
#[derive(Clone, Debug)]
pub struct MySqlStore {
    pool: MySqlPool,
    /// When claims look for orphans past the rows they take.
    orphan_looks: std::sync::Arc<super::OrphanLooks>,
    /// This process's copy of the endpoints (see `store::directory`).
    pub(super) directory: std::sync::Arc<super::directory::Directory>,
    /// This process's compiled copy of the event catalog (see `store::catalog`).
    pub(super) catalog: std::sync::Arc<super::catalog::CatalogCache>,
    /// Whether the last claim leased nothing: the next one first looks for a due row without a
    /// transaction (see `claim_due_deliveries`).
    idle: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Seals and opens the secret columns.
    pub(super) secrets: super::SecretCodec,
    /// Where the times this process writes for others to compare come from (see `store::clock`).
    pub(super) clock: kurir_core::Clock,
}

impl MySqlStore {
    /// Connects with a pool sized for one kurir process (`mysql://…` or `mariadb://…`). One
    /// connection is opened first, so an unreachable database fails with the driver's own reason
    /// (refused, unknown host, authentication) rather than a pool timeout.
    pub async fn connect(url: &str) -> Result<Self> {
        let connect_err = StoreError::connecting("mysql");
        let options = MySqlConnectOptions::from_str(url).map_err(connect_err)?;
        let mut probe = MySqlConnection::connect_with(&options)
            .await
            .map_err(connect_err)?;
        let version: String = sqlx::query_scalar("SELECT VERSION()")
            .fetch_one(&mut probe)
            .await
            .map_err(connect_err)?;
        probe.close().await.map_err(connect_err)?;
        supported(&version).map_err(|why| connect_err(sqlx::Error::Configuration(why.into())))?;
        let pool = reject_unfinished(MySqlPoolOptions::new())
            .max_connections(16)
            .acquire_timeout(Duration::from_secs(10))
            .after_connect(|conn, _| {
                Box::pin(async move {
                    conn.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
                        .await
                        .map(drop)
                })
            })
            .connect_lazy_with(options);
        Ok(Self::from_pool(pool))
    }

    /// Wraps an existing pool (the application's own, for example). Its sessions should use
    /// `READ COMMITTED` and the time zone `+00:00` (sqlx's default), as [`MySqlStore::connect`]'s
    /// do: see the module docs.
    /// The pool keeps its own options: unlike `connect`'s, it may hand out a connection that a
    /// failed statement left inside a transaction (see `store::pool`).
    pub fn from_pool(pool: MySqlPool) -> Self {
        Self {
            pool,
            orphan_looks: Default::default(),
            directory: Default::default(),
            catalog: Default::default(),
            idle: Default::default(),
            secrets: Default::default(),
            clock: Default::default(),
        }
    }

    /// The pool, for callers that enqueue on their own transactions.
    pub fn pool(&self) -> &MySqlPool {
        &self.pool
    }

    pub(super) async fn close(&self) {
        self.pool.close().await;
    }

    /// Inserts the row, then reads back `created_at`: the database's clock sets it, so the relay
    /// compares it with event times from the same clock.
    pub(super) async fn insert_endpoint(&self, e: &Endpoint) -> Result<DateTime<Utc>> {
        let sql = concat!(
            super::rows::insert_endpoint!(),
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, UTC_TIMESTAMP(3), \
                UTC_TIMESTAMP(3))"
        );
        let mut tx = self.pool.begin().await?;
        super::bind_endpoint(sqlx::query(sql), e, &self.secrets)
            .execute(&mut *tx)
            .await?;
        super::directory::stamp_mysql(&mut tx, &[e.id.as_str()]).await?;
        let created_at = sqlx::query_scalar("SELECT created_at FROM kurir_endpoints WHERE id = ?")
            .bind(e.id.as_str())
            .fetch_one(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(created_at)
    }
}

/// Whether kurir runs on the server that answered `VERSION()` with `version`: MariaDB 10.6 or
/// later (`SKIP LOCKED`, `JSON_TABLE`), MySQL 8.0.16 or later (the first to enforce `CHECK`).
fn supported(version: &str) -> std::result::Result<(), String> {
    let number: Vec<u32> = version
        .split(|c: char| !c.is_ascii_digit())
        .take(3)
        .map(|n| n.parse().unwrap_or(0))
        .collect();
    let (server, oldest) = if version.contains("MariaDB") {
        ("MariaDB", [10, 6, 0])
    } else {
        ("MySQL", [8, 0, 16])
    };
    if number.as_slice() >= oldest.as_slice() {
        return Ok(());
    }
    let oldest = oldest.map(|n| n.to_string()).join(".");
    Err(format!(
        "{server} {version} is older than {oldest}, the oldest kurir runs on"
    ))
}

/// A timestamp as `JSON_TABLE` reads it into a `DATETIME(3)` column: UTC, milliseconds.
pub(super) fn datetime(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%d %H:%M:%S%.3f").to_string()
}

#[cfg(test)]
mod tests {
    use super::supported;

    #[test]
    fn servers_older_than_mariadb_10_6_or_mysql_8_0_16_are_refused_by_name() {
        for ok in [
            "10.11.19-MariaDB-0+deb12u1",
            "10.6.0-MariaDB",
            "8.0.16",
            "8.4.3",
            "9.1.0",
        ] {
            assert_eq!(supported(ok), Ok(()), "{ok}");
        }
        for old in ["10.5.27-MariaDB", "8.0.15", "5.7.44-log"] {
            let why = supported(old).unwrap_err();
            assert!(why.contains(old) && why.contains("older than"), "{why}");
        }
    }
}
