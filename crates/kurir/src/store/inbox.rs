//! What operators read of the inbox gateway's `kurir_inbox` rows: one source's events, newest
//! first, paged by a keyset on row ids, one event by its id, and how many events each source
//! has per status.
//! (Receiving, claiming and retrying are kurir-receiver's, through [`Store::inbox`].)
//!
//! One statement per operation and per dialect, sharing the row types below. Reads only; no
//! locks. The listing is served by `kurir_inbox_source_id (source, id)` and, with a status
//! filter, `kurir_inbox_source_status_id (source, status, id)` (kurir-receiver's migration 1001).

use chrono::{DateTime, Utc};
use kurir_receiver::InboxStatus;

use super::{parse_sqlite_ts, sqlite_ts, Result, Store, StoreError};

/// Filters of the inbox listing; every `None` matches all.
#[derive(Clone, Debug, Default)]
pub struct InboxQuery {
    /// The source (required).
    pub source: String,
    /// Exact status.
    pub status: Option<InboxStatus>,
    /// Exact event type.
    pub event_type: Option<String>,
    /// Received at or after.
    pub since: Option<DateTime<Utc>>,
    /// Received before.
    pub until: Option<DateTime<Utc>>,
    /// Only rows with a smaller id (the cursor).
    pub before_id: Option<i64>,
    /// At most this many rows.
    pub limit: u32,
}

/// One received event as the listing shows it (never its payload or headers).
#[derive(Clone, Debug, PartialEq)]
pub struct InboxListItem {
    /// Row id (the listing's order).
    pub id: i64,
    /// The sender's event id.
    pub event_id: String,
    /// Its type, when the scheme carries one.
    pub event_type: Option<String>,
    /// Where forwarding stands.
    pub status: InboxStatus,
    /// Attempts started so far.
    pub attempts: u32,
    /// When the next attempt is due (`None` while processing, once completed, and after the last
    /// attempt failed).
    pub next_attempt_at: Option<DateTime<Utc>>,
    /// When the last attempt started.
    pub last_attempt_at: Option<DateTime<Utc>>,
    /// What the last failed attempt reported.
    pub last_error: Option<String>,
    /// When it was received.
    pub created_at: DateTime<Utc>,
}

/// Events of one source in one status.
#[derive(Clone, Debug, PartialEq)]
pub struct InboxCount {
    /// The source.
    pub source: String,
    /// The status.
    pub status: InboxStatus,
    /// How many.
    pub count: i64,
    /// When the oldest of them was received.
    pub oldest_created_at: Option<DateTime<Utc>>,
}

const LIST_PG: &str = "\
    SELECT id, event_id, event_type, status, attempts::int8 AS attempts, available_at, \
        last_attempt_at, last_error, created_at \
    FROM kurir_inbox \
    WHERE source = $1 AND ($2::text IS NULL OR status = $2) \
      AND ($3::text IS NULL OR event_type = $3) \
      AND ($4::timestamptz IS NULL OR created_at >= $4) \
      AND ($5::timestamptz IS NULL OR created_at < $5) AND ($6::int8 IS NULL OR id < $6) \
    ORDER BY id DESC LIMIT $7";

const LIST_SQLITE: &str = "\
    SELECT id, event_id, event_type, status, attempts, available_at, last_attempt_at, last_error, \
        created_at \
    FROM kurir_inbox \
    WHERE source = ?1 AND (?2 IS NULL OR status = ?2) AND (?3 IS NULL OR event_type = ?3) \
      AND (?4 IS NULL OR created_at >= ?4) AND (?5 IS NULL OR created_at < ?5) \
      AND (?6 IS NULL OR id < ?6) \
    ORDER BY id DESC LIMIT ?7";

/// MySQL binds each `?` once, so each optional filter's value is bound twice; text is cast so
/// it decodes (see [`super::mysql`]).
const LIST_MYSQL: &str = "\
    SELECT id, CAST(event_id AS CHAR), CAST(event_type AS CHAR), CAST(status AS CHAR), \
        attempts, available_at, last_attempt_at, CAST(last_error AS CHAR), created_at \
    FROM kurir_inbox \
    WHERE source = ? AND (? IS NULL OR status = ?) AND (? IS NULL OR event_type = ?) \
      AND (? IS NULL OR created_at >= ?) AND (? IS NULL OR created_at < ?) \
      AND (? IS NULL OR id < ?) \
    ORDER BY id DESC LIMIT ?";

/// One event by its unique key `(source, event_id)`.
const ONE_PG: &str = "\
    SELECT id, event_id, event_type, status, attempts::int8 AS attempts, available_at, \
        last_attempt_at, last_error, created_at \
    FROM kurir_inbox WHERE source = $1 AND event_id = $2";

const ONE_SQLITE: &str = "\
    SELECT id, event_id, event_type, status, attempts, available_at, last_attempt_at, last_error, \
        created_at \
    FROM kurir_inbox WHERE source = ?1 AND event_id = ?2";

const ONE_MYSQL: &str = "\
    SELECT id, CAST(event_id AS CHAR), CAST(event_type AS CHAR), CAST(status AS CHAR), \
        attempts, available_at, last_attempt_at, CAST(last_error AS CHAR), created_at \
    FROM kurir_inbox WHERE source = ? AND event_id = ?";

const COUNTS_MYSQL: &str = "\
    SELECT CAST(source AS CHAR), CAST(status AS CHAR), COUNT(*) AS n, MIN(created_at) AS oldest \
    FROM kurir_inbox GROUP BY source, status ORDER BY source, status";

const COUNTS_SQL: &str = "\
    SELECT source, status, count(*) AS n, min(created_at) AS oldest FROM kurir_inbox \
    GROUP BY source, status ORDER BY source, status";

/// A listing row, timestamps as each dialect returns them.
type ListRow<T> = (
    i64,
    String,
    Option<String>,
    String,
    i64,
    T,
    Option<T>,
    Option<String>,
    T,
);

impl Store {
    /// One source's events matching `query`, newest first.
    pub async fn list_inbox_events(&self, q: &InboxQuery) -> Result<Vec<InboxListItem>> {
        let status = q.status.map(InboxStatus::as_str);
        match self {
            Store::Postgres(s) => {
                let rows: Vec<ListRow<DateTime<Utc>>> = sqlx::query_as(LIST_PG)
                    .bind(&q.source)
                    .bind(status)
                    .bind(q.event_type.as_deref())
                    .bind(q.since)
                    .bind(q.until)
                    .bind(q.before_id)
                    .bind(i64::from(q.limit))
                    .fetch_all(s.pool())
                    .await?;
                rows.into_iter().map(|r| list_item(r, Some)).collect()
            }
            Store::Sqlite(s) => {
                let rows: Vec<ListRow<String>> = sqlx::query_as(LIST_SQLITE)
                    .bind(&q.source)
                    .bind(status)
                    .bind(q.event_type.as_deref())
                    .bind(q.since.map(sqlite_ts))
                    .bind(q.until.map(sqlite_ts))
                    .bind(q.before_id)
                    .bind(i64::from(q.limit))
                    .fetch_all(s.pool())
                    .await?;
                rows.into_iter()
                    .map(|r| list_item(r, |t: String| parse_sqlite_ts(&t)))
                    .collect()
            }
            Store::Mysql(s) => {
                let rows: Vec<ListRow<DateTime<Utc>>> = sqlx::query_as(LIST_MYSQL)
                    .bind(&q.source)
                    .bind(status)
                    .bind(status)
                    .bind(q.event_type.as_deref())
                    .bind(q.event_type.as_deref())
                    .bind(q.since.map(|t| t.naive_utc()))
                    .bind(q.since.map(|t| t.naive_utc()))
                    .bind(q.until.map(|t| t.naive_utc()))
                    .bind(q.until.map(|t| t.naive_utc()))
                    .bind(q.before_id)
                    .bind(q.before_id)
                    .bind(i64::from(q.limit))
                    .fetch_all(s.pool())
                    .await?;
                rows.into_iter().map(|r| list_item(r, Some)).collect()
            }
        }
    }

    /// `source`'s event `event_id`, as the listing shows it. One probe of the unique key; no
    /// locks.
    pub async fn get_inbox_event(
        &self,
        source: &str,
        event_id: &str,
    ) -> Result<Option<InboxListItem>> {
        match self {
            Store::Postgres(s) => {
                let row: Option<ListRow<DateTime<Utc>>> = sqlx::query_as(ONE_PG)
                    .bind(source)
                    .bind(event_id)
                    .fetch_optional(s.pool())
                    .await?;
                row.map(|r| list_item(r, Some)).transpose()
            }
            Store::Sqlite(s) => {
                let row: Option<ListRow<String>> = sqlx::query_as(ONE_SQLITE)
                    .bind(source)
                    .bind(event_id)
                    .fetch_optional(s.pool())
                    .await?;
                row.map(|r| list_item(r, |t: String| parse_sqlite_ts(&t)))
                    .transpose()
            }
            Store::Mysql(s) => {
                let row: Option<ListRow<DateTime<Utc>>> = sqlx::query_as(ONE_MYSQL)
                    .bind(source)
                    .bind(event_id)
                    .fetch_optional(s.pool())
                    .await?;
                row.map(|r| list_item(r, Some)).transpose()
            }
        }
    }

    /// Per source and status: how many events, and when the oldest was received. A read over
    /// every inbox row, for the stats and the dashboard's inbox page.
    pub async fn inbox_counts(&self) -> Result<Vec<InboxCount>> {
        let rows: Vec<(String, String, i64, Option<DateTime<Utc>>)> = match self {
            Store::Postgres(s) => sqlx::query_as(COUNTS_SQL).fetch_all(s.pool()).await?,
            Store::Mysql(s) => sqlx::query_as(COUNTS_MYSQL).fetch_all(s.pool()).await?,
            Store::Sqlite(s) => {
                let rows: Vec<(String, String, i64, Option<String>)> =
                    sqlx::query_as(COUNTS_SQL).fetch_all(s.pool()).await?;
                rows.into_iter()
                    .map(|(a, b, n, t)| (a, b, n, t.as_deref().and_then(parse_sqlite_ts)))
                    .collect()
            }
        };
        rows.into_iter()
            .map(|(source, status, count, oldest_created_at)| {
                Ok(InboxCount {
                    status: parse_status(&status)?,
                    source,
                    count,
                    oldest_created_at,
                })
            })
            .collect()
    }
}

fn parse_status(s: &str) -> Result<InboxStatus> {
    s.parse::<InboxStatus>().map_err(|e| StoreError::Corrupt {
        table: "kurir_inbox",
        message: e.to_string(),
    })
}

/// A listing row as an item; `ts` reads a timestamp of the dialect.
fn list_item<T>(r: ListRow<T>, ts: impl Fn(T) -> Option<DateTime<Utc>>) -> Result<InboxListItem> {
    let (
        id,
        event_id,
        event_type,
        status,
        attempts,
        available_at,
        last_attempt_at,
        last_error,
        created,
    ) = r;
    let status = parse_status(&status)?;
    let corrupt = || StoreError::Corrupt {
        table: "kurir_inbox",
        message: format!("created_at of event {event_id}"),
    };
    let created_at = ts(created).ok_or_else(corrupt)?;
    // A failed event out of attempts waits "forever" (year 9999) until an operator retries it.
    let next_attempt_at = ts(available_at).filter(|at| {
        matches!(status, InboxStatus::Pending | InboxStatus::Failed)
            && at.timestamp() < FOREVER_SECONDS
    });
    Ok(InboxListItem {
        id,
        event_id,
        event_type,
        status,
        attempts: u32::try_from(attempts).unwrap_or(0),
        next_attempt_at,
        last_attempt_at: last_attempt_at.and_then(ts),
        last_error,
        created_at,
    })
}

/// 9000-01-01: anything later is kurir-receiver's "never".
const FOREVER_SECONDS: i64 = 221_845_392_000;

#[cfg(test)]
mod tests {
    use chrono::{DateTime, Utc};

    use crate::store::rows::Ts;

    /// Receiver migration 1002: inbox pruning finds the completed rows past the cutoff through
    /// `kurir_inbox_status_updated`, not by reading the table.
    #[tokio::test]
    async fn inbox_pruning_reads_the_status_and_time_index() {
        let Some((url, admin, name)) = super::super::postgres::tests::fresh_database().await else {
            return;
        };
        let pool = sqlx::PgPool::connect(&url).await.unwrap();
        for sql in [
            "INSERT INTO kurir_inbox (source, event_id, status, payload, updated_at) \
             SELECT 's', 'e' || i, CASE WHEN i % 10 = 0 THEN 'pending' ELSE 'completed' END, \
                 '\\x00', now() - i * interval '1 second' FROM generate_series(1, 50000) i",
            "ANALYZE kurir_inbox",
        ] {
            sqlx::query(sql).execute(&pool).await.unwrap();
        }
        let plan: serde_json::Value = sqlx::query_scalar(&format!(
            "EXPLAIN (FORMAT JSON) {}",
            super::super::retention::DELETE_INBOX.postgres
        ))
        .bind(Ts(now_cutoff()))
        .bind(500_i64)
        .fetch_one(&pool)
        .await
        .unwrap();
        pool.close().await;
        super::super::postgres::tests::drop_database(&admin, &name).await;
        let plan = plan.to_string();
        assert!(
            plan.contains("kurir_inbox_status_updated") && !plan.contains("Seq Scan"),
            "{plan}"
        );
    }

    fn now_cutoff() -> DateTime<Utc> {
        Utc::now() - chrono::Duration::days(30)
    }
}
