//! Taking and giving back leases on PostgreSQL: the claim, the shutdown release, the lease
//! sweep, and the removal of deliveries whose event or endpoint was deleted by hand.

use std::collections::HashMap;

use sqlx::postgres::PgRow;
use sqlx::Row;

use super::PgStore;
use crate::delivery::{ClaimedDelivery, EventSnapshot, Trigger};
use crate::store::{Claim, EndpointSlot, Orphan, OrphanReason, Result, StoreError};

/// The claim (see [`PgStore::claim_due_deliveries`]). `due` locks and `leased` leases the live
/// rows; `read_to` bounds, for each endpoint, the due rows it surely read: those before its last
/// claimed row's `available_at` (rows tied with it may lie after it in the index: a relay batch
/// shares one timestamp), or all of them when it took fewer than it could and the claim was not
/// cut short by the overall limit. `orphaned` removes the rows within that bound whose outbox
/// row is gone, and `forgotten` their attempts (the hot tables have no foreign keys, see
/// migration 0004). Orphans tied with a claimed row are reached by a later claim. The walk
/// reads at most [`ORPHAN_WALK`] rows: mostly the rows just claimed, read again; a longer run
/// of orphans is removed over several claims. It takes no lock of its own (the deletion locks
/// what it deletes), so it never holds up another process's claim.
///
/// Every row is reached through an index whatever the statistics say, and the estimated cost
/// stays far below `jit_above_cost` (an unbounded orphan walk was estimated at a third of each
/// endpoint's rows, and compiling the plan with LLVM took 30 to 400 ms per claim): the deliveries by their
/// due index or by `id = ANY(ARRAY(…))` (a primary-key probe per id; a join with the CTE was
/// planned as a hash join over the whole table once the CTE's size could not be estimated),
/// the outbox by a scalar sub-select on its key (planned as a hash anti-join over the whole
/// outbox when written as `NOT EXISTS`).
const CLAIM_SQL: &str = "WITH slots AS ( \
        SELECT * FROM unnest($2::text[], $3::int4[], $4::float8[]) AS s(endpoint_id, lim, lease_s) \
     ), due AS ( \
        SELECT c.id, c.available_at, s.endpoint_id FROM slots s CROSS JOIN LATERAL ( \
            SELECT d.id, d.available_at FROM kurir_deliveries d \
            WHERE d.endpoint_id = s.endpoint_id AND d.status IN ('pending', 'failed') \
              AND d.available_at <= now() \
              AND (SELECT o.id FROM kurir_outbox o WHERE o.id = d.outbox_id) IS NOT NULL \
            ORDER BY d.available_at LIMIT s.lim \
            FOR UPDATE OF d SKIP LOCKED \
        ) c LIMIT $5 \
     ), read_to AS ( \
        SELECT s.endpoint_id, CASE WHEN count(due.id) < s.lim AND (SELECT count(*) FROM due) < $5 \
            THEN 'infinity'::timestamptz ELSE max(due.available_at) END AS before \
        FROM slots s LEFT JOIN due USING (endpoint_id) GROUP BY s.endpoint_id, s.lim \
     ), orphaned AS ( \
        DELETE FROM kurir_deliveries d WHERE d.status IN ('pending', 'failed') AND d.id = ANY (ARRAY( \
            SELECT w.id FROM ( \
                SELECT h.id, h.outbox_id FROM read_to r CROSS JOIN LATERAL ( \
                    SELECT x.id, x.outbox_id FROM kurir_deliveries x \
                    WHERE x.endpoint_id = r.endpoint_id AND x.status IN ('pending', 'failed') \
                      AND x.available_at <= now() AND x.available_at < r.before \
                    ORDER BY x.available_at LIMIT $6 \
                ) h LIMIT $6 \
            ) w WHERE (SELECT o.id FROM kurir_outbox o WHERE o.id = w.outbox_id) IS NULL)) \
        RETURNING d.id, d.endpoint_id, d.event_id \
     ), forgotten AS ( \
        DELETE FROM kurir_attempts a WHERE a.delivery_id = ANY (ARRAY(SELECT id FROM orphaned)) \
     ), leased AS ( \
        UPDATE kurir_deliveries AS d \
        SET status = 'processing', lease_owner = $1, \
            lease_expires_at = now() + make_interval(secs => \
                (SELECT s.lease_s FROM slots s WHERE s.endpoint_id = d.endpoint_id)), \
            attempt_count = d.attempt_count + 1, updated_at = now() \
        FROM kurir_outbox o \
        WHERE d.id = ANY (ARRAY(SELECT id FROM due)) AND o.id = d.outbox_id \
        RETURNING d.id, d.endpoint_id, d.attempt_count, d.trigger, o.event_id, o.event_type, \
            o.version, o.occurred_at, o.aggregate_id, o.payload::text AS payload \
     ) \
     SELECT FALSE AS orphan, * FROM leased \
     UNION ALL \
     SELECT TRUE, id, endpoint_id, NULL::int4, NULL::text, event_id, NULL::text, NULL::int4, \
         NULL::timestamptz, NULL::text, NULL::text FROM orphaned";

/// The most due rows one claim reads again to find orphans.
const ORPHAN_WALK: i64 = 1024;

/// Deliveries of endpoints that no longer exist (see
/// [`PgStore::remove_deliveries_of_deleted_endpoints`]): `owners` skips through the
/// `(endpoint_id, id)` index one endpoint at a time; the rest reaches rows by index probes
/// (`= ANY(ARRAY(…))`, as in [`CLAIM_SQL`]).
const REMOVE_OF_DELETED_ENDPOINTS_SQL: &str = "WITH RECURSIVE owners(endpoint_id) AS ( \
        (SELECT endpoint_id FROM kurir_deliveries ORDER BY endpoint_id LIMIT 1) \
        UNION ALL \
        SELECT (SELECT d.endpoint_id FROM kurir_deliveries d \
                WHERE d.endpoint_id > o.endpoint_id ORDER BY d.endpoint_id LIMIT 1) \
        FROM owners o WHERE o.endpoint_id IS NOT NULL \
     ), removed AS ( \
        DELETE FROM kurir_deliveries d WHERE d.id = ANY (ARRAY( \
            SELECT x.id FROM kurir_deliveries x WHERE x.endpoint_id = ANY (ARRAY( \
                SELECT o.endpoint_id FROM owners o WHERE o.endpoint_id IS NOT NULL \
                  AND NOT EXISTS (SELECT 1 FROM kurir_endpoints e WHERE e.id = o.endpoint_id))) \
            LIMIT $1)) \
        RETURNING d.id, d.endpoint_id, d.event_id \
     ), forgotten AS ( \
        DELETE FROM kurir_attempts a WHERE a.delivery_id = ANY (ARRAY(SELECT id FROM removed)) \
     ) \
     SELECT id, endpoint_id, event_id FROM removed";

impl PgStore {
    /// One statement: for each endpoint slot, locks up to its limit of due rows whose event
    /// exists with `FOR UPDATE SKIP LOCKED` (rows another process is claiming are skipped,
    /// never waited for), then leases them; and removes the orphans among the due rows it read
    /// past, also skipping locked ones. The locks end with the statement; the lease is what
    /// protects a row during the HTTP call.
    pub(in crate::store) async fn claim_due_deliveries(
        &self,
        owner: &str,
        slots: &[EndpointSlot],
        limit: u32,
    ) -> Result<Claim> {
        let ids: Vec<&str> = slots.iter().map(|s| s.endpoint.id.as_str()).collect();
        let limits: Vec<i32> = slots
            .iter()
            .map(|s| s.limit.try_into().unwrap_or(i32::MAX))
            .collect();
        let leases: Vec<f64> = slots.iter().map(|s| s.lease.as_secs_f64()).collect();
        let rows = sqlx::query(CLAIM_SQL)
            .bind(owner)
            .bind(&ids)
            .bind(&limits)
            .bind(&leases)
            .bind(i64::from(limit))
            .bind(ORPHAN_WALK)
            .fetch_all(&self.bookkeeping)
            .await?;
        let by_id: HashMap<&str, &EndpointSlot> =
            slots.iter().map(|s| (s.endpoint.id.as_str(), s)).collect();
        let mut claim = Claim::default();
        for r in &rows {
            if r.try_get("orphan")? {
                claim.orphans.push(orphan(r, OrphanReason::EventDeleted)?);
            } else {
                claim.deliveries.push(claimed(r, &by_id)?);
            }
        }
        Ok(claim)
    }

    /// One statement; the deletions take row locks, so two processes removing the same rows
    /// take turns.
    pub(in crate::store) async fn remove_deliveries_of_deleted_endpoints(
        &self,
        limit: u32,
    ) -> Result<Vec<Orphan>> {
        let rows = sqlx::query(REMOVE_OF_DELETED_ENDPOINTS_SQL)
            .bind(i64::from(limit))
            .fetch_all(&self.bookkeeping)
            .await?;
        rows.iter()
            .map(|r| orphan(r, OrphanReason::EndpointDeleted))
            .collect()
    }

    /// Gives back `owner`'s leases; the rows are due at once.
    pub(in crate::store) async fn release_leases(&self, owner: &str) -> Result<u64> {
        let done = sqlx::query(
            "UPDATE kurir_deliveries SET status = 'failed', available_at = now(), \
                 lease_owner = NULL, lease_expires_at = NULL, updated_at = now(), \
                 last_error = 'released at shutdown before the attempt was recorded' \
             WHERE lease_owner = $1 AND status = 'processing'",
        )
        .bind(owner)
        .execute(&self.bookkeeping)
        .await?;
        Ok(done.rows_affected())
    }

    /// Row locks serialise concurrent sweeps; a row is only ever moved once per expiry.
    pub(in crate::store) async fn sweep_expired_leases(&self) -> Result<u64> {
        let done = sqlx::query(
            "UPDATE kurir_deliveries SET status = 'failed', available_at = now(), \
                 lease_owner = NULL, lease_expires_at = NULL, updated_at = now(), \
                 last_error = 'lease expired: the worker stopped before recording the attempt' \
             WHERE status = 'processing' AND lease_expires_at < now()",
        )
        .execute(&self.bookkeeping)
        .await?;
        Ok(done.rows_affected())
    }
}

fn claimed(r: &PgRow, slots: &HashMap<&str, &EndpointSlot>) -> Result<ClaimedDelivery> {
    let endpoint_id: String = r.try_get("endpoint_id")?;
    let endpoint = slots
        .get(endpoint_id.as_str())
        .map(|s| s.endpoint.clone())
        .ok_or_else(|| StoreError::Corrupt {
            table: "kurir_deliveries",
            message: format!("claimed a row of unrequested endpoint {endpoint_id}"),
        })?;
    Ok(ClaimedDelivery {
        delivery_id: r.try_get("id")?,
        attempt: u32::try_from(r.try_get::<i32, _>("attempt_count")?).unwrap_or(0),
        trigger: Trigger::from_db(r.try_get("trigger")?),
        event: EventSnapshot {
            event_id: r.try_get("event_id")?,
            event_type: r.try_get("event_type")?,
            version: r.try_get("version")?,
            occurred_at: r.try_get("occurred_at")?,
            aggregate_id: r.try_get("aggregate_id")?,
            payload: r.try_get("payload")?,
        },
        endpoint,
    })
}

fn orphan(r: &PgRow, reason: OrphanReason) -> Result<Orphan> {
    Ok(Orphan {
        delivery_id: r.try_get("id")?,
        endpoint_id: r.try_get("endpoint_id")?,
        event_id: r.try_get("event_id")?,
        reason,
    })
}
