//! Taking and giving back leases on SQLite: the claim, the shutdown release, the lease sweep,
//! and the removal of deliveries whose event or endpoint was deleted by hand (the `sqlite3`
//! shell leaves foreign keys off unless asked, so its deletes do not cascade).

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sqlx::{Row, Sqlite, Transaction};

use super::SqliteStore;
use crate::delivery::{ClaimedDelivery, EventSnapshot, Trigger};
use crate::store::rows::{SnapshotRow, Ts};

use crate::store::ordering::{dead_letter_status, ordered};
use crate::store::{
    sqlite_ts, Claim, ClaimAsk, EndpointSlot, LeaseEnd, Leased, Orphan, OrphanReason, Requeued,
    Result,
};

/// Leases one endpoint's oldest due rows whose event exists; of an ordered endpoint's aggregate
/// only the head (see `store::ordering`: `?6` tells whether the endpoint is ordered, `?7` the
/// status a dead-letter holds). `INDEXED BY`: with statistics
/// gathered on a deep backlog, SQLite preferred the `(status, created_at)` index and sorted
/// every pending row of the endpoint per claim (12.8 ms for 37 rows with 100,000 pending); the
/// due index reads only the rows it returns.
const LEASE_SQL: &str = "UPDATE kurir_deliveries SET status = 'processing', lease_owner = ?1, \
         lease_expires_at = ?2, attempt_count = attempt_count + 1, updated_at = ?3 \
     WHERE id IN (SELECT d.id FROM kurir_deliveries AS d INDEXED BY kurir_deliveries_due \
         WHERE d.endpoint_id = ?4 AND d.status IN ('pending', 'failed') AND d.available_at <= ?3 \
           AND EXISTS (SELECT 1 FROM kurir_outbox AS o WHERE o.id = d.outbox_id) \
           AND (d.ordering_key IS NULL OR NOT ?6 OR NOT EXISTS ( \
             SELECT 1 FROM kurir_deliveries AS p INDEXED BY kurir_deliveries_ordering \
             WHERE p.endpoint_id = d.endpoint_id AND p.ordering_key = d.ordering_key \
               AND p.status IN ('pending', 'processing', 'failed', ?7) \
               AND p.outbox_id < d.outbox_id)) \
         ORDER BY d.available_at LIMIT ?5) \
     RETURNING id, outbox_id, attempt_count, trigger, available_at";

/// Removes the due rows whose outbox row is gone, per `[endpoint_id, read_to]` of `?1`: the
/// ranges the claim read. Their attempts go by the foreign key's cascade.
const REMOVE_ORPHANS_SQL: &str = "DELETE FROM kurir_deliveries WHERE id IN ( \
         SELECT d.id FROM json_each(?1) AS r \
         JOIN kurir_deliveries AS d INDEXED BY kurir_deliveries_due \
           ON d.endpoint_id = json_extract(r.value, '$[0]') \
         WHERE d.status IN ('pending', 'failed') AND d.available_at <= json_extract(r.value, '$[1]') \
           AND NOT EXISTS (SELECT 1 FROM kurir_outbox AS o WHERE o.id = d.outbox_id)) \
     RETURNING id, endpoint_id, event_id";

/// Deliveries of endpoints that no longer exist: `owners` skips through the `(endpoint_id, id)`
/// index one endpoint at a time.
const REMOVE_OF_DELETED_ENDPOINTS_SQL: &str = "WITH RECURSIVE owners(endpoint_id) AS ( \
         SELECT (SELECT endpoint_id FROM kurir_deliveries INDEXED BY kurir_deliveries_endpoint_id \
                 ORDER BY endpoint_id LIMIT 1) \
         UNION ALL \
         SELECT (SELECT d.endpoint_id FROM kurir_deliveries AS d \
                     INDEXED BY kurir_deliveries_endpoint_id \
                 WHERE d.endpoint_id > o.endpoint_id ORDER BY d.endpoint_id LIMIT 1) \
         FROM owners AS o WHERE o.endpoint_id IS NOT NULL) \
     DELETE FROM kurir_deliveries WHERE id IN ( \
         SELECT id FROM kurir_deliveries WHERE endpoint_id IN ( \
             SELECT endpoint_id FROM owners AS o WHERE o.endpoint_id IS NOT NULL \
               AND NOT EXISTS (SELECT 1 FROM kurir_endpoints AS e WHERE e.id = o.endpoint_id)) \
         LIMIT ?1) \
     RETURNING id, endpoint_id, event_id";

/// Ends leases without a recorded attempt, counting each as an attempt: dead-letters the
/// delivery at its endpoint's maximum, else makes it due after the retry backoff, as
/// `kurir_core::retry::RetryPolicy` computes it after that attempt (`initial · 2^(n−1)` capped,
/// moved by the jitter, capped again). The endpoint's overrides apply, else the defaults:
/// `?1` attempts, `?2` initial and `?3` longest delay in ms, `?4` jitter; `?5` is the
/// `last_error`, `?6` now; `?7` is free for the condition `$cond` on the leased row `d`. A
/// delay is capped at 100 years, the most both backends' timestamps take. `lease_owner` is
/// left as it was: the lease's owner may still record the outcome of the attempt until the
/// delivery is claimed again (see `Store::complete_deliveries`).
macro_rules! requeue_sql {
    ($cond:literal) => {
        concat!(
            "WITH x AS ( \
                SELECT d.id, d.attempt_count >= COALESCE(e.retry_max_attempts, ?1) AS dead, \
                    min(3153600000000, COALESCE(e.retry_max_delay_ms, ?3), \
                        min(COALESCE(e.retry_max_delay_ms, ?3), 1.0 \
                            * COALESCE(e.retry_initial_delay_ms, ?2) \
                            * (1 << min(max(d.attempt_count - 1, 0), 62))) \
                        * (1 + ?4 * (random() / 9223372036854775808.0))) AS delay_ms \
                FROM kurir_deliveries AS d INDEXED BY kurir_deliveries_leased \
                LEFT JOIN kurir_endpoints AS e ON e.id = d.endpoint_id \
                WHERE d.status = 'processing' AND ",
            $cond,
            ") \
             UPDATE kurir_deliveries AS d SET \
                status = CASE WHEN x.dead THEN 'dead_letter' ELSE 'failed' END, \
                available_at = CASE WHEN x.dead THEN d.available_at ELSE strftime( \
                    '%Y-%m-%dT%H:%M:%fZ', ?6, printf('%+.3f seconds', x.delay_ms / 1000.0)) END, \
                lease_expires_at = NULL, updated_at = ?6, \
                last_error = CASE WHEN x.dead THEN ?5 || '; no attempts left' ELSE ?5 END \
             FROM x WHERE d.id = x.id \
             RETURNING status"
        )
    };
}

impl SqliteStore {
    /// One `BEGIN IMMEDIATE` transaction (the database's single writer lock stands in for row
    /// locks): per endpoint slot, leases its oldest due rows whose event exists; then removes
    /// the orphans among the due rows those reads went past (now and then, see `OrphanLooks`),
    /// and reads the leased rows' events.
    pub(in crate::store) async fn claim_due_deliveries(&self, ask: ClaimAsk<'_>) -> Result<Claim> {
        let now = self.clock.now_millis();
        let looking = self.orphan_looks.due();
        let mut remaining = ask.limit;
        let mut leased = Vec::new();
        let mut read_to = Vec::new();
        let mut tx = self.begin_immediate().await?;
        for slot in ask.slots {
            if remaining == 0 {
                break;
            }
            let want = slot.limit.min(remaining);
            let (rows, last) = lease_slot(&mut tx, ask.owner, slot, want, now).await?;
            remaining -= rows.len() as u32;
            // Fewer than asked for: every due row of the endpoint was read.
            let upto = if (rows.len() as u32) < want {
                Some(now)
            } else {
                last
            };
            if let Some(upto) = upto.filter(|_| looking) {
                read_to.push(serde_json::json!([
                    slot.endpoint.id.as_str(),
                    sqlite_ts(upto)
                ]));
            }
            leased.extend(rows);
        }
        let orphans = if read_to.is_empty() {
            Vec::new()
        } else {
            sqlx::query(REMOVE_ORPHANS_SQL)
                .bind(serde_json::Value::Array(read_to).to_string())
                .fetch_all(&mut *tx)
                .await?
        };
        let events = events_of(&mut tx, &leased).await?;
        tx.commit().await?;
        if looking {
            self.orphan_looks.looked(!orphans.is_empty());
        }
        let orphans = orphans
            .iter()
            .map(|r| Orphan::of_row(r, OrphanReason::EventDeleted));
        Claim::of_leased(
            leased,
            &events,
            ask.sent_at,
            orphans.collect::<Result<_>>()?,
        )
    }

    /// One statement in a `BEGIN IMMEDIATE` transaction.
    pub(in crate::store) async fn remove_deliveries_of_deleted_endpoints(
        &self,
        limit: u32,
    ) -> Result<Vec<Orphan>> {
        let mut tx = self.begin_immediate().await?;
        let rows = sqlx::query(REMOVE_OF_DELETED_ENDPOINTS_SQL)
            .bind(i64::from(limit))
            .fetch_all(&mut *tx)
            .await?;
        tx.commit().await?;
        rows.iter()
            .map(|r| Orphan::of_row(r, OrphanReason::EndpointDeleted))
            .collect()
    }

    /// One statement in a `BEGIN IMMEDIATE` transaction, fenced like a completion.
    pub(in crate::store) async fn hand_back(
        &self,
        owner: &str,
        deliveries: &[ClaimedDelivery],
    ) -> Result<u64> {
        let rows: Vec<[i64; 2]> = deliveries
            .iter()
            .map(|d| [d.delivery_id, i64::from(d.attempt)])
            .collect();
        let hand_back = sqlx::query(
            "UPDATE kurir_deliveries AS d SET \
                 status = CASE WHEN d.attempt_count > 1 THEN 'failed' ELSE 'pending' END, \
                 attempt_count = d.attempt_count - 1, lease_owner = NULL, \
                 lease_expires_at = NULL, updated_at = ?3 \
             FROM json_each(?2) AS x \
             WHERE d.id = json_extract(x.value, '$[0]') \
               AND d.attempt_count = json_extract(x.value, '$[1]') \
               AND d.lease_owner = ?1 AND d.status = 'processing'",
        )
        .bind(owner)
        .bind(serde_json::to_string(&rows).unwrap_or_default())
        .bind(sqlite_ts(self.clock.now_millis()));
        let mut tx = self.begin_immediate().await?;
        let done = hand_back.execute(&mut *tx).await?;
        tx.commit().await?;
        Ok(done.rows_affected())
    }

    /// One statement over the leases `end` names (see `requeue_sql!`), in a `BEGIN IMMEDIATE`
    /// transaction.
    pub(in crate::store) async fn requeue(&self, end: LeaseEnd<'_>) -> Result<Requeued> {
        let sql = match end.owner {
            Some(_) => requeue_sql!("d.lease_owner = ?7"),
            None => requeue_sql!("d.lease_expires_at < ?6"),
        };
        let millis = |d: std::time::Duration| d.as_secs_f64() * 1000.0;
        let mut query = sqlx::query_scalar(sql)
            .bind(i64::from(end.defaults.max_attempts))
            .bind(millis(end.defaults.initial_delay))
            .bind(millis(end.defaults.max_delay))
            .bind(end.defaults.jitter)
            .bind(end.error())
            .bind(sqlite_ts(self.clock.now_millis()));
        if let Some(owner) = end.owner {
            query = query.bind(owner);
        }
        let mut tx = self.begin_immediate().await?;
        let statuses: Vec<String> = query.fetch_all(&mut *tx).await?;
        tx.commit().await?;
        Ok(Requeued::of_statuses(&statuses))
    }
}

/// Leases up to `want` of `slot`'s due rows; returns them and the latest `available_at` among
/// them (how far the endpoint's due rows were read).
async fn lease_slot<'a>(
    tx: &mut Transaction<'static, Sqlite>,
    owner: &str,
    slot: &'a EndpointSlot,
    want: u32,
    now: DateTime<Utc>,
) -> Result<(Vec<Leased<'a>>, Option<DateTime<Utc>>)> {
    let expires =
        sqlite_ts(now + chrono::Duration::from_std(slot.lease).unwrap_or(chrono::Duration::MAX));
    let rows = sqlx::query(LEASE_SQL)
        .bind(owner)
        .bind(&expires)
        .bind(sqlite_ts(now))
        .bind(slot.endpoint.id.as_str())
        .bind(i64::from(want))
        .bind(ordered(&slot.endpoint))
        .bind(dead_letter_status(&slot.endpoint))
        .fetch_all(&mut **tx)
        .await?;
    let mut last = None;
    let mut leased = Vec::with_capacity(rows.len());
    for r in rows {
        last = last.max(Some(r.try_get::<Ts, _>("available_at")?.0));
        leased.push(Leased {
            delivery_id: r.try_get("id")?,
            outbox_id: r.try_get("outbox_id")?,
            attempt: u32::try_from(r.try_get::<i64, _>("attempt_count")?).unwrap_or(0),
            trigger: Trigger::from_db(r.try_get("trigger")?),
            slot,
        });
    }
    Ok((leased, last))
}

/// The events of `leased`, by outbox row id.
pub(super) async fn events_of(
    tx: &mut Transaction<'static, Sqlite>,
    leased: &[Leased<'_>],
) -> Result<HashMap<i64, EventSnapshot>> {
    if leased.is_empty() {
        return Ok(HashMap::new());
    }
    let outbox_ids: Vec<i64> = leased.iter().map(|l| l.outbox_id).collect();
    let rows: Vec<SnapshotRow> = sqlx::query_as(
        "SELECT id, event_id, event_type, version, occurred_at, aggregate_id, payload \
         FROM kurir_outbox WHERE id IN (SELECT value FROM json_each(?1))",
    )
    .bind(serde_json::to_string(&outbox_ids).unwrap_or_default())
    .fetch_all(&mut **tx)
    .await?;
    Ok(rows.into_iter().map(Into::into).collect())
}
