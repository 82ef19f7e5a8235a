//! `kurir_inbox` on PostgreSQL, which any number of processes may share: they coordinate only
//! through the unique key, `FOR UPDATE SKIP LOCKED` claims, leases and fenced completions.
//! Timestamps are `timestamptz`, bound from the caller's clock.

use chrono::{DateTime, Utc};
use sqlx::postgres::PgPool;

use super::row::{ClaimedRow, NewRow, RecordRow};
use super::Result;

const RECORD_COLUMNS: &str =
    "id, source, event_id, event_type, idempotency_key, status, attempts, \
    available_at, last_attempt_at, last_error, created_at, updated_at";

const CLAIMED_COLUMNS: &str = "id, source, event_id, event_type, idempotency_key, payload, \
    headers::text AS headers, attempts, created_at";

pub(super) async fn migrate(pool: &PgPool) -> Result<()> {
    let mut migrator = sqlx::migrate!("./migrations/postgres");
    migrator.set_ignore_missing(true);
    migrator.run(pool).await?;
    Ok(())
}

/// Inserts the row unless `(source, event_id)` exists. No explicit lock: the unique constraint
/// decides, and a concurrent insert of the same key waits for the first to commit, then does nothing.
pub(super) async fn insert_event(pool: &PgPool, new: &NewRow<'_>) -> Result<Option<RecordRow>> {
    let sql = format!(
        "INSERT INTO kurir_inbox (source, event_id, event_type, idempotency_key, signature, status, \
            payload, headers, attempts, available_at, lease_owner, lease_expires_at, \
            last_attempt_at, created_at, updated_at) \
         VALUES ($1, $2, $13, $3, $4, $5, $6, $7::json, $8, $9, $10, $11, $12, $9, $9) \
         ON CONFLICT (source, event_id) DO NOTHING \
         RETURNING {RECORD_COLUMNS}"
    );
    let row: Option<RecordRow> = sqlx::query_as(&sql)
        .bind(new.source)
        .bind(new.event_id)
        .bind(new.idempotency_key)
        .bind(new.signature)
        .bind(new.status)
        .bind(new.payload)
        .bind(&new.headers)
        .bind(i32::try_from(new.attempts).unwrap_or(i32::MAX))
        .bind(new.now)
        .bind(new.lease_owner)
        .bind(new.lease_expires_at)
        .bind(new.last_attempt_at)
        .bind(new.event_type)
        .fetch_optional(pool)
        .await?;
    Ok(row)
}

/// Plain read of one row's status columns; takes no lock.
pub(super) async fn get_event(
    pool: &PgPool,
    source: &str,
    event_id: &str,
) -> Result<Option<RecordRow>> {
    let sql =
        format!("SELECT {RECORD_COLUMNS} FROM kurir_inbox WHERE source = $1 AND event_id = $2");
    let row: Option<RecordRow> = sqlx::query_as(&sql)
        .bind(source)
        .bind(event_id)
        .fetch_optional(pool)
        .await?;
    Ok(row)
}

/// Leases due rows to `owner` in one statement: the inner `FOR UPDATE SKIP LOCKED` lets concurrent
/// claimers take disjoint rows without waiting on each other; the row locks last only until the
/// statement commits, the lease (`lease_expires_at`) is what outlives it.
pub(super) async fn claim_due(
    pool: &PgPool,
    owner: &str,
    now: DateTime<Utc>,
    lease_until: DateTime<Utc>,
    limit: u32,
    sources: Option<&[String]>,
) -> Result<Vec<ClaimedRow>> {
    let sql = format!(
        "UPDATE kurir_inbox AS inbox \
         SET status = 'processing', lease_owner = $1, lease_expires_at = $3, \
             attempts = inbox.attempts + 1, last_attempt_at = $2, updated_at = $2 \
         FROM (SELECT id FROM kurir_inbox \
               WHERE ($5::text[] IS NULL OR source = ANY($5)) \
                 AND ((status IN ('pending', 'failed') AND available_at <= $2) \
                      OR (status = 'processing' AND lease_expires_at <= $2)) \
               ORDER BY available_at, id \
               LIMIT $4 \
               FOR UPDATE SKIP LOCKED) AS due \
         WHERE inbox.id = due.id \
         RETURNING {}",
        qualified(CLAIMED_COLUMNS)
    );
    Ok(sqlx::query_as(&sql)
        .bind(owner)
        .bind(now)
        .bind(lease_until)
        .bind(i64::from(limit))
        .bind(sources)
        .fetch_all(pool)
        .await?)
}

/// Records an attempt's end and clears the lease, fenced: only while the row is still leased to
/// `owner` for this attempt number. Locks the one row for the statement.
pub(super) async fn complete(
    pool: &PgPool,
    (row_id, owner, attempt): (i64, &str, u32),
    status: &str,
    available_at: DateTime<Utc>,
    error: Option<&str>,
    now: DateTime<Utc>,
) -> Result<bool> {
    let done = sqlx::query(
        "UPDATE kurir_inbox \
         SET status = $4, available_at = $5, last_error = $6, lease_owner = NULL, \
             lease_expires_at = NULL, updated_at = $7 \
         WHERE id = $1 AND status = 'processing' AND lease_owner = $2 AND attempts = $3",
    )
    .bind(row_id)
    .bind(owner)
    .bind(i32::try_from(attempt).unwrap_or(i32::MAX))
    .bind(status)
    .bind(available_at)
    .bind(error)
    .bind(now)
    .execute(pool)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Makes one `failed` row due now with `attempts` reset. Locks the one row for the statement; a row
/// in any other state is left alone.
pub(super) async fn reschedule_failed(
    pool: &PgPool,
    source: &str,
    event_id: &str,
    now: DateTime<Utc>,
) -> Result<bool> {
    let done = sqlx::query(
        "UPDATE kurir_inbox SET status = 'pending', attempts = 0, available_at = $3, updated_at = $3 \
         WHERE source = $1 AND event_id = $2 AND status = 'failed'",
    )
    .bind(source)
    .bind(event_id)
    .bind(now)
    .execute(pool)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// `inbox.`-qualifies a column list, for `RETURNING` after an `UPDATE … FROM`.
fn qualified(columns: &str) -> String {
    columns
        .split(", ")
        .map(|c| format!("inbox.{c}"))
        .collect::<Vec<_>>()
        .join(", ")
}
