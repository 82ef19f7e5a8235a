//! Fanning events out and recording attempts on MySQL and MariaDB: the relay's batch and the
//! completion writer's, each one transaction over a JSON array of rows (see the parent module
//! for why `JSON_TABLE`).

use std::time::Duration;

use sqlx::{MySql, Row, Transaction};
use tokio::time::Instant;

use super::{datetime, MySqlStore};
use crate::catalog::Checks;
use crate::delivery::{Completion, Trigger};
use crate::store::born::{births, Births};
use crate::store::cursor::{suspect, Look};
use crate::store::directory::read_directory;
use crate::store::event_list::{ids_json, LIST_BATCH};
use crate::store::ordering::EARLIER_BATCHES;
use crate::store::rows::OutboxHead;
use crate::store::rules::{fan_out, gone_endpoints, next_at, next_status, FanOut};
use crate::store::sql::{positional, run_in};
use crate::store::{BirthOffer, EndpointSlot, Leased, OutboxLook, Relayed, Result};
use kurir_sql::mysql::{bind_all, in_list};

/// The endpoints' change number, read by a relay batch: shared-locked, so an endpoint's write
/// (which raises it, see `store::directory::BUMP_MYSQL`) waits for the batches reading the
/// endpoints, and a batch that starts after the write sees its number.
const SEQ_SHARED: &str = "SELECT seq FROM kurir_endpoint_changes LOCK IN SHARE MODE";

/// Locks the pace's row without waiting, when no relay batch ran within the pace (`?`,
/// microseconds): no row when one did, or when another paced batch holds it now.
const PACE_DUE: &str = "SELECT 1 FROM kurir_relay_pace \
     WHERE moved_at <= UTC_TIMESTAMP(3) - INTERVAL ? MICROSECOND FOR UPDATE SKIP LOCKED";

/// Whether a batch may run now: no `pace`, or [`PACE_DUE`] locked the pace's row.
async fn pace_due(tx: &mut sqlx::MySqlConnection, pace: Option<Duration>) -> Result<bool> {
    let Some(pace) = pace else {
        return Ok(true);
    };
    let due: Option<i64> = sqlx::query_scalar(PACE_DUE)
        .bind(i64::try_from(pace.as_micros()).unwrap_or(i64::MAX))
        .fetch_optional(tx)
        .await?;
    Ok(due.is_some())
}

/// A relay batch ran: the installation's pace counts from now (see [`crate::relay`]).
const PACE_MOVED: &str = "UPDATE kurir_relay_pace SET moved_at = UTC_TIMESTAMP(3)";

/// The completions of [`MySqlStore::complete_deliveries`] as rows `x`, from one JSON array of
/// arrays (the first bind).
const COMPLETIONS: &str = "JSON_TABLE(?, '$[*]' COLUMNS ( \
        id BIGINT PATH '$[0]', attempt INT PATH '$[1]', `trigger` VARCHAR(16) PATH '$[2]', \
        started_at DATETIME(3) PATH '$[3]', duration_ms BIGINT PATH '$[4]', code INT PATH '$[5]', \
        err LONGTEXT PATH '$[6]', body LONGTEXT PATH '$[7]', status VARCHAR(16) PATH '$[8]', \
        next_at DATETIME(3) PATH '$[9]')) AS x";

/// The deliveries of a batch, from one JSON array of `[outbox_id, event_id, endpoint_id,
/// ordering_key, lease_us]` (the second bind): a row with a lease (in microseconds) is born
/// claimed to the first bind, leased as the claim leases (`leases::lease_slot`); one with `0`
/// is inserted pending. IGNORE skips a pair that already has its delivery (the unique key); the
/// values are kurir's own, so no other error can be downgraded by it.
const INSERT_SQL: &str = "INSERT IGNORE INTO kurir_deliveries (outbox_id, event_id, \
         endpoint_id, ordering_key, status, lease_owner, lease_expires_at, attempt_count) \
     SELECT x.outbox_id, x.event_id, x.endpoint_id, x.ordering_key, \
         CASE WHEN x.lease_us > 0 THEN 'processing' ELSE 'pending' END, \
         CASE WHEN x.lease_us > 0 THEN ? END, \
         CASE WHEN x.lease_us > 0 \
             THEN DATE_ADD(UTC_TIMESTAMP(3), INTERVAL x.lease_us MICROSECOND) END, \
         CASE WHEN x.lease_us > 0 THEN 1 ELSE 0 END \
     FROM JSON_TABLE(?, '$[*]' COLUMNS ( \
         outbox_id BIGINT PATH '$[0]', event_id VARCHAR(256) PATH '$[1]', \
         endpoint_id VARCHAR(255) PATH '$[2]', ordering_key VARCHAR(520) PATH '$[3]', \
         lease_us BIGINT PATH '$[4]')) AS x";

/// Records the batch's refused rows with their reasons (one JSON array of `[id, reason]`),
/// inside the relay's transaction (which then marks them dispatched with the rest of its batch).
async fn refuse(tx: &mut sqlx::MySqlConnection, out: &FanOut) -> Result<()> {
    if out.refused.is_empty() {
        return Ok(());
    }
    sqlx::query(
        "UPDATE kurir_outbox AS o JOIN JSON_TABLE(?, '$[*]' COLUMNS ( \
             id BIGINT PATH '$[0]', reason LONGTEXT PATH '$[1]')) AS x ON o.id = x.id \
         SET o.refused_reason = x.reason",
    )
    .bind(out.refused_json())
    .execute(tx)
    .await?;
    Ok(())
}

/// Records the batch's refusals, lists its rows (`store::event_list`) and marks them
/// dispatched, in the relay's transaction.
async fn pass(tx: &mut sqlx::MySqlConnection, out: &FanOut) -> Result<()> {
    refuse(&mut *tx, out).await?;
    let ids = ids_json(&out.dispatched);
    run_in!(tx, mysql, LIST_BATCH, query, execute, ids)?;
    let sql = format!(
        "UPDATE kurir_outbox SET dispatched_at = UTC_TIMESTAMP(3) WHERE {}",
        in_list("id", out.dispatched.len())
    );
    bind_all(sqlx::query(&sql), &out.dispatched)
        .execute(&mut *tx)
        .await?;
    Ok(())
}

impl MySqlStore {
    /// Whether the outbox has undispatched rows, and when a relay batch last ran: one index
    /// probe and the pace's row, no transaction, no lock.
    pub(in crate::store) async fn outbox_look(&self) -> Result<OutboxLook> {
        let look: Look = sqlx::query_as(crate::store::cursor::OUTBOX_PENDING_MYSQL)
            .fetch_one(&self.pool)
            .await?;
        Ok(look.into())
    }

    /// One transaction: locks up to `limit` undispatched outbox rows with `FOR UPDATE SKIP
    /// LOCKED` (concurrent relays take disjoint batches; a row the application has inserted but
    /// not committed is locked by its insert and skipped, so ids committing out of order are
    /// never a gap the relay steps over: it looks by `dispatched_at IS NULL`, not past an id),
    /// reads the endpoints' change number `LOCK IN SHARE MODE` (relays share it; an endpoint's
    /// change or deletion raises it, so waits for this batch, and a batch that starts after it
    /// sees the change) and the endpoints changed since the last batch (`store::directory`),
    /// inserts the deliveries (those `offer` has room for born claimed, see `store::born`) and marks the
    /// rows dispatched and lists them (`store::event_list`). A batch with deliveries to keep in
    /// order first waits for the earlier undispatched rows another transaction holds (see
    /// `store::ordering`): another relay's batch, or here also an application's insert of an
    /// earlier event not yet committed. With a `pace`, the batch first takes the row of
    /// `kurir_relay_pace` without waiting and goes ahead only if no batch ran within the pace
    /// (paced batches so run one at a time); every batch sets the row's time before it commits.
    pub(in crate::store) async fn relay_batch(
        &self,
        limit: u32,
        offer: Option<&mut dyn BirthOffer>,
        checks: &Checks,
        pace: Option<Duration>,
    ) -> Result<Relayed> {
        let sent_at = Instant::now();
        let mut tx = self.pool.begin().await?;
        if !pace_due(&mut tx, pace).await? {
            tx.commit().await?;
            return Ok(Relayed::default());
        }
        let events: Vec<OutboxHead> = sqlx::query_as(concat!(
            "SELECT id, CAST(event_id AS CHAR) AS event_id, CAST(event_type AS CHAR) AS event_type, \
                 CAST(aggregate_type AS CHAR) AS aggregate_type, \
                 CAST(aggregate_id AS CHAR) AS aggregate_id, version, created_at, \
                 CAST(subscriber_id AS CHAR) AS subscriber_id, \
                 CASE WHEN ? THEN CAST(payload AS CHAR) END AS payload, ",
            suspect!(mysql),
            " FROM kurir_outbox \
             WHERE dispatched_at IS NULL ORDER BY id LIMIT ? FOR UPDATE SKIP LOCKED"
        ))
        .bind(checks.reads_payloads())
        .bind(i64::from(limit))
        .fetch_all(&mut *tx)
        .await?;
        if events.is_empty() {
            // Explicitly: a dropped transaction is rolled back only when its connection is next
            // used, and until then keeps what it locked.
            tx.commit().await?;
            return Ok(Relayed::default());
        }
        let endpoints = read_directory!(self.directory, &self.secrets, &mut *tx, mysql, SEQ_SHARED);
        let out = fan_out(events, &endpoints, checks);
        if let Some(first) = out.ordered_from() {
            let (sql, _) = positional(EARLIER_BATCHES);
            sqlx::query(&sql).bind(first).execute(&mut *tx).await?;
        }
        let room = offer.and_then(|o| o.reserve(&out.targets));
        let births = births(&out, room);
        let inserted = sqlx::query(INSERT_SQL)
            .bind(births.owner)
            .bind(births.json_rows(&out, lease_us, 0.into()))
            .execute(&mut *tx)
            .await?
            .rows_affected();
        let leased = born_rows(&mut tx, &out, &births).await?;
        let events = super::leases::events_of(&mut tx, &leased).await?;
        pass(&mut tx, &out).await?;
        sqlx::query(PACE_MOVED).execute(&mut *tx).await?;
        tx.commit().await?;
        Ok(Relayed {
            born: leased
                .into_iter()
                .map(|l| l.claimed(&events, sent_at))
                .collect::<Result<_>>()?,
            outcome: out.outcome(inserted),
        })
    }

    /// One transaction of three statements over the completions as one JSON array: the attempt
    /// rows, the fenced update (a delivery moves on only where its last lease is `owner`'s at
    /// the same attempt number; each row locked by primary key), and endpoints that answered
    /// 410. The attempts of a delivery deleted meanwhile (its endpoint was) are dropped with it.
    pub(in crate::store) async fn complete_deliveries(
        &self,
        owner: &str,
        done: &[Completion],
    ) -> Result<u64> {
        let rows = completion_rows(done);
        let gone = gone_endpoints(done);
        let mut tx = self.pool.begin().await?;
        sqlx::query(&format!(
            "INSERT INTO kurir_attempts (delivery_id, attempt, `trigger`, started_at, duration_ms, \
                 status_code, error, response_body, worker) \
             SELECT x.id, x.attempt, x.`trigger`, x.started_at, x.duration_ms, x.code, x.err, \
                 x.body, ? FROM {COMPLETIONS} \
             WHERE EXISTS (SELECT 1 FROM kurir_deliveries AS d WHERE d.id = x.id)"
        ))
        .bind(owner)
        .bind(&rows)
        .execute(&mut *tx)
        .await?;
        let ids: Vec<i64> = done.iter().map(|c| c.delivery_id).collect();
        let sql = format!(
            "UPDATE kurir_deliveries AS d JOIN {COMPLETIONS} ON d.id = x.id \
             SET d.status = x.status, d.available_at = COALESCE(x.next_at, d.available_at), \
                 d.lease_owner = NULL, d.lease_expires_at = NULL, d.last_status_code = x.code, \
                 d.last_error = x.err, \
                 d.sent_at = CASE WHEN x.status = 'sent' THEN UTC_TIMESTAMP(3) ELSE d.sent_at END, \
                 d.`trigger` = 'scheduled', d.updated_at = UTC_TIMESTAMP(3) \
             WHERE d.attempt_count = x.attempt AND d.lease_owner = ? \
               AND d.status IN ('processing', 'failed', 'dead_letter') AND {}",
            in_list("d.id", ids.len())
        );
        let moved = bind_all(sqlx::query(&sql).bind(&rows).bind(owner), &ids)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        if !gone.is_empty() {
            let sql = format!(
                "UPDATE kurir_endpoints SET enabled = FALSE, updated_at = UTC_TIMESTAMP(3), \
                     disabled_reason = CONCAT('the endpoint answered 410 Gone at ', \
                         DATE_FORMAT(UTC_TIMESTAMP(), '%Y-%m-%dT%H:%i:%sZ')) \
                 WHERE enabled AND {}",
                in_list("id", gone.len())
            );
            bind_all(sqlx::query(&sql), &gone).execute(&mut *tx).await?;
            crate::store::directory::stamp_mysql(&mut tx, &gone).await?;
        }
        tx.commit().await?;
        Ok(done.len() as u64 - moved)
    }
}

/// A born row's lease in microseconds.
fn lease_us(slot: &EndpointSlot) -> serde_json::Value {
    i64::try_from(slot.lease.as_micros())
        .unwrap_or(i64::MAX)
        .max(1)
        .into()
}

/// The rows [`INSERT_SQL`] inserted born claimed (MySQL has no `INSERT … RETURNING`): this
/// batch's rows leased to the owner, found by the batch's locked outbox rows, whose deliveries
/// only this transaction can have written.
async fn born_rows<'a>(
    tx: &mut Transaction<'static, MySql>,
    out: &FanOut,
    births: &Births<'a>,
) -> Result<Vec<Leased<'a>>> {
    let mut outbox_ids: Vec<i64> = (out.outbox_ids.iter())
        .zip(&births.rows)
        .filter(|(_, slot)| slot.is_some())
        .map(|(id, _)| *id)
        .collect();
    outbox_ids.dedup();
    if outbox_ids.is_empty() {
        return Ok(Vec::new());
    }
    let sql = format!(
        "SELECT id, outbox_id, CAST(endpoint_id AS CHAR) AS endpoint_id FROM kurir_deliveries \
         WHERE lease_owner = ? AND status = 'processing' AND attempt_count = 1 AND {}",
        in_list("outbox_id", outbox_ids.len())
    );
    let rows = bind_all(sqlx::query(&sql).bind(births.owner), &outbox_ids)
        .fetch_all(&mut **tx)
        .await?;
    rows.iter()
        .map(|r| {
            Ok(Leased {
                delivery_id: r.try_get("id")?,
                outbox_id: r.try_get("outbox_id")?,
                attempt: 1,
                trigger: Trigger::Scheduled,
                slot: births.slot(r.try_get("endpoint_id")?)?,
            })
        })
        .collect()
}

/// The completions as one JSON array of arrays, in [`COMPLETIONS`]' column order.
fn completion_rows(done: &[Completion]) -> String {
    let rows: Vec<serde_json::Value> = done
        .iter()
        .map(|c| {
            serde_json::json!([
                c.delivery_id,
                c.attempt,
                c.trigger.as_str(),
                datetime(c.started_at),
                c.duration_ms,
                c.status_code,
                c.error.as_deref(),
                c.response_body.as_deref(),
                next_status(&c.next),
                next_at(&c.next).map(datetime),
            ])
        })
        .collect();
    serde_json::Value::Array(rows).to_string()
}
