//! The admin API's writes on MySQL and MariaDB (see [`crate::store::admin`] for what each
//! means): publishing and replaying. Each `?` takes its own bind, so an optional filter binds its
//! value twice.

use sqlx::mysql::MySqlConnection;

use super::MySqlStore;
use crate::outbox::{self, EnqueueError, NewEvent};
use crate::store::admin::{
    IdempotencyKey, PublishItem, Published, ReplayFilter, ReplayRecord, ReplayRequest,
};
use crate::store::rows::ReplayRow;
use crate::store::Result;

impl MySqlStore {
    /// One transaction: looks the key up, inserts the event (its unique `event_id` decides
    /// between concurrent duplicates) and records the key (a concurrent holder of the same key
    /// makes this wait for its commit, then lose: the event is rolled back and the winner's
    /// answer given).
    pub(in crate::store) async fn publish_event(
        &self,
        event: NewEvent,
        key: Option<&IdempotencyKey>,
    ) -> Result<Published, EnqueueError> {
        let mut tx = self.pool.begin().await?;
        // Every way out ends the transaction explicitly: a dropped one is rolled back only when
        // its connection is next used, and a failed duplicate insert holds a lock until then.
        match publish_in(&mut tx, &event, key).await {
            Ok(Step::Done(published)) => {
                tx.commit().await?;
                Ok(published)
            }
            Ok(Step::KeyTaken(event_id)) => {
                tx.rollback().await?;
                let key = key.map(|k| k.key.as_str()).unwrap_or_default();
                let mut conn = self.pool.acquire().await?;
                Ok(find_idempotency_key(&mut conn, key)
                    .await?
                    .unwrap_or(Published::Created(event_id)))
            }
            Err(e) => {
                tx.rollback().await?;
                Err(e)
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
        let mut done = Vec::with_capacity(items.len());
        for item in items {
            match publish_in(&mut tx, &item.event, item.key.as_ref()).await {
                Ok(Step::Done(published)) => done.push(published),
                Ok(Step::KeyTaken(_)) => {
                    tx.rollback().await?;
                    return Ok(None);
                }
                Err(e) => {
                    tx.rollback().await?;
                    return Err(e);
                }
            }
        }
        tx.commit().await?;
        Ok(Some(done))
    }

    /// One transaction: the update (which locks the rows it moves), then the audit row with its
    /// count. Deliveries of a deleted endpoint never match: the endpoint rows are read in share
    /// mode first, which waits for a deletion in progress (it holds its row exclusively) and
    /// makes a later one wait for this replay, whose pending rows it then cancels.
    pub(in crate::store) async fn replay(&self, request: &ReplayRequest) -> Result<ReplayRecord> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("SELECT COUNT(*) FROM kurir_endpoints LOCK IN SHARE MODE")
            .execute(&mut *tx)
            .await?;
        let count = replay_deliveries(&mut tx, &request.filter).await?;
        let id = sqlx::query(
            "INSERT INTO kurir_replays (actor, reason, filter, count, created_at) \
             VALUES (?, ?, ?, ?, UTC_TIMESTAMP(3))",
        )
        .bind(&request.actor)
        .bind(&request.reason)
        .bind(serde_json::to_string(&request.filter).unwrap_or_else(|_| "{}".into()))
        .bind(count)
        .execute(&mut *tx)
        .await?
        .last_insert_id();
        let row: ReplayRow = sqlx::query_as(&format!("{REPLAY_SELECT} WHERE id = ?"))
            .bind(id)
            .fetch_one(&mut *tx)
            .await?;
        tx.commit().await?;
        row.try_into()
    }
}

const REPLAY_SELECT: &str = "SELECT id, CAST(actor AS CHAR) AS actor, \
    CAST(reason AS CHAR) AS reason, CAST(filter AS CHAR) AS filter, count, created_at \
    FROM kurir_replays";

/// What [`publish_in`] did.
enum Step {
    /// Decided: what the caller answers once the transaction commits.
    Done(Published),
    /// The event was inserted but a concurrent transaction holds its key: roll back.
    KeyTaken(String),
}

/// One publish inside the caller's transaction. A taken event id undoes only its own statement
/// (InnoDB), so the transaction goes on.
async fn publish_in(
    conn: &mut MySqlConnection,
    event: &NewEvent,
    key: Option<&IdempotencyKey>,
) -> Result<Step, EnqueueError> {
    if let Some(key) = key {
        if let Some(found) = find_idempotency_key(conn, &key.key).await? {
            return Ok(Step::Done(found));
        }
    }
    let event_id = match outbox::insert::<sqlx::MySql>(conn, event).await {
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

/// Reads the key's row, inside the caller's transaction.
async fn find_idempotency_key(
    conn: &mut MySqlConnection,
    key: &str,
) -> Result<Option<Published>, sqlx::Error> {
    let row: Option<(String, String)> = sqlx::query_as(
        "SELECT CAST(event_id AS CHAR), CAST(request_hash AS CHAR) \
         FROM kurir_idempotency_keys WHERE `key` = ?",
    )
    .bind(key)
    .fetch_optional(conn)
    .await?;
    Ok(row.map(|(event_id, request_hash)| Published::KeyExists {
        event_id,
        request_hash,
    }))
}

/// Inserts the key, inside the caller's transaction; `false` if another transaction holds it
/// (its insert of the same key committed first, this one waited for it).
async fn insert_idempotency_key(
    conn: &mut MySqlConnection,
    key: &IdempotencyKey,
    event_id: &str,
) -> Result<bool, sqlx::Error> {
    let inserted = sqlx::query(
        "INSERT INTO kurir_idempotency_keys (`key`, event_id, request_hash, created_at) \
         VALUES (?, ?, ?, UTC_TIMESTAMP(3))",
    )
    .bind(&key.key)
    .bind(event_id)
    .bind(&key.request_hash)
    .execute(conn)
    .await;
    match inserted {
        Ok(_) => Ok(true),
        Err(sqlx::Error::Database(e)) if e.is_unique_violation() => Ok(false),
        Err(e) => Err(e),
    }
}

/// Moves matching `sent`/`dead_letter` deliveries back to `pending`, inside the caller's
/// transaction; returns how many.
async fn replay_deliveries(
    conn: &mut MySqlConnection,
    f: &ReplayFilter,
) -> Result<i64, sqlx::Error> {
    let done = sqlx::query(
        "UPDATE kurir_deliveries d JOIN kurir_outbox o ON o.id = d.outbox_id \
         SET d.status = 'pending', d.attempt_count = 0, d.available_at = UTC_TIMESTAMP(3), \
             d.`trigger` = 'replay', d.lease_owner = NULL, d.lease_expires_at = NULL, \
             d.last_error = NULL, d.updated_at = UTC_TIMESTAMP(3) \
         WHERE d.status IN ('sent', 'dead_letter') \
           AND NOT EXISTS (SELECT 1 FROM kurir_endpoints e \
               WHERE e.id = d.endpoint_id AND e.deleted_at IS NOT NULL) \
           AND (? IS NULL OR d.event_id = ?) AND (? IS NULL OR d.status = ?) \
           AND (? IS NULL OR d.endpoint_id = ?) AND (? IS NULL OR o.event_type = ?) \
           AND (? IS NULL OR d.created_at >= ?) AND (? IS NULL OR d.created_at < ?)",
    )
    .bind(f.event_id.as_deref())
    .bind(f.event_id.as_deref())
    .bind(f.status.map(|s| s.as_str()))
    .bind(f.status.map(|s| s.as_str()))
    .bind(f.endpoint_id.as_deref())
    .bind(f.endpoint_id.as_deref())
    .bind(f.event_type.as_deref())
    .bind(f.event_type.as_deref())
    .bind(f.since.map(|t| t.naive_utc()))
    .bind(f.since.map(|t| t.naive_utc()))
    .bind(f.until.map(|t| t.naive_utc()))
    .bind(f.until.map(|t| t.naive_utc()))
    .execute(conn)
    .await?;
    Ok(done.rows_affected() as i64)
}
