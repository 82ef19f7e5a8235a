//! The admin API's replay on MySQL and MariaDB (see [`crate::store::admin`] for what it means).
//! Each `?` takes its own bind, so an optional filter binds its value twice.

use sqlx::mysql::MySqlConnection;

use super::MySqlStore;
use crate::store::admin::{ReplayFilter, ReplayRecord, ReplayRequest};
use crate::store::rows::ReplayRow;
use crate::store::Result;

impl MySqlStore {
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
            "INSERT INTO kurir_replays (actor, via, reason, filter, count, created_at, \
                 subscriber_id) \
             VALUES (?, ?, ?, ?, ?, UTC_TIMESTAMP(3), ?)",
        )
        .bind(&request.actor)
        .bind(request.via.as_str())
        .bind(&request.reason)
        .bind(serde_json::to_string(&request.filter).unwrap_or_else(|_| "{}".into()))
        .bind(count)
        .bind(request.filter.subscriber_id.as_deref())
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
    CAST(via AS CHAR) AS via, CAST(reason AS CHAR) AS reason, CAST(filter AS CHAR) AS filter, count, created_at \
    FROM kurir_replays";

/// Moves the deliveries `f` replays back to `pending`, inside the caller's transaction;
/// returns how many.
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
           AND (? IS NULL OR d.event_id = ?) \
           AND (d.status = ? OR (? IS NULL AND (d.status = 'dead_letter' OR ?))) \
           AND (? IS NULL OR d.endpoint_id = ?) AND (? IS NULL OR o.event_type = ?) \
           AND (? IS NULL OR d.created_at >= ?) AND (? IS NULL OR d.created_at < ?) \
           AND (? IS NULL OR o.subscriber_id = ?)",
    )
    .bind(f.event_id.as_deref())
    .bind(f.event_id.as_deref())
    .bind(f.status.map(|s| s.as_str()))
    .bind(f.status.map(|s| s.as_str()))
    .bind(f.include_sent)
    .bind(f.endpoint_id.as_deref())
    .bind(f.endpoint_id.as_deref())
    .bind(f.event_type.as_deref())
    .bind(f.event_type.as_deref())
    .bind(f.since.map(|t| t.naive_utc()))
    .bind(f.since.map(|t| t.naive_utc()))
    .bind(f.until.map(|t| t.naive_utc()))
    .bind(f.until.map(|t| t.naive_utc()))
    .bind(f.subscriber_id.as_deref())
    .bind(f.subscriber_id.as_deref())
    .execute(conn)
    .await?;
    Ok(done.rows_affected() as i64)
}
