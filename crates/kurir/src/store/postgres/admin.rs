//! The admin API's replay on PostgreSQL (see [`crate::store::admin`] for what it means).

use super::PgStore;
use crate::store::admin::{ReplayRecord, ReplayRequest};
use crate::store::rows::ReplayRow;
use crate::store::Result;

impl PgStore {
    /// One statement: the update and the audit insert commit together. Row locks on the matched
    /// deliveries; a row another process is completing is waited for and re-checked, so a
    /// delivery that just left the replayed statuses is not replayed. Rows being attempted
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
                  AND ($1::text IS NULL OR o.event_id = $1) \
                  AND (d.status = $2 OR ($2::text IS NULL \
                      AND (d.status = 'dead_letter' OR $10::boolean))) \
                  AND ($3::text IS NULL OR d.endpoint_id = $3) \
                  AND ($4::text IS NULL OR o.event_type = $4) \
                  AND ($5::timestamptz IS NULL OR d.created_at >= $5) \
                  AND ($6::timestamptz IS NULL OR d.created_at < $6) \
                  AND ($12::text IS NULL OR o.subscriber_id = $12) \
                RETURNING d.id \
             ) \
             INSERT INTO kurir_replays (actor, reason, filter, count, via, subscriber_id) \
             SELECT $7, $8, $9::json, count(*), $11, $12 FROM replayed \
             RETURNING id, actor, via, reason, filter::text AS filter, count, created_at",
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
        .bind(f.include_sent)
        .bind(request.via.as_str())
        .bind(f.subscriber_id.as_deref())
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        row.try_into()
    }
}
