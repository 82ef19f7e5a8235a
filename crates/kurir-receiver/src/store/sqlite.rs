//! `kurir_inbox` on SQLite: one process per database file. Timestamps are TEXT in the fixed-width
//! form `YYYY-MM-DDTHH:MM:SS.sssZ`, so comparing them as strings compares the instants.
//!
//! SQLite has one writer at a time. A single `INSERT`/`UPDATE` statement takes the write lock when it
//! starts; the claim still runs in an explicit `BEGIN IMMEDIATE` transaction so that its read of the
//! due rows and its update happen under the write lock by construction, not by an engine detail.

use chrono::{DateTime, Utc};
use sqlx::sqlite::SqlitePool;

use super::row::{sqlite_ts, ClaimedRow, NewRow, RecordRow};
use super::Result;

const RECORD_COLUMNS: &str =
    "id, source, event_id, event_type, idempotency_key, status, attempts, \
    available_at, last_attempt_at, last_error, created_at, updated_at";

const CLAIMED_COLUMNS: &str =
    "id, source, event_id, event_type, idempotency_key, payload, headers, \
    attempts, created_at";

pub(super) async fn migrate(pool: &SqlitePool) -> Result<()> {
    let mut migrator = sqlx::migrate!("./migrations/sqlite");
    migrator.set_ignore_missing(true);
    migrator.run(pool).await?;
    Ok(())
}

/// Inserts the row unless `(source, event_id)` exists; takes the database write lock for the
/// statement, so concurrent inserts of one key are serialised and all but the first do nothing.
pub(super) async fn insert_event(pool: &SqlitePool, new: &NewRow<'_>) -> Result<Option<RecordRow>> {
    let sql = format!(
        "INSERT INTO kurir_inbox (source, event_id, event_type, idempotency_key, signature, status, \
            payload, headers, attempts, available_at, lease_owner, lease_expires_at, \
            last_attempt_at, created_at, updated_at) \
         VALUES (?1, ?2, ?13, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?9, ?9) \
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
        .bind(new.attempts)
        .bind(sqlite_ts(new.now))
        .bind(new.lease_owner)
        .bind(new.lease_expires_at.map(sqlite_ts))
        .bind(new.last_attempt_at.map(sqlite_ts))
        .bind(new.event_type)
        .fetch_optional(pool)
        .await?;
    Ok(row)
}

/// Plain read of one row's status columns; takes only a read snapshot.
pub(super) async fn get_event(
    pool: &SqlitePool,
    source: &str,
    event_id: &str,
) -> Result<Option<RecordRow>> {
    let sql =
        format!("SELECT {RECORD_COLUMNS} FROM kurir_inbox WHERE source = ?1 AND event_id = ?2");
    let row: Option<RecordRow> = sqlx::query_as(&sql)
        .bind(source)
        .bind(event_id)
        .fetch_optional(pool)
        .await?;
    Ok(row)
}

/// Leases due rows to `owner` in one `UPDATE … RETURNING` inside `BEGIN IMMEDIATE`: the write lock
/// is held from the first read, so no other claimer can pick the same rows.
pub(super) async fn claim_due(
    pool: &SqlitePool,
    owner: &str,
    now: DateTime<Utc>,
    lease_until: DateTime<Utc>,
    limit: u32,
    sources: Option<&[String]>,
) -> Result<Vec<ClaimedRow>> {
    // SQLite has no array binds: the names travel as one JSON array.
    let sources = sources.map(|names| serde_json::Value::from(names).to_string());
    let sql = format!(
        "UPDATE kurir_inbox \
         SET status = 'processing', lease_owner = ?1, lease_expires_at = ?3, \
             attempts = attempts + 1, last_attempt_at = ?2, updated_at = ?2 \
         WHERE id IN (SELECT id FROM kurir_inbox \
                      WHERE (?5 IS NULL OR source IN (SELECT value FROM json_each(?5))) \
                        AND ((status IN ('pending', 'failed') AND available_at <= ?2) \
                             OR (status = 'processing' AND lease_expires_at <= ?2)) \
                      ORDER BY available_at, id \
                      LIMIT ?4) \
         RETURNING {CLAIMED_COLUMNS}"
    );
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
    let rows = sqlx::query_as(&sql)
        .bind(owner)
        .bind(sqlite_ts(now))
        .bind(sqlite_ts(lease_until))
        .bind(i64::from(limit))
        .bind(sources)
        .fetch_all(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(rows)
}

/// Records an attempt's end and clears the lease, fenced: only while the row is still leased to
/// `owner` for this attempt number. One statement, under the write lock.
pub(super) async fn complete(
    pool: &SqlitePool,
    (row_id, owner, attempt): (i64, &str, u32),
    status: &str,
    available_at: DateTime<Utc>,
    error: Option<&str>,
    now: DateTime<Utc>,
) -> Result<bool> {
    let done = sqlx::query(
        "UPDATE kurir_inbox \
         SET status = ?4, available_at = ?5, last_error = ?6, lease_owner = NULL, \
             lease_expires_at = NULL, updated_at = ?7 \
         WHERE id = ?1 AND status = 'processing' AND lease_owner = ?2 AND attempts = ?3",
    )
    .bind(row_id)
    .bind(owner)
    .bind(i64::from(attempt))
    .bind(status)
    .bind(sqlite_ts(available_at))
    .bind(error)
    .bind(sqlite_ts(now))
    .execute(pool)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Makes one `failed` row due now with `attempts` reset. One statement, under the write lock; a row
/// in any other state is left alone.
pub(super) async fn reschedule_failed(
    pool: &SqlitePool,
    source: &str,
    event_id: &str,
    now: DateTime<Utc>,
) -> Result<bool> {
    let done = sqlx::query(
        "UPDATE kurir_inbox SET status = 'pending', attempts = 0, available_at = ?3, updated_at = ?3 \
         WHERE source = ?1 AND event_id = ?2 AND status = 'failed'",
    )
    .bind(source)
    .bind(event_id)
    .bind(sqlite_ts(now))
    .execute(pool)
    .await?;
    Ok(done.rows_affected() == 1)
}
