//! Fanning events out on PostgreSQL: the relay's batch.

use std::time::Duration;

use sqlx::postgres::PgRow;
use sqlx::Row;
use tokio::time::Instant;

use super::leases::event_snapshot;
use super::{PgStore, FAN_OUT_LOCK};
use crate::catalog::Checks;
use crate::delivery::{ClaimedDelivery, Trigger};
use crate::store::born::{births, Births};
use crate::store::cursor::{horizon_pg, past_cursor, suspect, Look, OUTBOX_PENDING_PG};
use crate::store::directory::{read_directory, SEQ};
use crate::store::event_list::LIST_BATCH;
use crate::store::rows::OutboxHead;
use crate::store::rules::{fan_out, FanOut};
use crate::store::{BirthOffer, OutboxLook, Relayed, Result};

/// The next rows past the cursor (see `store::cursor`), in cursor order; with their payloads
/// when `$3` (the event catalog has schemas to check them against).
const NEXT_ROWS: &str = concat!(
    "SELECT o.id, o.event_id, o.event_type, o.aggregate_type, o.aggregate_id, o.version, \
         o.created_at, o.subscriber_id, o.dispatched_at IS NOT NULL AS passed, \
         CASE WHEN $3 THEN o.payload::text END AS payload, ",
    suspect!(postgres),
    " FROM kurir_outbox o WHERE ",
    past_cursor!(postgres),
    " AND o.txid < $2::text::xid8 ORDER BY o.txid, o.id LIMIT $1"
);

/// Locks the cursor without waiting, and reads [`horizon_pg`] in the same statement: no row
/// when another relay holds the cursor. Also takes [`FAN_OUT_LOCK`] shared (`$1`), before the
/// endpoint directory is read (`store::directory`): that read then shows every deletion that
/// committed, and none can commit until this transaction does. (When the cursor is skipped the lock may have been
/// taken too; the transaction ends at once.) With a pace (`$2`, seconds), no row either when a
/// batch moved the cursor within it: the condition is checked again on the row as locked, so a
/// batch that committed while this one waited for the lock counts.
const LOCK_CURSOR: &str = concat!(
    "SELECT (",
    horizon_pg!(),
    ")::text AS horizon, pg_advisory_xact_lock_shared($1)::text AS fence \
     FROM kurir_relay_cursor \
     WHERE $2::float8 IS NULL OR moved_at <= now() - make_interval(secs => $2::float8) \
     FOR UPDATE SKIP LOCKED"
);

/// Moves the cursor to outbox row `$N`, as a `WITH` item of the statement inserting the
/// batch's deliveries: the cursor moves in the same statement as the rows it passes, and keeps
/// the batch's start as the installation's pace (`moved_at`, see [`crate::relay`]).
macro_rules! move_cursor {
    ($n:literal) => {
        concat!(
            "moved AS (UPDATE kurir_relay_cursor SET (txid, outbox_id, moved_at) = \
             (SELECT txid, id, now() FROM kurir_outbox WHERE id = $",
            $n,
            "))"
        )
    };
}

/// The deliveries of a batch with none born claimed; moves the cursor to `$5`.
const INSERT_PENDING: &str = concat!(
    "WITH ",
    move_cursor!(5),
    " INSERT INTO kurir_deliveries (outbox_id, event_id, endpoint_id, ordering_key) \
     SELECT * FROM unnest($1::int8[], $2::text[], $3::text[], $4::text[]) \
     ON CONFLICT (outbox_id, endpoint_id) DO NOTHING"
);

/// The deliveries of a batch with some born claimed (`$5`: the lease in seconds, `NULL` for a
/// row inserted pending; `$6`: the owner), leased as `claim_sql!` leases. Returns one row with
/// the number inserted (`summary`), then each born row with its event (read as the claim's
/// `RETURNING` reads it); rows inserted pending are not sent back. Moves the cursor to `$7`.
const INSERT_BORN: &str = concat!(
    "WITH ",
    move_cursor!(7),
    ", ins AS ( \
        INSERT INTO kurir_deliveries (outbox_id, event_id, endpoint_id, ordering_key, status, \
            lease_owner, lease_expires_at, attempt_count) \
        SELECT o, e, p, k, CASE WHEN l IS NULL THEN 'pending' ELSE 'processing' END, \
            CASE WHEN l IS NULL THEN NULL ELSE $6::text END, \
            now() + make_interval(secs => l), CASE WHEN l IS NULL THEN 0 ELSE 1 END \
        FROM unnest($1::int8[], $2::text[], $3::text[], $4::text[], $5::float8[]) \
            AS x(o, e, p, k, l) \
        ON CONFLICT (outbox_id, endpoint_id) DO NOTHING \
        RETURNING id, outbox_id, endpoint_id, lease_owner IS NOT NULL AS born \
     ) \
     SELECT TRUE AS summary, count(*) AS id, NULL::text AS endpoint_id, NULL::text AS event_id, \
         NULL::text AS event_type, NULL::int4 AS version, NULL::timestamptz AS occurred_at, \
         NULL::text AS aggregate_id, NULL::text AS payload FROM ins \
     UNION ALL \
     SELECT FALSE, i.id, i.endpoint_id, o.event_id, o.event_type, o.version, o.occurred_at, \
         o.aggregate_id, o.payload::text \
     FROM ins i JOIN kurir_outbox o ON o.id = i.outbox_id WHERE i.born"
);

impl PgStore {
    /// Whether rows past the cursor are ready to fan out, and when the cursor last moved: one
    /// index probe and the cursor's row, no transaction, no lock.
    pub(in crate::store) async fn outbox_look(&self) -> Result<OutboxLook> {
        let look: Look = sqlx::query_as(OUTBOX_PENDING_PG)
            .fetch_one(&self.bookkeeping)
            .await?;
        Ok(look.into())
    }

    /// Fans out up to `limit` outbox rows past the cursor (see `store::cursor`): takes the
    /// cursor's row lock without waiting (held by another process, which is relaying now: this
    /// one has nothing to do), reads the rows and the endpoints changed since the last batch,
    /// inserts their deliveries (those `offer` has room for born claimed, see `store::born`), lists them (`store::event_list`) and moves the cursor past them, all in one transaction, which
    /// holds [`FAN_OUT_LOCK`] shared (waiting only for an endpoint's deletion). One relay at a
    /// time, each batch committing after the one before: batches are fanned out in cursor
    /// order, without waiting for each other (see `store::ordering`). With a `pace`, nothing
    /// either when the cursor moved within it.
    pub(in crate::store) async fn relay_batch(
        &self,
        limit: u32,
        offer: Option<&mut dyn BirthOffer>,
        checks: &Checks,
        pace: Option<Duration>,
    ) -> Result<Relayed> {
        // Before the transaction, whose start is the `now()` born leases count from.
        let sent_at = Instant::now();
        let mut tx = self.bookkeeping.begin().await?;
        let horizon: Option<String> = sqlx::query_scalar(LOCK_CURSOR)
            .bind(FAN_OUT_LOCK)
            .bind(pace.map(|p| p.as_secs_f64()))
            .fetch_optional(&mut *tx)
            .await?;
        let Some(horizon) = horizon else {
            return Ok(Relayed::default());
        };
        // A later statement than the horizon's: its snapshot sees every row below it.
        let events: Vec<OutboxHead> = sqlx::query_as(NEXT_ROWS)
            .bind(i64::from(limit))
            .bind(horizon)
            .bind(checks.reads_payloads())
            .fetch_all(&mut *tx)
            .await?;
        let Some(last) = events.last().map(|e| e.id) else {
            return Ok(Relayed::default());
        };
        // Under the fan-out lock: every deletion that committed is in this read.
        let endpoints = read_directory!(
            self.directory,
            &self.secrets,
            &mut *tx,
            postgres,
            SEQ.postgres
        );
        let fan_out = fan_out(events, &endpoints, checks);
        record_refusals(&mut tx, &fan_out).await?;
        sqlx::query(LIST_BATCH.postgres)
            .bind(&fan_out.dispatched)
            .execute(&mut *tx)
            .await?;
        let room = offer.and_then(|o| o.reserve(&fan_out.targets));
        let births = births(&fan_out, room);
        let (inserted, born) = if births.any() {
            insert_born(&mut tx, &fan_out, &births, last, sent_at).await?
        } else {
            let done = sqlx::query(INSERT_PENDING)
                .bind(&fan_out.outbox_ids)
                .bind(&fan_out.event_ids)
                .bind(&fan_out.endpoint_ids)
                .bind(&fan_out.ordering_keys)
                .bind(last)
                .execute(&mut *tx)
                .await?;
            (done.rows_affected(), Vec::new())
        };
        tx.commit().await?;
        Ok(Relayed {
            outcome: fan_out.outcome(inserted),
            born,
        })
    }
}

/// Records the batch's refused rows with their reasons, in the relay's transaction.
async fn record_refusals(tx: &mut sqlx::PgConnection, fan_out: &FanOut) -> Result<()> {
    if fan_out.refused.is_empty() {
        return Ok(());
    }
    let (ids, reasons) = fan_out.refused_columns();
    sqlx::query(
        "UPDATE kurir_outbox o SET refused_reason = x.reason, \
             dispatched_at = COALESCE(o.dispatched_at, now()) \
         FROM unnest($1::int8[], $2::text[]) AS x(id, reason) WHERE o.id = x.id",
    )
    .bind(ids)
    .bind(reasons)
    .execute(tx)
    .await?;
    Ok(())
}

/// Runs [`INSERT_BORN`], moving the cursor to outbox row `last`: how many rows it inserted,
/// and the born ones as claimed deliveries.
async fn insert_born(
    tx: &mut sqlx::PgConnection,
    fan_out: &FanOut,
    births: &Births<'_>,
    last: i64,
    sent_at: Instant,
) -> Result<(u64, Vec<ClaimedDelivery>)> {
    let rows = sqlx::query(INSERT_BORN)
        .bind(&fan_out.outbox_ids)
        .bind(&fan_out.event_ids)
        .bind(&fan_out.endpoint_ids)
        .bind(&fan_out.ordering_keys)
        .bind(births.lease_secs(fan_out.endpoint_ids.len()))
        .bind(births.owner())
        .bind(last)
        .fetch_all(&mut *tx)
        .await?;
    let mut inserted = 0;
    let mut born = Vec::new();
    for r in &rows {
        if r.try_get("summary")? {
            inserted = r.try_get::<i64, _>("id")?;
        } else {
            born.push(born_claimed(r, births, sent_at)?);
        }
    }
    Ok((inserted.try_into().unwrap_or(0), born))
}

fn born_claimed(r: &PgRow, births: &Births<'_>, sent_at: Instant) -> Result<ClaimedDelivery> {
    let endpoint_id: String = r.try_get("endpoint_id")?;
    let slot = births.slot(&endpoint_id)?;
    Ok(ClaimedDelivery {
        delivery_id: r.try_get("id")?,
        attempt: 1,
        trigger: Trigger::Scheduled,
        event: event_snapshot(r)?,
        endpoint: slot.endpoint.clone(),
        lease_deadline: sent_at + slot.lease,
    })
}
