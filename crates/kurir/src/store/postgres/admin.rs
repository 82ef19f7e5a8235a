//! The admin API's operations on PostgreSQL (see [`crate::store::admin`] for what each means).

use chrono::{DateTime, Utc};
use sqlx::postgres::{PgConnection, PgRow};
use sqlx::Row;

use super::{delivery_record, PgStore};
use crate::outbox::{self, EnqueueError, NewEvent};
use crate::store::admin::{
    DeliveryListItem, DeliveryQuery, EventQuery, IdempotencyKey, Published, ReplayRecord,
    ReplayRequest,
};
use crate::store::{Result, StoreError, StoredEvent};

impl PgStore {
    /// One transaction: looks the key up, inserts the event (its unique `event_id` decides
    /// between concurrent duplicates) and records the key (a concurrent holder of the same key
    /// makes this wait for its commit, then lose). No `NOTIFY` inside it: notifying
    /// transactions commit one at a time; the caller wakes relays after the commit
    /// ([`crate::wake`]).
    pub(in crate::store) async fn publish_event(
        &self,
        event: NewEvent,
        key: Option<&IdempotencyKey>,
    ) -> Result<Published, EnqueueError> {
        let mut tx = self.pool.begin().await?;
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
            if !insert_idempotency_key(&mut tx, key, &event_id).await? {
                tx.rollback().await?;
                let mut conn = self.pool.acquire().await?;
                return Ok(find_idempotency_key(&mut conn, &key.key)
                    .await?
                    .unwrap_or(Published::Created(event_id)));
            }
        }
        tx.commit().await?;
        Ok(Published::Created(event_id))
    }

    /// A read; no locks.
    pub(in crate::store) async fn list_events(&self, q: &EventQuery) -> Result<Vec<StoredEvent>> {
        let rows = sqlx::query(
            "SELECT id, event_id, event_type, version, aggregate_type, aggregate_id, occurred_at, \
                 payload::text AS payload, created_at, dispatched_at, refused_reason \
             FROM kurir_outbox \
             WHERE ($1::text IS NULL OR event_type = $1) AND ($2::text IS NULL OR aggregate_id = $2) \
               AND ($3::timestamptz IS NULL OR created_at >= $3) \
               AND ($4::timestamptz IS NULL OR created_at < $4) \
               AND ($5::int8 IS NULL OR id < $5) \
             ORDER BY id DESC LIMIT $6",
        )
        .bind(q.event_type.as_deref())
        .bind(q.aggregate_id.as_deref())
        .bind(q.since)
        .bind(q.until)
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
             WHERE ($1::text IS NULL OR d.status = $1) AND ($2::text IS NULL OR d.endpoint_id = $2) \
               AND ($3::text IS NULL OR o.event_type = $3) \
               AND ($4::timestamptz IS NULL OR d.created_at >= $4) \
               AND ($5::timestamptz IS NULL OR d.created_at < $5) \
               AND ($6::int8 IS NULL OR d.id < $6) \
             ORDER BY d.id DESC LIMIT $7",
        )
        .bind(q.status.map(|s| s.as_str()))
        .bind(q.endpoint_id.as_deref())
        .bind(q.event_type.as_deref())
        .bind(q.since)
        .bind(q.until)
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

    /// One statement: the update and the audit insert commit together. Row locks on the matched
    /// deliveries; a row another process is completing is waited for and re-checked, so a
    /// delivery that just left `sent`/`dead_letter` is not replayed. Rows being attempted
    /// (`processing`) never match.
    pub(in crate::store) async fn replay(&self, request: &ReplayRequest) -> Result<ReplayRecord> {
        let f = &request.filter;
        let row = sqlx::query(
            "WITH replayed AS ( \
                UPDATE kurir_deliveries AS d SET status = 'pending', attempt_count = 0, \
                    available_at = now(), trigger = 'replay', lease_owner = NULL, \
                    lease_expires_at = NULL, last_error = NULL, updated_at = now() \
                FROM kurir_outbox AS o \
                WHERE o.id = d.outbox_id AND d.status IN ('sent', 'dead_letter') \
                  AND ($1::text IS NULL OR o.event_id = $1) AND ($2::text IS NULL OR d.status = $2) \
                  AND ($3::text IS NULL OR d.endpoint_id = $3) \
                  AND ($4::text IS NULL OR o.event_type = $4) \
                  AND ($5::timestamptz IS NULL OR d.created_at >= $5) \
                  AND ($6::timestamptz IS NULL OR d.created_at < $6) \
                RETURNING d.id \
             ) \
             INSERT INTO kurir_replays (actor, reason, filter, count) \
             SELECT $7, $8, $9::json, count(*) FROM replayed \
             RETURNING id, actor, reason, filter::text AS filter, count, created_at",
        )
        .bind(f.event_id.as_deref())
        .bind(f.status.map(|s| s.as_str()))
        .bind(f.endpoint_id.as_deref())
        .bind(f.event_type.as_deref())
        .bind(f.since)
        .bind(f.until)
        .bind(&request.actor)
        .bind(&request.reason)
        .bind(serde_json::to_string(f).unwrap_or_else(|_| "{}".into()))
        .fetch_one(&self.pool)
        .await?;
        replay_record(&row)
    }

    /// A read; no locks.
    pub(in crate::store) async fn list_replays(
        &self,
        before_id: Option<i64>,
        limit: u32,
    ) -> Result<Vec<ReplayRecord>> {
        let rows = sqlx::query(
            "SELECT id, actor, reason, filter::text AS filter, count, created_at FROM kurir_replays \
             WHERE ($1::int8 IS NULL OR id < $1) ORDER BY id DESC LIMIT $2",
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
        Ok(sqlx::query_as(
            "SELECT (SELECT count(*) FROM kurir_outbox), count(*), min(created_at) \
             FROM kurir_outbox WHERE dispatched_at IS NULL",
        )
        .fetch_one(&self.pool)
        .await?)
    }

    /// A read; no locks. Per status: how many deliveries, and the oldest one's creation.
    pub(in crate::store) async fn delivery_counts(
        &self,
    ) -> Result<Vec<(String, i64, Option<DateTime<Utc>>)>> {
        Ok(sqlx::query_as(
            "SELECT status, count(*), min(created_at) FROM kurir_deliveries GROUP BY status",
        )
        .fetch_all(&self.pool)
        .await?)
    }
}

/// Reads the key's row; no lock (a concurrent insert of the same key is settled by the insert).
async fn find_idempotency_key(
    conn: &mut PgConnection,
    key: &str,
) -> Result<Option<Published>, sqlx::Error> {
    let row: Option<(String, String)> =
        sqlx::query_as("SELECT event_id, request_hash FROM kurir_idempotency_keys WHERE key = $1")
            .bind(key)
            .fetch_optional(conn)
            .await?;
    Ok(row.map(|(event_id, request_hash)| Published::KeyExists {
        event_id,
        request_hash,
    }))
}

/// Inserts the key; `false` when another transaction holds it (waits for that one to finish).
async fn insert_idempotency_key(
    conn: &mut PgConnection,
    key: &IdempotencyKey,
    event_id: &str,
) -> Result<bool, sqlx::Error> {
    let done = sqlx::query(
        "INSERT INTO kurir_idempotency_keys (key, event_id, request_hash) VALUES ($1, $2, $3) \
         ON CONFLICT (key) DO NOTHING",
    )
    .bind(&key.key)
    .bind(event_id)
    .bind(&key.request_hash)
    .execute(conn)
    .await?;
    Ok(done.rows_affected() == 1)
}

pub(super) fn stored_event(r: &PgRow) -> Result<StoredEvent> {
    Ok(StoredEvent {
        id: r.try_get("id")?,
        event_id: r.try_get("event_id")?,
        event_type: r.try_get("event_type")?,
        version: r.try_get("version")?,
        aggregate_type: r.try_get("aggregate_type")?,
        aggregate_id: r.try_get("aggregate_id")?,
        occurred_at: r.try_get("occurred_at")?,
        payload: r.try_get("payload")?,
        created_at: r.try_get("created_at")?,
        dispatched_at: r.try_get("dispatched_at")?,
        refused_reason: r.try_get("refused_reason")?,
    })
}

fn replay_record(r: &PgRow) -> Result<ReplayRecord> {
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
        created_at: r.try_get("created_at")?,
    })
}
