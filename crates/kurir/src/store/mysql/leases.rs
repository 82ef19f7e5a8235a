//! Taking and giving back leases on MySQL and MariaDB: the claim, the shutdown release, the
//! lease sweep, and the removal of deliveries whose event or endpoint was deleted by hand.
//!
//! Each is one transaction that first locks the rows it will change with `FOR UPDATE SKIP
//! LOCKED` (rows another process holds are skipped, never waited for), then changes them by id:
//! MySQL has no `UPDATE … RETURNING` to do both at once.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering::Relaxed;

use chrono::{DateTime, Utc};
use sqlx::{FromRow, MySql, Row, Transaction};

use super::ordered::{self, head_of_aggregate};
use super::orphans::{delete_deliveries, remove_orphans};
use super::MySqlStore;
use crate::delivery::{ClaimedDelivery, EventSnapshot, Trigger};
use crate::store::ordering::{dead_letter_status, ordered};
use crate::store::rows::SnapshotRow;
use crate::store::{
    Claim, ClaimAsk, EndpointSlot, LeaseEnd, Leased, Orphan, OrphanReason, Requeued, Result,
};
use kurir_sql::mysql::{bind_all, in_list};

/// One endpoint's oldest due rows whose event exists, locked, with what the lease leaves as it
/// was and the attempt count it increments (so nothing is read again). `due_at` is the
/// generated column that holds `available_at` only while a row is due (migration 0001), so the
/// index range reads due rows alone; the index is forced, since with the subqueries MariaDB
/// chose to read all of the endpoint's rows, sent ones included. Of an ordered endpoint's
/// aggregate only the head is taken (see `store::ordering`; the third bind tells whether the
/// endpoint is ordered, the fourth the status a dead-letter holds): candidates only, since the
/// head check is a consistent read, which the outer `FOR UPDATE` does not make a locking one
/// (see [`ordered::not_heads`]).
const DUE_SQL: &str = concat!(
    "SELECT d.id, d.outbox_id, d.attempt_count, \
         CAST(d.`trigger` AS CHAR) AS `trigger`, d.available_at \
     FROM kurir_deliveries AS d FORCE INDEX (kurir_deliveries_due) \
     WHERE d.endpoint_id = ? AND d.due_at <= UTC_TIMESTAMP(3) \
       AND EXISTS (SELECT 1 FROM kurir_outbox AS o WHERE o.id = d.outbox_id) \
       AND (d.ordering_key IS NULL OR NOT ? OR ",
    head_of_aggregate!(),
    ") ORDER BY d.due_at LIMIT ? FOR UPDATE SKIP LOCKED"
);

/// Ends the leases of the rows named after it (`requeue_sql`), counting each as an attempt: dead-letters the delivery at
/// its endpoint's maximum, else makes it due after the retry backoff, as
/// `kurir_core::retry::RetryPolicy` computes it after that attempt (`initial · 2^(n−1)` capped,
/// moved by the jitter, capped again). The endpoint's overrides apply, else the defaults: the
/// binds are the attempts, the initial and the longest delay in ms, the jitter and the
/// `last_error`, then the row ids. A delay is capped at 100 years. No assignment reads a
/// column another one writes (a multi-table `UPDATE` does not promise their order).
/// `lease_owner` is left as it was: the lease's owner may still record the outcome of the
/// attempt until the delivery is claimed again (see `Store::complete_deliveries`).
const REQUEUE_SQL: &str = "UPDATE kurir_deliveries AS d \
     LEFT JOIN kurir_endpoints AS e ON e.id = d.endpoint_id \
     CROSS JOIN (SELECT ? AS max_attempts, ? AS initial_ms, ? AS max_ms, ? AS jitter, \
         ? AS error) AS p \
     SET d.status = CASE WHEN d.attempt_count >= COALESCE(e.retry_max_attempts, p.max_attempts) \
             THEN 'dead_letter' ELSE 'failed' END, \
         d.available_at = CASE WHEN d.attempt_count >= COALESCE(e.retry_max_attempts, p.max_attempts) \
             THEN d.available_at \
             ELSE DATE_ADD(UTC_TIMESTAMP(3), INTERVAL FLOOR(1000 * LEAST(3153600000000, \
                 COALESCE(e.retry_max_delay_ms, p.max_ms), \
                 LEAST(COALESCE(e.retry_max_delay_ms, p.max_ms), \
                     COALESCE(e.retry_initial_delay_ms, p.initial_ms) \
                     * POW(2, LEAST(GREATEST(d.attempt_count - 1, 0), 62))) \
                 * (1 + p.jitter * (2 * RAND() - 1)))) MICROSECOND) END, \
         d.last_error = CASE WHEN d.attempt_count >= COALESCE(e.retry_max_attempts, p.max_attempts) \
             THEN CONCAT(p.error, '; no attempts left') ELSE p.error END, \
         d.lease_expires_at = NULL, d.updated_at = UTC_TIMESTAMP(3) WHERE ";

impl MySqlStore {
    /// One transaction: per endpoint slot, locks its oldest due rows whose event exists and
    /// leases them; then, now and then (see `OrphanLooks`), removes the orphans among the due
    /// rows those reads went past; and reads the leased rows' events. The row locks end with the
    /// transaction; the lease is what protects a row during the HTTP call. The transaction is
    /// `READ COMMITTED` whatever the session's level (`from_pool` takes the application's pool
    /// as it is), so each of its statements reads a new snapshot (see [`ordered::not_heads`]).
    pub(in crate::store) async fn claim_due_deliveries(&self, ask: ClaimAsk<'_>) -> Result<Claim> {
        if self.idle.load(Relaxed) && !self.anything_due(ask.slots).await? {
            return Ok(Claim::default());
        }
        let looking = self.orphan_looks.due();
        let mut remaining = ask.limit;
        let mut leased = Vec::new();
        let mut orphans = Vec::new();
        let mut tx = self
            .pool
            .begin_with("SET TRANSACTION ISOLATION LEVEL READ COMMITTED; BEGIN")
            .await?;
        for slot in ask.slots {
            if remaining == 0 {
                break;
            }
            let want = slot.limit.min(remaining);
            let (rows, read, last) = lease_slot(&mut tx, ask.owner, slot, want).await?;
            remaining -= rows.len() as u32;
            if looking {
                // Fewer than asked for: every due row of the endpoint was read.
                let upto = if (read as u32) < want {
                    Some(None)
                } else {
                    last.map(Some)
                };
                if let Some(upto) = upto {
                    orphans.extend(remove_orphans(&mut tx, slot, upto).await?);
                }
            }
            leased.extend(rows);
        }
        let events = events_of(&mut tx, &leased).await?;
        tx.commit().await?;
        self.idle.store(leased.is_empty(), Relaxed);
        if looking {
            self.orphan_looks.looked(!orphans.is_empty());
        }
        Claim::of_leased(leased, &events, ask.sent_at, orphans)
    }

    /// Whether any of `slots`' endpoints has a due row: one read of the due index, outside a
    /// transaction and without locks. An idle process's claim is then that one statement, not
    /// the `BEGIN`, locking read and `COMMIT` of an empty claim (MySQL has no notification to
    /// wait for instead, so idle processes poll). Rows of an aggregate waiting for its head
    /// count as due: the claim proper sorts them out.
    async fn anything_due(&self, slots: &[EndpointSlot]) -> Result<bool> {
        if slots.is_empty() {
            return Ok(false);
        }
        let ids: Vec<&str> = slots.iter().map(|s| s.endpoint.id.as_str()).collect();
        let sql = format!(
            "SELECT 1 FROM kurir_deliveries FORCE INDEX (kurir_deliveries_due) \
             WHERE {} AND due_at <= UTC_TIMESTAMP(3) LIMIT 1",
            in_list("endpoint_id", ids.len())
        );
        let found = bind_all(sqlx::query(&sql), &ids)
            .fetch_optional(&self.pool)
            .await?;
        Ok(found.is_some())
    }

    /// A read finds the endpoint ids of deliveries with no endpoint (one index entry per
    /// endpoint, `DISTINCT` on the index's first column); then one transaction locks up to
    /// `limit` of their rows (skipping locked ones), deletes them and their attempts.
    pub(in crate::store) async fn remove_deliveries_of_deleted_endpoints(
        &self,
        limit: u32,
    ) -> Result<Vec<Orphan>> {
        let gone: Vec<String> = sqlx::query_scalar(
            "SELECT CAST(o.endpoint_id AS CHAR) FROM \
                 (SELECT DISTINCT endpoint_id FROM kurir_deliveries) AS o \
             WHERE NOT EXISTS (SELECT 1 FROM kurir_endpoints AS e WHERE e.id = o.endpoint_id)",
        )
        .fetch_all(&self.pool)
        .await?;
        if gone.is_empty() {
            return Ok(Vec::new());
        }
        let mut tx = self.pool.begin().await?;
        let sql = format!(
            "SELECT id, CAST(endpoint_id AS CHAR) AS endpoint_id, CAST(event_id AS CHAR) AS event_id \
             FROM kurir_deliveries WHERE {} LIMIT ? FOR UPDATE SKIP LOCKED",
            in_list("endpoint_id", gone.len())
        );
        let rows = bind_all(sqlx::query(&sql), &gone)
            .bind(i64::from(limit))
            .fetch_all(&mut *tx)
            .await?;
        let removed = rows
            .iter()
            .map(|r| Orphan::of_row(r, OrphanReason::EndpointDeleted))
            .collect::<Result<Vec<_>>>()?;
        delete_deliveries(&mut tx, &removed).await?;
        tx.commit().await?;
        Ok(removed)
    }

    /// One statement, fenced like a completion; locks the rows by primary key.
    pub(in crate::store) async fn hand_back(
        &self,
        owner: &str,
        deliveries: &[ClaimedDelivery],
    ) -> Result<u64> {
        let rows: Vec<[i64; 2]> = deliveries
            .iter()
            .map(|d| [d.delivery_id, i64::from(d.attempt)])
            .collect();
        let ids: Vec<i64> = deliveries.iter().map(|d| d.delivery_id).collect();
        let sql = format!(
            "UPDATE kurir_deliveries AS d JOIN JSON_TABLE(?, '$[*]' COLUMNS ( \
                 id BIGINT PATH '$[0]', attempt INT PATH '$[1]')) AS x ON d.id = x.id \
             SET d.status = CASE WHEN x.attempt > 1 THEN 'failed' ELSE 'pending' END, \
                 d.attempt_count = x.attempt - 1, d.lease_owner = NULL, \
                 d.lease_expires_at = NULL, d.updated_at = UTC_TIMESTAMP(3) \
             WHERE d.status = 'processing' AND d.lease_owner = ? AND d.attempt_count = x.attempt \
               AND {}",
            in_list("d.id", ids.len())
        );
        let rows = serde_json::to_string(&rows).unwrap_or_default();
        let done = bind_all(sqlx::query(&sql).bind(&rows).bind(owner), &ids)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected())
    }

    /// One transaction over the leases `end` names (see [`REQUEUE_SQL`]); expired ones are
    /// found through the index of leased rows. The row locks it takes (skipping locked ones)
    /// keep concurrent sweeps from moving a row twice. The sweep first looks for an expired
    /// lease outside a transaction: one statement, not three, for the sweep that finds none.
    pub(in crate::store) async fn requeue(&self, end: LeaseEnd<'_>) -> Result<Requeued> {
        if end.owner.is_none() {
            let expired: Option<i64> = sqlx::query_scalar(
                "SELECT id FROM kurir_deliveries WHERE leased_until < UTC_TIMESTAMP(3) LIMIT 1",
            )
            .fetch_optional(&self.pool)
            .await?;
            if expired.is_none() {
                return Ok(Requeued::default());
            }
        }
        let lock = match end.owner {
            Some(_) => {
                "SELECT id FROM kurir_deliveries \
                 WHERE leased_until IS NOT NULL AND lease_owner = ? FOR UPDATE SKIP LOCKED"
            }
            None => {
                "SELECT id FROM kurir_deliveries \
                 WHERE leased_until < UTC_TIMESTAMP(3) FOR UPDATE SKIP LOCKED"
            }
        };
        let millis = |d: std::time::Duration| d.as_secs_f64() * 1000.0;
        let mut tx = self.pool.begin().await?;
        let ids: Vec<i64> = sqlx::query_scalar(lock)
            .bind(end.owner)
            .fetch_all(&mut *tx)
            .await?;
        if ids.is_empty() {
            tx.commit().await?;
            return Ok(Requeued::default());
        }
        let sql = format!("{REQUEUE_SQL}{}", in_list("d.id", ids.len()));
        let requeue = sqlx::query(&sql)
            .bind(i64::from(end.defaults.max_attempts))
            .bind(millis(end.defaults.initial_delay))
            .bind(millis(end.defaults.max_delay))
            .bind(end.defaults.jitter)
            .bind(end.error());
        bind_all(requeue, &ids).execute(&mut *tx).await?;
        let sql = format!(
            "SELECT COUNT(*), CAST(COALESCE(SUM(status = 'dead_letter'), 0) AS SIGNED) \
             FROM kurir_deliveries WHERE {}",
            in_list("id", ids.len())
        );
        let counts = bind_all(sqlx::query(&sql), &ids)
            .fetch_one(&mut *tx)
            .await?;
        let dead: (i64, i64) = (counts.try_get(0)?, counts.try_get(1)?);
        tx.commit().await?;
        let (total, dead_lettered) = (dead.0 as u64, dead.1 as u64);
        Ok(Requeued {
            retried: total - dead_lettered,
            dead_lettered,
        })
    }
}

/// Leases up to `want` of `slot`'s due rows; returns them, how many due rows were read (and
/// locked), and the latest `available_at` among those (how far the endpoint's due rows were
/// read). Of an ordered endpoint, the rows read that are not heads when read again (see
/// [`ordered::not_heads`]) stay as they are.
async fn lease_slot<'a>(
    tx: &mut Transaction<'static, MySql>,
    owner: &str,
    slot: &'a EndpointSlot,
    want: u32,
) -> Result<(Vec<Leased<'a>>, usize, Option<DateTime<Utc>>)> {
    let dead_letter = dead_letter_status(&slot.endpoint);
    let due = sqlx::query(DUE_SQL)
        .bind(slot.endpoint.id.as_str())
        .bind(ordered(&slot.endpoint))
        .bind(dead_letter)
        .bind(i64::from(want))
        .fetch_all(&mut **tx)
        .await?;
    if due.is_empty() {
        return Ok((Vec::new(), 0, None));
    }
    let mut last = None;
    for r in &due {
        last = last.max(Some(r.try_get::<DateTime<Utc>, _>("available_at")?));
    }
    let read: Vec<i64> =
        (due.iter().map(|r| r.try_get("id"))).collect::<std::result::Result<_, _>>()?;
    let held_back = if ordered(&slot.endpoint) {
        ordered::not_heads(tx, dead_letter, &read).await?
    } else {
        HashSet::new()
    };
    let mut ids = Vec::with_capacity(due.len());
    let mut leased = Vec::with_capacity(due.len());
    for (r, &delivery_id) in due.iter().zip(&read) {
        if held_back.contains(&delivery_id) {
            continue;
        }
        ids.push(delivery_id);
        leased.push(Leased {
            delivery_id,
            outbox_id: r.try_get("outbox_id")?,
            // The lease below adds one to the count this row, locked since, was read with.
            attempt: u32::try_from(r.try_get::<i32, _>("attempt_count")? + 1).unwrap_or(0),
            trigger: Trigger::from_db(r.try_get("trigger")?),
            slot,
        });
    }
    if ids.is_empty() {
        return Ok((leased, read.len(), last));
    }
    let lease_us = i64::try_from(slot.lease.as_micros()).unwrap_or(i64::MAX);
    let sql = format!(
        "UPDATE kurir_deliveries SET status = 'processing', lease_owner = ?, \
             lease_expires_at = DATE_ADD(UTC_TIMESTAMP(3), INTERVAL ? MICROSECOND), \
             attempt_count = attempt_count + 1, updated_at = UTC_TIMESTAMP(3) WHERE {}",
        in_list("id", ids.len())
    );
    bind_all(sqlx::query(&sql).bind(owner).bind(lease_us), &ids)
        .execute(&mut **tx)
        .await?;
    Ok((leased, read.len(), last))
}

/// The events of `leased`, by outbox row id.
pub(super) async fn events_of(
    tx: &mut Transaction<'static, MySql>,
    leased: &[Leased<'_>],
) -> Result<HashMap<i64, EventSnapshot>> {
    if leased.is_empty() {
        return Ok(HashMap::new());
    }
    let outbox_ids: Vec<i64> = leased.iter().map(|l| l.outbox_id).collect();
    let sql = format!(
        "SELECT id, CAST(event_id AS CHAR) AS event_id, CAST(event_type AS CHAR) AS event_type, \
             version, occurred_at, CAST(aggregate_id AS CHAR) AS aggregate_id, \
             CAST(payload AS CHAR) AS payload \
         FROM kurir_outbox WHERE {}",
        in_list("id", outbox_ids.len())
    );
    let rows = bind_all(sqlx::query(&sql), &outbox_ids)
        .fetch_all(&mut **tx)
        .await?;
    rows.iter()
        .map(|r| Ok(SnapshotRow::from_row(r)?.into()))
        .collect()
}
