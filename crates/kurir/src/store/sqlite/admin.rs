//! The admin API's operations on SQLite (see [`crate::store::admin`] for what each means).
//! Timestamps are bound and compared as kurir's fixed-width text.

use chrono::{DateTime, Utc};
use sqlx::sqlite::{SqliteConnection, SqliteRow};
use sqlx::Row;

use super::{delivery_record, opt_ts, ts, SqliteStore};
use crate::outbox::{self, EnqueueError, NewEvent};
use crate::store::admin::{
    DeliveryListItem, DeliveryQuery, EventQuery, IdempotencyKey, Published, ReplayFilter,
    ReplayRecord, ReplayRequest,
};
use crate::store::{now_millis, parse_sqlite_ts, sqlite_ts, Result, StoreError, StoredEvent};

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
        if let Some(key) = key {
            if let Some(found) = find_idempotency_key(&mut tx, &key.key).await? {
                return Ok(found);
            }
        }
        let event_id = match outbox::enqueue(&mut tx, event).await {
            Ok(id) => id.to_string(),
            Err(EnqueueError::DuplicateEventId(id)) => {
                return Ok(Published::EventIdExists(id.to_string()))
            }
            Err(e) => return Err(e),
        };
        if let Some(key) = key {
            insert_idempotency_key(&mut tx, key, &event_id).await?;
        }
        tx.commit().await?;
        Ok(Published::Created(event_id))
    }

    /// A read; no locks.
    pub(in crate::store) async fn list_events(&self, q: &EventQuery) -> Result<Vec<StoredEvent>> {
        let rows = sqlx::query(
            "SELECT id, event_id, event_type, version, aggregate_type, aggregate_id, occurred_at, \
                 payload, created_at, dispatched_at, refused_reason \
             FROM kurir_outbox \
             WHERE (?1 IS NULL OR event_type = ?1) AND (?2 IS NULL OR aggregate_id = ?2) \
               AND (?3 IS NULL OR created_at >= ?3) AND (?4 IS NULL OR created_at < ?4) \
               AND (?5 IS NULL OR id < ?5) \
             ORDER BY id DESC LIMIT ?6",
        )
        .bind(q.event_type.as_deref())
        .bind(q.aggregate_id.as_deref())
        .bind(q.since.map(sqlite_ts))
        .bind(q.until.map(sqlite_ts))
        .bind(q.before_id)
        .bind(i64::from(q.limit))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(stored_event).collect()
    }

    /// A read; no locks.
    pub(in crate::store) async fn list_deliveries(
        &self,
        q: &DeliveryQuery,
    ) -> Result<Vec<DeliveryListItem>> {
        let rows = sqlx::query(
            "SELECT d.id, d.event_id, d.endpoint_id, d.status, d.attempt_count, d.available_at, \
                 d.last_status_code, d.last_error, d.sent_at, d.created_at, o.event_type \
             FROM kurir_deliveries d JOIN kurir_outbox o ON o.id = d.outbox_id \
             WHERE (?1 IS NULL OR d.status = ?1) AND (?2 IS NULL OR d.endpoint_id = ?2) \
               AND (?3 IS NULL OR o.event_type = ?3) \
               AND (?4 IS NULL OR d.created_at >= ?4) AND (?5 IS NULL OR d.created_at < ?5) \
               AND (?6 IS NULL OR d.id < ?6) \
             ORDER BY d.id DESC LIMIT ?7",
        )
        .bind(q.status.map(|s| s.as_str()))
        .bind(q.endpoint_id.as_deref())
        .bind(q.event_type.as_deref())
        .bind(q.since.map(sqlite_ts))
        .bind(q.until.map(sqlite_ts))
        .bind(q.before_id)
        .bind(i64::from(q.limit))
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(DeliveryListItem {
                    delivery: delivery_record(r)?,
                    event_type: r.try_get("event_type")?,
                })
            })
            .collect()
    }

    /// One `BEGIN IMMEDIATE` transaction: the update, then the audit row with its count.
    pub(in crate::store) async fn replay(&self, request: &ReplayRequest) -> Result<ReplayRecord> {
        let now = sqlite_ts(now_millis());
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        let count = replay_deliveries(&mut tx, &request.filter, &now).await?;
        let row = insert_replay(&mut tx, request, count, &now).await?;
        tx.commit().await?;
        replay_record(&row)
    }

    /// A read; no locks.
    pub(in crate::store) async fn list_replays(
        &self,
        before_id: Option<i64>,
        limit: u32,
    ) -> Result<Vec<ReplayRecord>> {
        let rows = sqlx::query(
            "SELECT id, actor, reason, filter, count, created_at FROM kurir_replays \
             WHERE (?1 IS NULL OR id < ?1) ORDER BY id DESC LIMIT ?2",
        )
        .bind(before_id)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(replay_record).collect()
    }

    /// A read; no locks. Total and not-yet-fanned-out events, and the oldest of the latter.
    pub(in crate::store) async fn outbox_counts(
        &self,
    ) -> Result<(i64, i64, Option<DateTime<Utc>>)> {
        let (total, undispatched, oldest): (i64, i64, Option<String>) = sqlx::query_as(
            "SELECT (SELECT count(*) FROM kurir_outbox), count(*), min(created_at) \
             FROM kurir_outbox WHERE dispatched_at IS NULL",
        )
        .fetch_one(&self.pool)
        .await?;
        Ok((
            total,
            undispatched,
            oldest.as_deref().and_then(parse_sqlite_ts),
        ))
    }

    /// A read; no locks. Per status: how many deliveries, and the oldest one's creation.
    pub(in crate::store) async fn delivery_counts(
        &self,
    ) -> Result<Vec<(String, i64, Option<DateTime<Utc>>)>> {
        let rows: Vec<(String, i64, Option<String>)> = sqlx::query_as(
            "SELECT status, count(*), min(created_at) FROM kurir_deliveries GROUP BY status",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(s, n, oldest)| (s, n, oldest.as_deref().and_then(parse_sqlite_ts)))
            .collect())
    }
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
) -> Result<SqliteRow, sqlx::Error> {
    sqlx::query(
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

pub(super) fn stored_event(r: &SqliteRow) -> Result<StoredEvent> {
    Ok(StoredEvent {
        id: r.try_get("id")?,
        event_id: r.try_get("event_id")?,
        event_type: r.try_get("event_type")?,
        version: r.try_get("version")?,
        aggregate_type: r.try_get("aggregate_type")?,
        aggregate_id: r.try_get("aggregate_id")?,
        occurred_at: ts(r, "occurred_at")?,
        payload: r.try_get("payload")?,
        created_at: ts(r, "created_at")?,
        dispatched_at: opt_ts(r, "dispatched_at")?,
        refused_reason: r.try_get("refused_reason")?,
    })
}

fn replay_record(r: &SqliteRow) -> Result<ReplayRecord> {
    let filter: String = r.try_get("filter")?;
    Ok(ReplayRecord {
        id: r.try_get("id")?,
        actor: r.try_get("actor")?,
        reason: r.try_get("reason")?,
        filter: serde_json::from_str(&filter).map_err(|e| StoreError::Corrupt {
            table: "kurir_replays",
            message: format!("filter: {e}"),
        })?,
        count: r.try_get("count")?,
        created_at: ts(r, "created_at")?,
    })
}
