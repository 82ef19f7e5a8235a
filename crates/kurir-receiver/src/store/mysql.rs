//! `kurir_inbox` on MySQL (≥ 8.0.16) and MariaDB (≥ 10.6), which any number of processes may
//! share: they coordinate only through the unique key, `FOR UPDATE SKIP LOCKED` claims, leases
//! and fenced completions. Timestamps are `DATETIME(3)` in UTC (sqlx's sessions use the time
//! zone `+00:00`), bound from the caller's clock as `DATETIME` values (`NaiveDateTime`: sqlx
//! sends a `DateTime<Utc>` as a `TIMESTAMP`, which ends in 2038 and turns "never", year 9999,
//! into NULL).
//!
//! Text columns are `utf8mb4_bin` (compared byte for byte), which the server reports as binary
//! and sqlx will not decode into a `String`: they are read through `CAST(… AS CHAR)`. MySQL has
//! no `RETURNING`, so a claim locks its rows first, then leases them by id, in one transaction.

use chrono::{DateTime, Utc};
use sqlx::mysql::MySqlPool;

use super::row::{ClaimedRow, NewRow, RecordRow};
use super::Result;

const RECORD_COLUMNS: &str = "id, CAST(source AS CHAR) AS source, \
    CAST(event_id AS CHAR) AS event_id, CAST(event_type AS CHAR) AS event_type, \
    CAST(idempotency_key AS CHAR) AS idempotency_key, CAST(status AS CHAR) AS status, attempts, \
    available_at, last_attempt_at, CAST(last_error AS CHAR) AS last_error, created_at, updated_at";

const CLAIMED_COLUMNS: &str = "i.id, CAST(i.source AS CHAR) AS source, \
    CAST(i.event_id AS CHAR) AS event_id, CAST(i.event_type AS CHAR) AS event_type, \
    CAST(i.idempotency_key AS CHAR) AS idempotency_key, i.payload, \
    CAST(i.headers AS CHAR) AS headers, i.attempts, i.created_at";

/// `i.id IN (?, …)`: the rows a claim leases, by primary key, so the lease's `UPDATE` locks
/// those rows and no others (joined with a JSON list instead, the optimizer may read the table
/// first and wait for rows another claimer holds).
fn ids_in(n: usize) -> String {
    format!("i.id IN ({})", vec!["?"; n].join(", "))
}

pub(super) async fn migrate(pool: &MySqlPool) -> Result<()> {
    let mut migrator = sqlx::migrate!("./migrations/mysql");
    migrator.set_ignore_missing(true);
    migrator.run(pool).await?;
    Ok(())
}

/// Inserts the row unless `(source, event_id)` exists, then reads it back by its new id. No
/// explicit lock: the unique key decides, and a concurrent insert of the same key waits for the
/// first to commit, then fails with a duplicate key, which is answered `None`.
pub(super) async fn insert_event(pool: &MySqlPool, new: &NewRow<'_>) -> Result<Option<RecordRow>> {
    let inserted = sqlx::query(
        "INSERT INTO kurir_inbox (source, event_id, event_type, idempotency_key, signature, status, \
            payload, headers, attempts, available_at, lease_owner, lease_expires_at, \
            last_attempt_at, created_at, updated_at) \
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    )
    .bind(new.source)
    .bind(new.event_id)
    .bind(new.event_type)
    .bind(new.idempotency_key)
    .bind(new.signature)
    .bind(new.status)
    .bind(new.payload)
    .bind(&new.headers)
    .bind(new.attempts)
    .bind(new.now.naive_utc())
    .bind(new.lease_owner)
    .bind(new.lease_expires_at.map(|t| t.naive_utc()))
    .bind(new.last_attempt_at.map(|t| t.naive_utc()))
    .bind(new.now.naive_utc())
    .bind(new.now.naive_utc())
    .execute(pool)
    .await;
    let id = match inserted {
        Ok(done) => done.last_insert_id(),
        Err(sqlx::Error::Database(e)) if e.is_unique_violation() => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let sql = format!("SELECT {RECORD_COLUMNS} FROM kurir_inbox WHERE id = ?");
    Ok(Some(sqlx::query_as(&sql).bind(id).fetch_one(pool).await?))
}

/// Plain read of one row's status columns; takes no lock.
pub(super) async fn get_event(
    pool: &MySqlPool,
    source: &str,
    event_id: &str,
) -> Result<Option<RecordRow>> {
    let sql = format!("SELECT {RECORD_COLUMNS} FROM kurir_inbox WHERE source = ? AND event_id = ?");
    Ok(sqlx::query_as(&sql)
        .bind(source)
        .bind(event_id)
        .fetch_optional(pool)
        .await?)
}

/// Leases due rows to `owner` in one transaction: locks them with `FOR UPDATE SKIP LOCKED`, so
/// concurrent claimers take disjoint rows without waiting on each other, then leases them and
/// reads them back; the row locks last only until the commit, the lease (`lease_expires_at`) is
/// what outlives it.
pub(super) async fn claim_due(
    pool: &MySqlPool,
    owner: &str,
    now: DateTime<Utc>,
    lease_until: DateTime<Utc>,
    limit: u32,
    sources: Option<&[String]>,
) -> Result<Vec<ClaimedRow>> {
    let sources = sources.map(|s| serde_json::to_string(s).unwrap_or_default());
    let mut tx = pool.begin().await?;
    let ids: Vec<i64> = sqlx::query_scalar(
        "SELECT id FROM kurir_inbox \
         WHERE (? IS NULL OR source IN (SELECT s.name FROM JSON_TABLE(?, '$[*]' COLUMNS ( \
                 name VARCHAR(255) PATH '$')) AS s)) \
           AND ((status IN ('pending', 'failed') AND available_at <= ?) \
                OR (status = 'processing' AND lease_expires_at <= ?)) \
         ORDER BY available_at, id LIMIT ? FOR UPDATE SKIP LOCKED",
    )
    .bind(sources.as_deref())
    .bind(sources.as_deref().unwrap_or("[]"))
    .bind(now.naive_utc())
    .bind(now.naive_utc())
    .bind(i64::from(limit))
    .fetch_all(&mut *tx)
    .await?;
    if ids.is_empty() {
        // Explicitly: a dropped transaction is rolled back only when its connection is next
        // used, and until then keeps whatever the read locked.
        tx.commit().await?;
        return Ok(Vec::new());
    }
    let sql = format!(
        "UPDATE kurir_inbox AS i \
         SET i.status = 'processing', i.lease_owner = ?, i.lease_expires_at = ?, \
             i.attempts = i.attempts + 1, i.last_attempt_at = ?, i.updated_at = ? WHERE {}",
        ids_in(ids.len())
    );
    let mut lease = sqlx::query(&sql)
        .bind(owner)
        .bind(lease_until.naive_utc())
        .bind(now.naive_utc())
        .bind(now.naive_utc());
    for id in &ids {
        lease = lease.bind(id);
    }
    lease.execute(&mut *tx).await?;
    let sql = format!(
        "SELECT {CLAIMED_COLUMNS} FROM kurir_inbox AS i WHERE {} ORDER BY i.available_at, i.id",
        ids_in(ids.len())
    );
    let mut read = sqlx::query_as(&sql);
    for id in &ids {
        read = read.bind(id);
    }
    let rows = read.fetch_all(&mut *tx).await?;
    tx.commit().await?;
    Ok(rows)
}

/// Records an attempt's end and clears the lease, fenced: only while the row is still leased to
/// `owner` for this attempt number. Locks the one row for the statement.
pub(super) async fn complete(
    pool: &MySqlPool,
    (row_id, owner, attempt): (i64, &str, u32),
    status: &str,
    available_at: DateTime<Utc>,
    error: Option<&str>,
    now: DateTime<Utc>,
) -> Result<bool> {
    let done = sqlx::query(
        "UPDATE kurir_inbox \
         SET status = ?, available_at = ?, last_error = ?, lease_owner = NULL, \
             lease_expires_at = NULL, updated_at = ? \
         WHERE id = ? AND status = 'processing' AND lease_owner = ? AND attempts = ?",
    )
    .bind(status)
    .bind(available_at.naive_utc())
    .bind(error)
    .bind(now.naive_utc())
    .bind(row_id)
    .bind(owner)
    .bind(i64::from(attempt))
    .execute(pool)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Makes one `failed` row due now with `attempts` reset. Locks the one row for the statement; a
/// row in any other state is left alone.
pub(super) async fn reschedule_failed(
    pool: &MySqlPool,
    source: &str,
    event_id: &str,
    now: DateTime<Utc>,
) -> Result<bool> {
    let done = sqlx::query(
        "UPDATE kurir_inbox SET status = 'pending', attempts = 0, available_at = ?, updated_at = ? \
         WHERE source = ? AND event_id = ? AND status = 'failed'",
    )
    .bind(now.naive_utc())
    .bind(now.naive_utc())
    .bind(source)
    .bind(event_id)
    .execute(pool)
    .await?;
    Ok(done.rows_affected() == 1)
}
