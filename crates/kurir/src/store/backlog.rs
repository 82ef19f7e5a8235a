//! What is waiting, read from the database for the backlog gauges of `GET /metrics`: deliveries
//! not yet sent nor dead-lettered (per status, and the age of the oldest), outbox rows the relay
//! has not fanned out yet, and outbox rows refused for breaking the SQL contract (migration 0005).
//!
//! Read at scrape time, so every kurir process sharing a database reports the same numbers
//! whichever of them did the work. One read-only statement per backend, served by the
//! `(status, id)` index on deliveries, the relay's index on the outbox and the refused rows'
//! index of `kurir_event_list` (migration 0025), so its cost follows the backlog, not the history. On PostgreSQL each status is its
//! own branch with the status as a literal: the planner then sees from its statistics that a
//! backlog status is rare and reads it through the index, whatever the session's planner costs
//! (with the status taken from a `VALUES` list, on a pool with the server's default costs, it
//! planned for a third of the table and walked the primary key or the whole table instead). No
//! locks are taken.

use chrono::{DateTime, Utc};

use super::{on_backend, parse_sqlite_ts, MySqlStore, PgStore, Result, SqliteStore, Store};
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

const BACKLOG_SQL_PG: &str = concat!(
    "\
    SELECT 'pending', count(*), EXTRACT(EPOCH FROM now() - min(created_at))::float8 \
    FROM kurir_deliveries WHERE status = 'pending' \
    UNION ALL \
    SELECT 'processing', count(*), EXTRACT(EPOCH FROM now() - min(created_at))::float8 \
    FROM kurir_deliveries WHERE status = 'processing' \
    UNION ALL \
    SELECT 'failed', count(*), EXTRACT(EPOCH FROM now() - min(created_at))::float8 \
    FROM kurir_deliveries WHERE status = 'failed' \
    UNION ALL \
    SELECT 'undispatched', count(*), EXTRACT(EPOCH FROM now() - min(o.created_at))::float8 \
    FROM ",
    super::cursor::unrelayed_rows!(postgres),
    " \
    UNION ALL \
    SELECT 'refused', count(*), NULL FROM kurir_event_list WHERE refused"
);

const BACKLOG_SQL_SQLITE: &str = concat!(
    "\
    SELECT status, count(*), min(created_at) \
    FROM kurir_deliveries WHERE status IN ('pending', 'processing', 'failed') GROUP BY status \
    UNION ALL \
    SELECT 'undispatched', count(*), min(o.created_at) \
    FROM ",
    super::cursor::unrelayed_rows!(sqlite),
    " \
    UNION ALL \
    SELECT 'refused', count(*), NULL FROM kurir_event_list WHERE refused"
);

/// As on PostgreSQL, ages by the database's clock; `TIMESTAMPDIFF` answers an integer, the
/// division a decimal, cast to a double. The status literals are cast so they decode as text.
const BACKLOG_SQL_MYSQL: &str = "\
    SELECT CAST('pending' AS CHAR), COUNT(*), \
        CAST(TIMESTAMPDIFF(MICROSECOND, MIN(created_at), UTC_TIMESTAMP(3)) / 1000000 AS DOUBLE) \
    FROM kurir_deliveries WHERE status = 'pending' \
    UNION ALL \
    SELECT 'processing', COUNT(*), \
        CAST(TIMESTAMPDIFF(MICROSECOND, MIN(created_at), UTC_TIMESTAMP(3)) / 1000000 AS DOUBLE) \
    FROM kurir_deliveries WHERE status = 'processing' \
    UNION ALL \
    SELECT 'failed', COUNT(*), \
        CAST(TIMESTAMPDIFF(MICROSECOND, MIN(created_at), UTC_TIMESTAMP(3)) / 1000000 AS DOUBLE) \
    FROM kurir_deliveries WHERE status = 'failed' \
    UNION ALL \
    SELECT 'undispatched', COUNT(*), \
        CAST(TIMESTAMPDIFF(MICROSECOND, MIN(created_at), UTC_TIMESTAMP(3)) / 1000000 AS DOUBLE) \
    FROM kurir_outbox WHERE dispatched_at IS NULL \
    UNION ALL \
    SELECT 'refused', COUNT(*), NULL FROM kurir_event_list WHERE refused = TRUE";

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

impl MySqlStore {
    async fn backlog(&self) -> Result<Backlog> {
        let rows: Vec<(String, i64, Option<f64>)> = sqlx::query_as(BACKLOG_SQL_MYSQL)
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
        let now = self.clock.now();
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

    /// The backlog gauges read only the backlog: with a long history of sent deliveries and an
    /// empty or small backlog, the plan reads the status index, never the primary key or the whole
    /// table (the old plan walked the primary key for every status with no rows).
    #[tokio::test]
    async fn the_backlog_is_read_through_the_status_index_whatever_the_history() {
        let Some((url, admin, name)) = crate::store::postgres::tests::fresh_database().await else {
            return;
        };
        let store = PgStore::connect(&url).await.unwrap();
        for sql in [
            "INSERT INTO kurir_endpoints (id, url, secret) VALUES ('ep', 'https://x', 's')",
            // History fanned out before the relay's cursor: no `txid` (migration 0011).
            "INSERT INTO kurir_outbox (event_type, payload, dispatched_at, txid) \
             SELECT 'order.paid', '{}', now(), NULL FROM generate_series(1, 40000)",
            "INSERT INTO kurir_deliveries (outbox_id, event_id, endpoint_id, status) \
             SELECT id, event_id, 'ep', CASE WHEN id > 39990 THEN 'pending' ELSE 'sent' END \
             FROM kurir_outbox",
            // Listed, as the relay lists what it passes (migration 0025).
            "INSERT INTO kurir_event_list (outbox_id, event_type, version, created_at) \
             SELECT id, event_type, version, created_at FROM kurir_outbox",
            "ANALYZE",
        ] {
            sqlx::query(sql).execute(store.pool()).await.unwrap();
        }
        // kurir's own sessions, and an application's pool with the server's defaults.
        let applications = PgStore::from_pool(sqlx::PgPool::connect(&url).await.unwrap());
        let mut plans = Vec::new();
        for s in [&store, &applications] {
            let plan: serde_json::Value =
                sqlx::query_scalar(&format!("EXPLAIN (FORMAT JSON) {BACKLOG_SQL_PG}"))
                    .fetch_one(s.pool())
                    .await
                    .unwrap();
            plans.push(plan.to_string());
        }
        applications.close().await;
        let backlog = store.backlog().await.unwrap();
        store.close().await;
        crate::store::postgres::tests::drop_database(&admin, &name).await;
        for plan in plans {
            // The relay's one-row cursor is read whole; nothing else is.
            let cursor_reads = plan
                .matches(r#""Relation Name":"kurir_relay_cursor""#)
                .count();
            assert!(
                !plan.contains("kurir_deliveries_pkey")
                    && plan.matches("Seq Scan").count() <= cursor_reads,
                "{plan}"
            );
        }
        assert_eq!(backlog.deliveries, [10, 0, 0]);
    }

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
