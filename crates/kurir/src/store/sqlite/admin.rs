//! The admin API's replay on SQLite (see [`crate::store::admin`] for what it means).
//! Timestamps are bound and compared as kurir's fixed-width text.

use sqlx::sqlite::SqliteConnection;

use super::SqliteStore;
use crate::store::admin::{ReplayFilter, ReplayRecord, ReplayRequest};
use crate::store::rows::ReplayRow;
use crate::store::{sqlite_ts, Result};

impl SqliteStore {
    /// One `BEGIN IMMEDIATE` transaction: the update, then the audit row with its count.
    pub(in crate::store) async fn replay(&self, request: &ReplayRequest) -> Result<ReplayRecord> {
        let now = sqlite_ts(self.clock.now_millis());
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        let count = replay_deliveries(&mut tx, &request.filter, &now).await?;
        let row = insert_replay(&mut tx, request, count, &now).await?;
        tx.commit().await?;
        row.try_into()
    }
}

/// Moves the deliveries `f` replays back to `pending`, inside the caller's write transaction;
/// returns how many.
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
               AND (?1 IS NULL OR d.event_id = ?1) \
               AND (d.status = ?2 OR (?2 IS NULL AND (d.status = 'dead_letter' OR ?8))) \
               AND (?3 IS NULL OR d.endpoint_id = ?3) AND (?4 IS NULL OR o.event_type = ?4) \
               AND (?5 IS NULL OR d.created_at >= ?5) AND (?6 IS NULL OR d.created_at < ?6) \
               AND (?9 IS NULL OR o.subscriber_id = ?9))",
    )
    .bind(f.event_id.as_deref())
    .bind(f.status.map(|s| s.as_str()))
    .bind(f.endpoint_id.as_deref())
    .bind(f.event_type.as_deref())
    .bind(f.since.map(sqlite_ts))
    .bind(f.until.map(sqlite_ts))
    .bind(now)
    .bind(f.include_sent)
    .bind(f.subscriber_id.as_deref())
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
        "INSERT INTO kurir_replays (actor, reason, filter, count, created_at, via, subscriber_id) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) \
         RETURNING id, actor, via, reason, filter, count, created_at",
    )
    .bind(&request.actor)
    .bind(&request.reason)
    .bind(serde_json::to_string(&request.filter).unwrap_or_else(|_| "{}".into()))
    .bind(count)
    .bind(now)
    .bind(request.via.as_str())
    .bind(request.filter.subscriber_id.as_deref())
    .fetch_one(conn)
    .await
}
