//! What is waiting, read from the database for the backlog gauges of `GET /metrics`: deliveries
//! not yet sent nor dead-lettered (per status, and the age of the oldest), outbox rows the relay
//! has not fanned out yet, and outbox rows refused for breaking the SQL contract (migration 0005).
//!
//! Read at scrape time, so every kurir process sharing a database reports the same numbers
//! whichever of them did the work. One read-only statement per backend, served by the
//! `(status, id)` index on deliveries (on PostgreSQL the oldest is the lowest id: ids grow with
//! `created_at`) and the partial indexes on undispatched and on refused outbox rows, so its cost
//! follows the backlog, not the history. No locks are taken.

use chrono::{DateTime, Utc};

use super::{on_backend, parse_sqlite_ts, PgStore, Result, SqliteStore, Store};
use crate::delivery::DeliveryStatus;

/// The delivery statuses that make up the backlog.
pub const BACKLOG_STATUSES: [DeliveryStatus; 3] = [
    DeliveryStatus::Pending,
    DeliveryStatus::Processing,
    DeliveryStatus::Failed,
];

/// The backlog at one instant.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Backlog {
    /// Deliveries per backlog status, in the order of [`BACKLOG_STATUSES`].
    pub deliveries: [i64; 3],
    /// Seconds since the oldest delivery in the backlog was created (0 with no backlog).
    pub oldest_pending_age_seconds: f64,
    /// Outbox rows waiting for the relay.
    pub undispatched: i64,
    /// Seconds since the oldest of them was written (0 when there is none).
    pub oldest_undispatched_age_seconds: f64,
    /// Outbox rows refused for breaking the SQL contract, never delivered.
    pub refused: i64,
}

impl Backlog {
    /// `(status, count)` for each backlog status.
    pub fn by_status(&self) -> impl Iterator<Item = (DeliveryStatus, i64)> + '_ {
        BACKLOG_STATUSES.into_iter().zip(self.deliveries)
    }

    /// Folds `(kind, count, age)` rows, `kind` being a backlog status or `undispatched`.
    fn from_rows(rows: impl IntoIterator<Item = (String, i64, Option<f64>)>) -> Self {
        let mut backlog = Backlog::default();
        for (kind, count, age) in rows {
            let age = age.unwrap_or(0.0).max(0.0);
            if kind == "undispatched" {
                backlog.undispatched = count;
                backlog.oldest_undispatched_age_seconds = age;
            } else if kind == "refused" {
                backlog.refused = count;
            } else if let Some(i) = BACKLOG_STATUSES.iter().position(|s| s.as_str() == kind) {
                backlog.deliveries[i] = count;
                backlog.oldest_pending_age_seconds = backlog.oldest_pending_age_seconds.max(age);
            }
        }
        backlog
    }
}

const BACKLOG_SQL_PG: &str = "\
    SELECT s.status, \
        (SELECT count(*) FROM kurir_deliveries d WHERE d.status = s.status), \
        EXTRACT(EPOCH FROM now() - (SELECT d.created_at FROM kurir_deliveries d \
            WHERE d.status = s.status ORDER BY d.id LIMIT 1))::float8 \
    FROM (VALUES ('pending'), ('processing'), ('failed')) AS s(status) \
    UNION ALL \
    SELECT 'undispatched', count(*), EXTRACT(EPOCH FROM now() - min(created_at))::float8 \
    FROM kurir_outbox WHERE dispatched_at IS NULL \
    UNION ALL \
    SELECT 'refused', count(*), NULL FROM kurir_outbox WHERE refused_reason IS NOT NULL";

const BACKLOG_SQL_SQLITE: &str = "\
    SELECT status, count(*), min(created_at) \
    FROM kurir_deliveries WHERE status IN ('pending', 'processing', 'failed') GROUP BY status \
    UNION ALL \
    SELECT 'undispatched', count(*), min(created_at) \
    FROM kurir_outbox WHERE dispatched_at IS NULL \
    UNION ALL \
    SELECT 'refused', count(*), NULL FROM kurir_outbox WHERE refused_reason IS NOT NULL";

impl Store {
    /// The backlog now. On PostgreSQL ages are measured by the database's clock, the one that
    /// stamped the rows, so processes on different machines agree.
    pub async fn backlog(&self) -> Result<Backlog> {
        on_backend!(self, s => s.backlog().await)
    }
}

impl PgStore {
    async fn backlog(&self) -> Result<Backlog> {
        let rows: Vec<(String, i64, Option<f64>)> = sqlx::query_as(BACKLOG_SQL_PG)
            .fetch_all(self.pool())
            .await?;
        Ok(Backlog::from_rows(rows))
    }
}

impl SqliteStore {
    async fn backlog(&self) -> Result<Backlog> {
        let rows: Vec<(String, i64, Option<String>)> = sqlx::query_as(BACKLOG_SQL_SQLITE)
            .fetch_all(self.pool())
            .await?;
        let now = Utc::now();
        Ok(Backlog::from_rows(rows.into_iter().map(
            |(kind, n, oldest)| {
                let age = oldest
                    .as_deref()
                    .and_then(parse_sqlite_ts)
                    .map(|t| age(t, now));
                (kind, n, age)
            },
        )))
    }
}

fn age(since: DateTime<Utc>, now: DateTime<Utc>) -> f64 {
    (now - since).num_milliseconds() as f64 / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_fold_into_counts_and_the_oldest_age() {
        let b = Backlog::from_rows([
            ("failed".to_owned(), 2, Some(30.0)),
            ("pending".to_owned(), 5, Some(7.5)),
            ("undispatched".to_owned(), 0, None),
            ("refused".to_owned(), 3, None),
        ]);
        assert_eq!(b.refused, 3);
        assert_eq!(b.deliveries, [5, 0, 2]);
        assert_eq!(b.oldest_pending_age_seconds, 30.0);
        assert_eq!(
            (b.undispatched, b.oldest_undispatched_age_seconds),
            (0, 0.0)
        );
    }
}
