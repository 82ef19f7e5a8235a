//! Fanning events out on PostgreSQL: the relay's batch.

use super::{PgStore, FAN_OUT_LOCK};
use crate::store::ordering::EARLIER_BATCHES;
use crate::store::rows::{FanOutRow, OutboxHead};
use crate::store::rules::fan_out;
use crate::store::{RelayOutcome, Result};

impl PgStore {
    /// Locks up to `limit` undispatched outbox rows with `FOR UPDATE SKIP LOCKED` (so concurrent
    /// relays take disjoint batches), inserts their deliveries and marks them dispatched, all in
    /// one transaction, which holds [`FAN_OUT_LOCK`] shared (relays never wait for each other
    /// on it, only for an endpoint's deletion). A batch with deliveries to keep in order first
    /// waits for the relays holding earlier rows (see `store::ordering`).
    ///
    /// An idle relay costs one index probe (no transaction, no lock) per look.
    pub(in crate::store) async fn relay_batch(&self, limit: u32) -> Result<RelayOutcome> {
        let pending: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM kurir_outbox WHERE dispatched_at IS NULL)",
        )
        .fetch_one(&self.bookkeeping)
        .await?;
        if !pending {
            return Ok(RelayOutcome::default());
        }
        let mut tx = self.bookkeeping.begin().await?;
        // Before the endpoints are read: their snapshot then shows every deletion that
        // committed, and none can commit until this transaction does.
        sqlx::query("SELECT pg_advisory_xact_lock_shared($1)")
            .bind(FAN_OUT_LOCK)
            .execute(&mut *tx)
            .await?;
        let events: Vec<OutboxHead> = sqlx::query_as(
            "SELECT id, event_id, event_type, aggregate_type, aggregate_id, created_at \
             FROM kurir_outbox WHERE dispatched_at IS NULL ORDER BY id LIMIT $1 \
             FOR UPDATE SKIP LOCKED",
        )
        .bind(i64::from(limit))
        .fetch_all(&mut *tx)
        .await?;
        if events.is_empty() {
            return Ok(RelayOutcome::default());
        }
        let targets: Vec<FanOutRow> = sqlx::query_as(
            "SELECT id, event_types::text AS event_types, ordering, created_at \
             FROM kurir_endpoints WHERE enabled AND deleted_at IS NULL",
        )
        .fetch_all(&mut *tx)
        .await?;
        let fan_out = fan_out(events, targets)?;
        if let Some(first) = fan_out.ordered_from() {
            sqlx::query(EARLIER_BATCHES)
                .bind(first)
                .execute(&mut *tx)
                .await?;
        }
        let inserted = sqlx::query(
            "INSERT INTO kurir_deliveries (outbox_id, event_id, endpoint_id, ordering_key) \
             SELECT * FROM unnest($1::int8[], $2::text[], $3::text[], $4::text[]) \
             ON CONFLICT (outbox_id, endpoint_id) DO NOTHING",
        )
        .bind(&fan_out.outbox_ids)
        .bind(&fan_out.event_ids)
        .bind(&fan_out.endpoint_ids)
        .bind(&fan_out.ordering_keys)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        sqlx::query("UPDATE kurir_outbox SET dispatched_at = now() WHERE id = ANY($1)")
            .bind(&fan_out.dispatched)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(fan_out.outcome(inserted))
    }
}
