//! Taking and giving back leases on PostgreSQL: the claim, the shutdown release, the lease
//! sweep, and the removal of deliveries whose event or endpoint was deleted by hand.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sqlx::postgres::PgRow;
use sqlx::Row;

use tokio::time::Instant;

use super::cursors::{Position, Taken};
use super::PgStore;
use crate::delivery::{ClaimedDelivery, EventSnapshot, Trigger};
use crate::store::ordering::{dead_letter_status, ordered};
use crate::store::{
    Claim, ClaimAsk, EndpointSlot, LeaseEnd, Orphan, OrphanReason, Requeued, Result, StoreError,
};

/// The claim (see [`PgStore::claim_due_deliveries`]): `due` locks and `leased` leases the live
/// rows; `$orphans` adds the look for orphans of [`CLAIM_LOOKING_SQL`], `$tail` is the final
/// `SELECT`.
///
/// Each endpoint's rows are read in `(available_at, id)` order, from just after `$8`/`$9` of its
/// slot when they are set (its [`super::cursors`] position: where its last claim stopped), else from
/// the start. The comparison of both columns as a row is a condition on the due index
/// `(endpoint_id, available_at, id)`: the scan starts at the cursor, past the dead entries of the
/// rows claimed before, instead of filtering them one by one.
///
/// Every row is reached through an index whatever the statistics say, and the estimated cost
/// stays far below `jit_above_cost` (an unbounded orphan walk was estimated at a third of each
/// endpoint's rows, and compiling the plan with LLVM took 30 to 400 ms per claim): the
/// deliveries by their due index or by `id = ANY(ARRAY(…))` (a primary-key probe per id; a join
/// with the CTE was planned as a hash join over the whole table once the CTE's size could not
/// be estimated), the outbox by a scalar sub-select on its key (planned as a hash anti-join
/// over the whole outbox when written as `NOT EXISTS`). Each row's lease comes with it out of
/// `due`, joined once by id: looked up in `slots` per leased row, it read the whole slot list
/// for every row, a cost of slots times rows. The head check (`store::ordering`)
/// asks, per unfinished status, for the entry of `kurir_deliveries_ordering` just before
/// `(endpoint, key, status, outbox_id)` of the row, and whether it is of the same endpoint, key
/// and status: one live entry read per status. Only that index holds rows in that order (the
/// row comparison and the `ORDER BY` name its columns, none fixed by an equality), so any other
/// plan must sort the table, and the planner's guess of how common a status is cannot make it
/// cheaper. As a `NOT EXISTS` with the columns compared one by one, the check was planned as a
/// table scan per checked row, or a walk of the outbox-id index when statistics taken under a
/// backlog made every row look pending: each read the aggregate's whole sent history.
macro_rules! claim_sql {
    ($orphans:literal, $tail:literal) => {
        concat!(
            "WITH slots AS ( \
                SELECT * FROM unnest($2::text[], $3::int4[], $4::float8[], $6::bool[], \
                    $7::text[], $8::timestamptz[], $9::int8[]) \
                    AS s(endpoint_id, lim, lease_s, ordered, dead_letter, after_at, after_id) \
             ), due AS ( \
                SELECT c.id, c.available_at, s.endpoint_id, s.lease_s \
                FROM slots s CROSS JOIN LATERAL ( \
                    SELECT d.id, d.available_at FROM kurir_deliveries d \
                    WHERE d.endpoint_id = s.endpoint_id AND d.status IN ('pending', 'failed') \
                      AND d.available_at <= now() \
                      AND (d.available_at, d.id) > (COALESCE(s.after_at, '-infinity'), \
                          COALESCE(s.after_id, 0)) \
                      AND (SELECT o.id FROM kurir_outbox o WHERE o.id = d.outbox_id) IS NOT NULL \
                      AND (d.ordering_key IS NULL OR NOT s.ordered OR NOT EXISTS ( \
                        SELECT 1 FROM unnest(ARRAY['pending', 'processing', 'failed', \
                            s.dead_letter]) AS h(status) \
                        WHERE (SELECT p.endpoint_id = d.endpoint_id \
                                AND p.ordering_key = d.ordering_key AND p.status = h.status \
                            FROM kurir_deliveries p WHERE p.ordering_key IS NOT NULL \
                              AND (p.endpoint_id, p.ordering_key, p.status, p.outbox_id) \
                                < (d.endpoint_id, d.ordering_key, h.status, d.outbox_id) \
                            ORDER BY p.endpoint_id DESC, p.ordering_key DESC, p.status DESC, \
                                p.outbox_id DESC LIMIT 1))) \
                    ORDER BY d.available_at, d.id LIMIT s.lim \
                    FOR UPDATE OF d SKIP LOCKED \
                ) c LIMIT $5 ",
            $orphans,
            "), leased AS ( \
                UPDATE kurir_deliveries AS d \
                SET status = 'processing', lease_owner = $1, \
                    lease_expires_at = now() + make_interval(secs => u.lease_s), \
                    attempt_count = d.attempt_count + 1, updated_at = now() \
                FROM kurir_outbox o, due u \
                WHERE d.id = ANY (ARRAY(SELECT id FROM due)) AND u.id = d.id \
                  AND o.id = d.outbox_id \
                RETURNING d.id, d.endpoint_id, d.attempt_count, d.trigger, o.event_id, \
                    o.event_type, o.version, o.occurred_at, o.aggregate_id, \
                    o.payload::text AS payload, d.available_at \
             ) ",
            $tail
        )
    };
}

/// The claim: only deliveries whose outbox row exists are taken, so an orphan never takes a
/// claim's place; of an ordered endpoint's aggregate only the head (see `store::ordering`:
/// `$6` tells whether a slot's endpoint is ordered, `$7` the status a dead-letter holds).
const CLAIM_SQL: &str = claim_sql!("", "SELECT FALSE AS orphan, * FROM leased");

/// The claim that also removes the orphans it reads past (see `OrphanLooks` for when).
/// `read_to` bounds, for each endpoint, the due rows the claim surely read: those before its
/// last claimed row's `available_at` (rows tied with it may lie after it in the index: a relay
/// batch shares one timestamp), or all of them when it took fewer than it could and the claim
/// was not cut short by the overall limit (a claim that looks reads every endpoint from the
/// start, without a cursor, so these are counted from there). `orphaned` removes the rows within that bound whose
/// outbox row is gone, and `forgotten` their attempts (the hot tables have no foreign keys, see
/// migration 0004). Orphans tied with a claimed row are reached by a later look. The walk
/// reads at most `$10` rows ([`ORPHAN_WALK`]): mostly the rows just claimed, read again; a
/// longer run of orphans is removed over several claims. It takes no lock of its own (the
/// deletion locks what it deletes), so it never holds up another process's claim.
const CLAIM_LOOKING_SQL: &str = claim_sql!(
    "), read_to AS ( \
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
                    ORDER BY x.available_at LIMIT $10 \
                ) h LIMIT $10 \
            ) w WHERE (SELECT o.id FROM kurir_outbox o WHERE o.id = w.outbox_id) IS NULL)) \
        RETURNING d.id, d.endpoint_id, d.event_id \
     ), forgotten AS ( \
        DELETE FROM kurir_attempts a WHERE a.delivery_id = ANY (ARRAY(SELECT id FROM orphaned)) ",
    "SELECT FALSE AS orphan, * FROM leased \
     UNION ALL \
     SELECT TRUE, id, endpoint_id, NULL::int4, NULL::text, event_id, NULL::text, NULL::int4, \
         NULL::timestamptz, NULL::text, NULL::text, NULL::timestamptz FROM orphaned"
);

/// Ends leases without a recorded attempt, counting each as an attempt: dead-letters the
/// delivery at its endpoint's maximum, else makes it due after the retry backoff, as
/// `kurir_core::retry::RetryPolicy` computes it after that attempt (`initial · 2^(n−1)` capped,
/// moved by the jitter, capped again). The endpoint's overrides apply, else the defaults:
/// `$1` attempts, `$2` initial and `$3` longest delay in ms, `$4` jitter; `$5` is the
/// `last_error`, `$6` is free for the condition `$cond` on the leased row `x`. A delay is
/// capped at 100 years, the most both backends' timestamps take. Rows are taken
/// with `FOR UPDATE SKIP LOCKED` and reached through `id = ANY(ARRAY(…))` (see `claim_sql!`).
/// `lease_owner` is left as it was: the lease's owner may still record the outcome of the
/// attempt until the delivery is claimed again (see `Store::complete_deliveries`).
macro_rules! requeue_sql {
    ($cond:literal) => {
        concat!(
            "UPDATE kurir_deliveries AS d SET (status, available_at, last_error) = ( \
                SELECT CASE WHEN d.attempt_count >= p.max_attempts THEN 'dead_letter' \
                    ELSE 'failed' END, \
                CASE WHEN d.attempt_count >= p.max_attempts THEN d.available_at \
                ELSE now() + make_interval(secs => LEAST(3153600000000, p.max_ms, LEAST(p.max_ms, \
                    p.initial_ms * power(2::float8, LEAST(GREATEST(d.attempt_count - 1, 0), 62))) \
                    * (1 + $4 * (2 * random() - 1))) / 1000) END, \
                CASE WHEN d.attempt_count >= p.max_attempts \
                    THEN $5 || '; no attempts left' ELSE $5 END \
                FROM (SELECT COALESCE(max(e.retry_max_attempts), $1) AS max_attempts, \
                        COALESCE(max(e.retry_initial_delay_ms), $2)::float8 AS initial_ms, \
                        COALESCE(max(e.retry_max_delay_ms), $3)::float8 AS max_ms \
                      FROM kurir_endpoints e WHERE e.id = d.endpoint_id) p), \
                lease_expires_at = NULL, updated_at = now() \
             WHERE d.id = ANY (ARRAY( \
                SELECT x.id FROM kurir_deliveries x WHERE x.status = 'processing' AND ",
            $cond,
            " FOR UPDATE SKIP LOCKED)) \
             RETURNING d.status"
        )
    };
}

/// The most due rows one claim reads again to find orphans.
const ORPHAN_WALK: i64 = 1024;

/// Deliveries of endpoints that no longer exist (see
/// [`PgStore::remove_deliveries_of_deleted_endpoints`]): `owners` skips through the
/// `(endpoint_id, id)` index one endpoint at a time; the rest reaches rows by index probes
/// (`= ANY(ARRAY(…))`, as in `claim_sql!`).
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
    /// never waited for), then leases them; now and then also removes the orphans among the
    /// due rows it read past. The locks end with the statement; the lease is what protects a
    /// row during the HTTP call.
    pub(in crate::store) async fn claim_due_deliveries(&self, ask: ClaimAsk<'_>) -> Result<Claim> {
        let looking = self.orphan_looks.due();
        let args = SlotArgs::of(ask.slots, |slot| self.claim_start(slot, looking));
        let sql = if looking {
            CLAIM_LOOKING_SQL
        } else {
            CLAIM_SQL
        };
        let mut query = args.bind(sqlx::query(sql).bind(ask.owner), ask.limit);
        if looking {
            query = query.bind(ORPHAN_WALK);
        }
        let rows = query.fetch_all(&self.bookkeeping).await?;
        let by_id: HashMap<&str, &EndpointSlot> = ask
            .slots
            .iter()
            .map(|s| (s.endpoint.id.as_str(), s))
            .collect();
        let mut claim = Claim::default();
        let mut taken: HashMap<String, (u32, Position)> = HashMap::new();
        for r in &rows {
            if r.try_get("orphan")? {
                claim
                    .orphans
                    .push(Orphan::of_row(r, OrphanReason::EventDeleted)?);
                continue;
            }
            let delivery = claimed(r, &by_id, ask.sent_at)?;
            let at = (r.try_get("available_at")?, delivery.delivery_id);
            let entry = taken
                .entry(delivery.endpoint.id.to_string())
                .or_insert((0, at));
            *entry = (entry.0 + 1, entry.1.max(at));
            claim.deliveries.push(delivery);
        }
        if looking {
            self.orphan_looks.looked(!claim.orphans.is_empty());
        }
        self.move_cursors(&ask, &args, &taken);
        Ok(claim)
    }

    /// Where the claim for `slot` starts reading its endpoint's due rows (see [`super::cursors`]):
    /// from the start for an ordered endpoint and when the claim looks for orphans.
    fn claim_start(&self, slot: &EndpointSlot, looking: bool) -> Option<Position> {
        let id = slot.endpoint.id.as_str();
        if looking || ordered(&slot.endpoint) {
            self.claim_cursors.forget(id);
            return None;
        }
        self.claim_cursors.after(id)
    }

    /// Moves or drops each slot's cursor after a claim that `taken` sums up per endpoint:
    /// how many rows it took and the last of them.
    fn move_cursors(
        &self,
        ask: &ClaimAsk<'_>,
        args: &SlotArgs<'_>,
        taken: &HashMap<String, (u32, Position)>,
    ) {
        for (slot, after) in ask.slots.iter().zip(&args.after) {
            let id = slot.endpoint.id.as_str();
            if ordered(&slot.endpoint) {
                continue;
            }
            let (count, last) = taken.get(id).map_or((0, None), |(n, at)| (*n, Some(*at)));
            let took = Taken {
                after: *after,
                sent_at: ask.sent_at,
                full: count >= slot.limit,
                last,
            };
            self.claim_cursors.took(id, took);
        }
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
            .map(|r| Orphan::of_row(r, OrphanReason::EndpointDeleted))
            .collect()
    }

    /// One statement, fenced like a completion (the `CASE` keeps each row a primary-key
    /// lookup, see `COMPLETE_SQL`).
    pub(in crate::store) async fn hand_back(
        &self,
        owner: &str,
        deliveries: &[ClaimedDelivery],
    ) -> Result<u64> {
        let ids: Vec<i64> = deliveries.iter().map(|d| d.delivery_id).collect();
        let attempts: Vec<i32> = deliveries.iter().map(|d| d.attempt as i32).collect();
        let done = sqlx::query(
            "UPDATE kurir_deliveries AS d \
             SET status = CASE WHEN d.attempt_count > 1 THEN 'failed' ELSE 'pending' END, \
                 attempt_count = d.attempt_count - 1, lease_owner = NULL, \
                 lease_expires_at = NULL, updated_at = now() \
             FROM unnest($2::int8[], $3::int4[]) AS x(id, attempt) \
             WHERE d.id = x.id AND CASE WHEN d.status = 'processing' AND d.lease_owner = $1 \
                 THEN d.attempt_count = x.attempt ELSE FALSE END",
        )
        .persistent(false)
        .bind(owner)
        .bind(&ids)
        .bind(&attempts)
        .execute(&self.bookkeeping)
        .await?;
        Ok(done.rows_affected())
    }

    /// One statement over the leases `end` names (see `requeue_sql!`); expired ones are found
    /// through the partial index of leased rows. The row locks it takes (skipping locked ones)
    /// keep concurrent sweeps from moving a row twice.
    pub(in crate::store) async fn requeue(&self, end: LeaseEnd<'_>) -> Result<Requeued> {
        let sql = match end.owner {
            Some(_) => requeue_sql!("x.lease_owner = $6"),
            None => requeue_sql!("x.lease_expires_at < now()"),
        };
        let mut query = sqlx::query_scalar(sql)
            .bind(i32::try_from(end.defaults.max_attempts).unwrap_or(i32::MAX))
            .bind(millis(end.defaults.initial_delay))
            .bind(millis(end.defaults.max_delay))
            .bind(end.defaults.jitter)
            .bind(end.error());
        if let Some(owner) = end.owner {
            query = query.bind(owner);
        }
        let statuses: Vec<String> = query.fetch_all(&self.bookkeeping).await?;
        Ok(Requeued::of_statuses(&statuses))
    }
}

/// The claim's arguments per endpoint slot, in the slots' order: `$2`–`$4` and `$6`–`$9` of
/// `claim_sql!`.
struct SlotArgs<'a> {
    ids: Vec<&'a str>,
    limits: Vec<i32>,
    leases: Vec<f64>,
    ordered: Vec<bool>,
    dead_letter: Vec<&'a str>,
    /// Where each slot's claim starts (see [`super::cursors`]).
    after: Vec<Option<Position>>,
}

impl<'a> SlotArgs<'a> {
    fn of(slots: &'a [EndpointSlot], start: impl Fn(&EndpointSlot) -> Option<Position>) -> Self {
        Self {
            ids: slots.iter().map(|s| s.endpoint.id.as_str()).collect(),
            limits: (slots.iter())
                .map(|s| s.limit.try_into().unwrap_or(i32::MAX))
                .collect(),
            leases: slots.iter().map(|s| s.lease.as_secs_f64()).collect(),
            ordered: slots.iter().map(|s| ordered(&s.endpoint)).collect(),
            dead_letter: slots
                .iter()
                .map(|s| dead_letter_status(&s.endpoint))
                .collect(),
            after: slots.iter().map(start).collect(),
        }
    }

    /// `$2` to `$9` bound after `$1` on `query`, with `limit` in all as `$5`.
    fn bind<'q>(&'q self, query: PgQuery<'q>, limit: u32) -> PgQuery<'q> {
        let after_at: Vec<Option<DateTime<Utc>>> =
            self.after.iter().map(|a| a.map(|p| p.0)).collect();
        let after_id: Vec<Option<i64>> = self.after.iter().map(|a| a.map(|p| p.1)).collect();
        query
            .bind(&self.ids)
            .bind(&self.limits)
            .bind(&self.leases)
            .bind(i64::from(limit))
            .bind(&self.ordered)
            .bind(&self.dead_letter)
            .bind(after_at)
            .bind(after_id)
    }
}

type PgQuery<'q> = sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>;

fn millis(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The event of a leased row, as the claim's `RETURNING` and the relay's born rows read it.
pub(super) fn event_snapshot(r: &PgRow) -> Result<EventSnapshot> {
    Ok(EventSnapshot {
        event_id: r.try_get("event_id")?,
        event_type: r.try_get("event_type")?,
        version: r.try_get("version")?,
        occurred_at: r.try_get("occurred_at")?,
        aggregate_id: r.try_get("aggregate_id")?,
        payload: r.try_get("payload")?,
    })
}

fn claimed(
    r: &PgRow,
    slots: &HashMap<&str, &EndpointSlot>,
    sent_at: Instant,
) -> Result<ClaimedDelivery> {
    let endpoint_id: String = r.try_get("endpoint_id")?;
    let slot = slots
        .get(endpoint_id.as_str())
        .ok_or_else(|| StoreError::Corrupt {
            table: "kurir_deliveries",
            message: format!("claimed a row of unrequested endpoint {endpoint_id}"),
        })?;
    Ok(ClaimedDelivery {
        delivery_id: r.try_get("id")?,
        attempt: u32::try_from(r.try_get::<i32, _>("attempt_count")?).unwrap_or(0),
        trigger: Trigger::from_db(r.try_get("trigger")?),
        event: event_snapshot(r)?,
        endpoint: slot.endpoint.clone(),
        lease_deadline: sent_at + slot.lease,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::postgres::tests::{drop_database, fresh_database};

    /// The claim's head check on an aggregate with a long history and a few hundred deliveries
    /// blocked behind its head reads only `kurir_deliveries_ordering`: no table scan, no walk of
    /// another index, with the plan for these arguments and the generic one a prepared statement
    /// may switch to, whatever the statistics say: taken when the history was still pending
    /// (then with the history sent, as between autovacuum's ANALYZEs) and after it was sent.
    /// Written as one `NOT EXISTS` over the statuses, each blocked row's check was a sequential
    /// scan; as a probe per status ordered by `outbox_id`, a walk of the outbox-id index.
    #[tokio::test]
    async fn the_head_check_reads_the_ordering_index_whatever_the_history() {
        let Some((url, admin, name)) = fresh_database().await else {
            return;
        };
        let store = PgStore::connect(&url).await.unwrap();
        let mut plans = Vec::new();
        for setup in [
            "INSERT INTO kurir_endpoints (id, url, secret, ordering) \
             VALUES ('ep', 'https://x', 's', 'aggregate')",
            "INSERT INTO kurir_outbox (event_type, payload, dispatched_at) \
             SELECT 'order.paid', '{}', now() FROM generate_series(1, 30300)",
            "INSERT INTO kurir_deliveries (outbox_id, event_id, endpoint_id, ordering_key) \
             SELECT id, event_id, 'ep', 'order:1' FROM kurir_outbox",
            "ANALYZE",
            "UPDATE kurir_deliveries SET status = 'sent' WHERE outbox_id <= 30000",
            "ANALYZE",
        ] {
            sqlx::query(setup).execute(store.pool()).await.unwrap();
            if setup.starts_with("ANALYZE") || setup.starts_with("UPDATE") {
                plans.extend(claim_plans(&store).await);
            }
        }
        store.close().await;
        drop_database(&admin, &name).await;
        let allowed = ["kurir_deliveries_due", "kurir_deliveries_pkey"];
        for plan in plans {
            let start = "ROW(available_at, id) > ROW(COALESCE(";
            assert!(plan.to_string().contains(start), "{plan}");
            let mut scans = Vec::new();
            scans_of(&plan, &mut scans);
            let on_deliveries = scans
                .iter()
                .filter(|(node, on)| node.ends_with("Scan") && on.starts_with("kurir_deliveries"));
            assert!(
                scans
                    .iter()
                    .any(|(_, on)| on == "kurir_deliveries_ordering")
                    && on_deliveries.clone().all(|(_, on)| {
                        allowed.contains(&on.as_str()) || on == "kurir_deliveries_ordering"
                    }),
                "{scans:?}"
            );
        }
    }

    /// The plans of both claims for one ordered endpoint, as planned for these arguments and as
    /// a generic plan, and of the claim from a cursor (whose start is an index condition).
    async fn claim_plans(store: &PgStore) -> Vec<serde_json::Value> {
        let mut plans = Vec::new();
        let cursor = Some((Utc::now(), 1));
        for (sql, generic, after) in [
            (CLAIM_SQL, false, None),
            (CLAIM_SQL, true, None),
            (CLAIM_SQL, false, cursor),
            (CLAIM_SQL, true, cursor),
            (CLAIM_LOOKING_SQL, false, None),
            (CLAIM_LOOKING_SQL, true, None),
        ] {
            let mut tx = store.pool().begin().await.unwrap();
            if generic {
                sqlx::query("SET LOCAL plan_cache_mode = force_generic_plan")
                    .execute(&mut *tx)
                    .await
                    .unwrap();
            }
            let explain = format!("EXPLAIN (FORMAT JSON) {sql}");
            let mut query = sqlx::query_scalar(&explain)
                .bind("w")
                .bind(vec!["ep"])
                .bind(vec![10i32])
                .bind(vec![30.0f64])
                .bind(100i64)
                .bind(vec![true])
                .bind(vec!["dead_letter"])
                .bind(vec![after.map(|a: Position| a.0)])
                .bind(vec![after.map(|a| a.1)]);
            if sql == CLAIM_LOOKING_SQL {
                query = query.bind(ORPHAN_WALK);
            }
            plans.push(query.fetch_one(&mut *tx).await.unwrap());
        }
        plans
    }

    /// Each node of `plan` as (node type, index or else relation it reads or writes).
    fn scans_of(plan: &serde_json::Value, out: &mut Vec<(String, String)>) {
        let text = |key: &str| plan.get(key).and_then(|v| v.as_str()).map(str::to_owned);
        if let Some(node) = text("Node Type") {
            let on = text("Index Name").or_else(|| text("Relation Name"));
            out.push((node, on.unwrap_or_default()));
        }
        match plan {
            serde_json::Value::Array(items) => items.iter().for_each(|p| scans_of(p, out)),
            serde_json::Value::Object(map) => map.values().for_each(|p| scans_of(p, out)),
            _ => {}
        }
    }
}
