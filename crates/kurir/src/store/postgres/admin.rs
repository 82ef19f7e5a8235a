//! The admin API's operations on PostgreSQL (see [`crate::store::admin`] for what each means).

use sqlx::postgres::PgConnection;

use super::PgStore;
use crate::outbox::{EnqueueError, NewEvent};
use crate::store::admin::{IdempotencyKey, PublishItem, Published, ReplayRecord, ReplayRequest};
use crate::store::enqueue::{insert_event_unless_taken_pg, insert_events_unless_taken_pg};
use crate::store::rows::ReplayRow;
use crate::store::Result;

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
        match publish_in(&mut tx, &event, key).await? {
            Step::Done(published) => {
                tx.commit().await?;
                Ok(published)
            }
            Step::KeyTaken(event_id) => {
                tx.rollback().await?;
                let key = key.map(|k| k.key.as_str()).unwrap_or_default();
                let mut conn = self.pool.acquire().await?;
                Ok(find_idempotency_key(&mut conn, key)
                    .await?
                    .unwrap_or(Published::Created(event_id)))
            }
        }
    }

    /// [`Self::publish_event`]'s steps for every item, in one transaction (see
    /// [`crate::store::Store::publish_events`]).
    pub(in crate::store) async fn publish_events(
        &self,
        items: &[PublishItem],
    ) -> Result<Option<Vec<Published>>, EnqueueError> {
        let mut tx = self.pool.begin().await?;
        if items.iter().all(|i| i.key.is_none()) {
            // No key to look up or record: one multi-row insert says which events are new.
            let events: Vec<&NewEvent> = items.iter().map(|i| &i.event).collect();
            let done = insert_events_unless_taken_pg(&mut tx, &events)
                .await?
                .into_iter()
                .map(|(inserted, id)| match inserted {
                    true => Published::Created(id.to_string()),
                    false => Published::EventIdExists(id.to_string()),
                })
                .collect();
            tx.commit().await?;
            return Ok(Some(done));
        }
        let mut done = Vec::with_capacity(items.len());
        for item in items {
            match publish_in(&mut tx, &item.event, item.key.as_ref()).await? {
                Step::Done(published) => done.push(published),
                Step::KeyTaken(_) => return Ok(None),
            }
        }
        tx.commit().await?;
        Ok(Some(done))
    }

    /// One statement: the update and the audit insert commit together. Row locks on the matched
    /// deliveries; a row another process is completing is waited for and re-checked, so a
    /// delivery that just left `sent`/`dead_letter` is not replayed. Rows being attempted
    /// (`processing`) never match. Deliveries of a deleted endpoint never match either: the
    /// fan-out lock, held shared first, waits for a deletion in progress (which holds it
    /// exclusively), so the statement's snapshot shows its tombstone; a deletion that comes
    /// later waits for this replay and cancels what it made pending.
    pub(in crate::store) async fn replay(&self, request: &ReplayRequest) -> Result<ReplayRecord> {
        let f = &request.filter;
        let mut tx = self.pool.begin().await?;
        sqlx::query("SELECT pg_advisory_xact_lock_shared($1)")
            .bind(super::FAN_OUT_LOCK)
            .execute(&mut *tx)
            .await?;
        let row: ReplayRow = sqlx::query_as(
            "WITH replayed AS ( \
                UPDATE kurir_deliveries AS d SET status = 'pending', attempt_count = 0, \
                    available_at = now(), trigger = 'replay', lease_owner = NULL, \
                    lease_expires_at = NULL, last_error = NULL, updated_at = now() \
                FROM kurir_outbox AS o \
                WHERE o.id = d.outbox_id AND d.status IN ('sent', 'dead_letter') \
                  AND NOT EXISTS (SELECT 1 FROM kurir_endpoints e \
                      WHERE e.id = d.endpoint_id AND e.deleted_at IS NOT NULL) \
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
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        row.try_into()
    }
}

/// What [`publish_in`] did.
enum Step {
    /// Decided: what the caller answers once the transaction commits.
    Done(Published),
    /// The event was inserted but a concurrent transaction holds its key: roll back.
    KeyTaken(String),
}

/// One publish inside the caller's transaction, which stays usable whatever the answer (a taken
/// event id inserts nothing rather than failing), so further publishes can share it.
async fn publish_in(
    conn: &mut PgConnection,
    event: &NewEvent,
    key: Option<&IdempotencyKey>,
) -> Result<Step, EnqueueError> {
    if let Some(key) = key {
        if let Some(found) = find_idempotency_key(conn, &key.key).await? {
            return Ok(Step::Done(found));
        }
    }
    let event_id = match insert_event_unless_taken_pg(conn, event).await {
        Ok(id) => id.to_string(),
        Err(EnqueueError::DuplicateEventId(id)) => {
            return Ok(Step::Done(Published::EventIdExists(id.to_string())))
        }
        Err(e) => return Err(e),
    };
    if let Some(key) = key {
        if !insert_idempotency_key(conn, key, &event_id).await? {
            return Ok(Step::KeyTaken(event_id));
        }
    }
    Ok(Step::Done(Published::Created(event_id)))
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
