//! The admin API's operations on SQLite (see [`crate::store::admin`] for what each means).
//! Timestamps are bound and compared as kurir's fixed-width text.

use sqlx::sqlite::SqliteConnection;

use super::SqliteStore;
use crate::outbox::{self, EnqueueError, NewEvent};
use crate::store::admin::{
    IdempotencyKey, PublishItem, Published, ReplayFilter, ReplayRecord, ReplayRequest,
};
use crate::store::rows::ReplayRow;
use crate::store::{now_millis, sqlite_ts, Result};

impl SqliteStore {
    /// One `BEGIN IMMEDIATE` transaction (the write lock up front, so the key lookup and the
    /// inserts see no concurrent writer): looks the key up, inserts the event, records the key.
    /// The caller wakes the in-process relay after it returns.
    pub(in crate::store) async fn publish_event(
        &self,
        event: NewEvent,
        key: Option<&IdempotencyKey>,
    ) -> Result<Published, EnqueueError> {
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        let published = publish_in(&mut tx, &event, key).await?;
        tx.commit().await?;
        Ok(published)
    }

    /// [`Self::publish_event`]'s steps for every item, in one `BEGIN IMMEDIATE` transaction: one
    /// write lock and one sync for all of them. No concurrent writer can take a key meanwhile,
    /// so the answer is never `None`.
    pub(in crate::store) async fn publish_events(
        &self,
        items: &[PublishItem],
    ) -> Result<Option<Vec<Published>>, EnqueueError> {
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        let mut done = Vec::with_capacity(items.len());
        for item in items {
            done.push(publish_in(&mut tx, &item.event, item.key.as_ref()).await?);
        }
        tx.commit().await?;
        Ok(Some(done))
    }

    /// One `BEGIN IMMEDIATE` transaction: the update, then the audit row with its count.
    pub(in crate::store) async fn replay(&self, request: &ReplayRequest) -> Result<ReplayRecord> {
        let now = sqlite_ts(now_millis());
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        let count = replay_deliveries(&mut tx, &request.filter, &now).await?;
        let row = insert_replay(&mut tx, request, count, &now).await?;
        tx.commit().await?;
        row.try_into()
    }
}
/// One publish inside the caller's write transaction. A taken event id fails only its own
/// statement, so the transaction goes on.
async fn publish_in(
    conn: &mut SqliteConnection,
    event: &NewEvent,
    key: Option<&IdempotencyKey>,
) -> Result<Published, EnqueueError> {
    if let Some(key) = key {
        if let Some(found) = find_idempotency_key(conn, &key.key).await? {
            return Ok(found);
        }
    }
    let event_id = match outbox::insert::<sqlx::Sqlite>(conn, event).await {
        Ok(id) => id.to_string(),
        Err(EnqueueError::DuplicateEventId(id)) => {
            return Ok(Published::EventIdExists(id.to_string()))
        }
        Err(e) => return Err(e),
    };
    if let Some(key) = key {
        insert_idempotency_key(conn, key, &event_id).await?;
    }
    Ok(Published::Created(event_id))
}

/// Reads the key's row, inside the caller's write transaction.
async fn find_idempotency_key(
    conn: &mut SqliteConnection,
    key: &str,
) -> Result<Option<Published>, sqlx::Error> {
    let row: Option<(String, String)> =
        sqlx::query_as("SELECT event_id, request_hash FROM kurir_idempotency_keys WHERE key = ?1")
            .bind(key)
            .fetch_optional(conn)
            .await?;
    Ok(row.map(|(event_id, request_hash)| Published::KeyExists {
        event_id,
        request_hash,
    }))
}

/// Inserts the key, inside the caller's write transaction (which already found it absent).
async fn insert_idempotency_key(
    conn: &mut SqliteConnection,
    key: &IdempotencyKey,
    event_id: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO kurir_idempotency_keys (key, event_id, request_hash, created_at) \
         VALUES (?1, ?2, ?3, ?4)",
    )
    .bind(&key.key)
    .bind(event_id)
    .bind(&key.request_hash)
    .bind(sqlite_ts(now_millis()))
    .execute(conn)
    .await
    .map(drop)
}

/// Moves matching `sent`/`dead_letter` deliveries back to `pending`, inside the caller's write
/// transaction; returns how many.
async fn replay_deliveries(
    conn: &mut SqliteConnection,
    f: &ReplayFilter,
    now: &str,
) -> Result<i64, sqlx::Error> {
    let done = sqlx::query(
        "UPDATE kurir_deliveries SET status = 'pending', attempt_count = 0, available_at = ?7, \
             trigger = 'replay', lease_owner = NULL, lease_expires_at = NULL, last_error = NULL, \
             updated_at = ?7 \
         WHERE id IN (SELECT d.id FROM kurir_deliveries d JOIN kurir_outbox o ON o.id = d.outbox_id \
             WHERE d.status IN ('sent', 'dead_letter') \
               AND NOT EXISTS (SELECT 1 FROM kurir_endpoints e \
                   WHERE e.id = d.endpoint_id AND e.deleted_at IS NOT NULL) \
               AND (?1 IS NULL OR d.event_id = ?1) AND (?2 IS NULL OR d.status = ?2) \
               AND (?3 IS NULL OR d.endpoint_id = ?3) AND (?4 IS NULL OR o.event_type = ?4) \
               AND (?5 IS NULL OR d.created_at >= ?5) AND (?6 IS NULL OR d.created_at < ?6))",
    )
    .bind(f.event_id.as_deref())
    .bind(f.status.map(|s| s.as_str()))
    .bind(f.endpoint_id.as_deref())
    .bind(f.event_type.as_deref())
    .bind(f.since.map(sqlite_ts))
    .bind(f.until.map(sqlite_ts))
    .bind(now)
    .execute(conn)
    .await?;
    Ok(done.rows_affected() as i64)
}

/// Writes the audit row, inside the caller's write transaction.
async fn insert_replay(
    conn: &mut SqliteConnection,
    request: &ReplayRequest,
    count: i64,
    now: &str,
) -> Result<ReplayRow, sqlx::Error> {
    sqlx::query_as(
        "INSERT INTO kurir_replays (actor, reason, filter, count, created_at) \
         VALUES (?1, ?2, ?3, ?4, ?5) RETURNING id, actor, reason, filter, count, created_at",
    )
    .bind(&request.actor)
    .bind(&request.reason)
    .bind(serde_json::to_string(&request.filter).unwrap_or_else(|_| "{}".into()))
    .bind(count)
    .bind(now)
    .fetch_one(conn)
    .await
}
