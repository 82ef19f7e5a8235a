//! What waits for an operator, for the dashboard's overview: dead-lettered deliveries and inbox
//! events not yet forwarded. One read per call, the same SQL on both dialects; each count reads
//! an index of what it counts (`kurir_deliveries_status_id`, and the inbox's partial indexes of
//! due and leased rows), so its cost follows what waits, not the history. No locks.

use super::{Result, Store};

const WAITING_SQL: &str = "\
    SELECT (SELECT count(*) FROM kurir_deliveries WHERE status = 'dead_letter'), \
        (SELECT count(*) FROM kurir_inbox WHERE status IN ('pending', 'failed')) \
        + (SELECT count(*) FROM kurir_inbox WHERE status = 'processing')";

/// Counts of what waits for an operator.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Waiting {
    /// Deliveries in `dead_letter`.
    pub dead_letters: i64,
    /// Inbox events pending, processing or failed.
    pub inbox_unforwarded: i64,
}

impl Store {
    /// Dead letters and inbox events not yet forwarded, now.
    pub async fn waiting(&self) -> Result<Waiting> {
        let (dead_letters, inbox_unforwarded): (i64, i64) = match self {
            Store::Postgres(s) => sqlx::query_as(WAITING_SQL).fetch_one(s.pool()).await?,
            Store::Sqlite(s) => sqlx::query_as(WAITING_SQL).fetch_one(s.pool()).await?,
            Store::Mysql(s) => sqlx::query_as(WAITING_SQL).fetch_one(s.pool()).await?,
        };
        Ok(Waiting {
            dead_letters,
            inbox_unforwarded,
        })
    }
}
