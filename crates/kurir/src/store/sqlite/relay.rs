//! Fanning events out on SQLite: the relay's batch.

use sqlx::Row;
use tokio::time::Instant;

use super::{is_busy, SqliteStore};
use crate::catalog::Checks;
use crate::store::born::{births, Births};
use crate::store::cursor::{past_cursor, suspect, Look, OUTBOX_PENDING_SQLITE};
use crate::store::directory::{read_directory, SEQ};
use crate::store::event_list::{ids_json, LIST_BATCH};
use crate::store::rows::OutboxHead;
use crate::store::rules::{fan_out, FanOut};
use crate::store::{sqlite_ts, BirthOffer, Leased, OutboxLook, Relayed, Result};

/// The next rows past the cursor (see `store::cursor`), in id order; with their payloads when
/// `?2` (the event catalog has schemas to check them against).
const NEXT_ROWS: &str = concat!(
    "SELECT o.id, o.event_id, o.event_type, o.aggregate_type, o.aggregate_id, o.version, \
         o.created_at, o.subscriber_id, o.dispatched_at IS NOT NULL AS passed, \
         CASE WHEN ?2 THEN o.payload END AS payload, ",
    suspect!(sqlite),
    " FROM kurir_outbox o WHERE ",
    past_cursor!(sqlite),
    " ORDER BY o.id LIMIT ?1"
);

/// The deliveries of a batch, from one JSON array of `[outbox_id, event_id, endpoint_id,
/// ordering_key, born]` (`?1`) at `?2`; `born` is the lease's end for a row born claimed to
/// `?3` (leased as `LEASE_SQL` leases), `NULL` for a row inserted pending. Returns the born
/// rows.
const INSERT_SQL: &str = "INSERT INTO kurir_deliveries (outbox_id, event_id, endpoint_id, \
         ordering_key, status, lease_owner, lease_expires_at, attempt_count, available_at, \
         created_at, updated_at) \
     SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), \
         json_extract(value, '$[2]'), json_extract(value, '$[3]'), \
         CASE WHEN json_extract(value, '$[4]') IS NULL THEN 'pending' ELSE 'processing' END, \
         CASE WHEN json_extract(value, '$[4]') IS NULL THEN NULL ELSE ?3 END, \
         json_extract(value, '$[4]'), \
         CASE WHEN json_extract(value, '$[4]') IS NULL THEN 0 ELSE 1 END, ?2, ?2, ?2 \
     FROM json_each(?1) WHERE true \
     ON CONFLICT (outbox_id, endpoint_id) DO NOTHING \
     RETURNING id, outbox_id, endpoint_id, lease_owner IS NOT NULL AS born";

impl SqliteStore {
    /// Whether rows past the cursor wait: an idle relay only reads (one index probe), so
    /// it never takes the write lock for nothing. (A read is busy only in rare moments of WAL
    /// recovery; then the relay looks anyway.)
    pub(in crate::store) async fn outbox_look(&self) -> Result<OutboxLook> {
        let look = sqlx::query_as::<_, Look>(OUTBOX_PENDING_SQLITE)
            .fetch_one(&self.bookkeeping)
            .await;
        match look {
            Err(e) if is_busy(&e) => Ok(OutboxLook {
                pending: true,
                since_move: None,
            }),
            other => Ok(other?.into()),
        }
    }

    /// One `BEGIN IMMEDIATE` transaction: reads a batch of rows past the cursor (see
    /// `store::cursor`), inserts their deliveries (one statement over a JSON array; those
    /// `offer` has room for born claimed, see `store::born`), lists the rows
    /// (`store::event_list`) and moves the cursor past them.
    pub(in crate::store) async fn relay_batch(
        &self,
        limit: u32,
        offer: Option<&mut dyn BirthOffer>,
        checks: &Checks,
        // One process per SQLite file: nothing to pace against.
        _pace: Option<std::time::Duration>,
    ) -> Result<Relayed> {
        let sent_at = Instant::now();
        let mut tx = self.begin_immediate().await?;
        let events: Vec<OutboxHead> = sqlx::query_as(NEXT_ROWS)
            .bind(i64::from(limit))
            .bind(checks.reads_payloads())
            .fetch_all(&mut *tx)
            .await?;
        let Some(last) = events.last().map(|e| e.id) else {
            return Ok(Relayed::default());
        };
        // Inside the write lock: no endpoint changes until this batch commits.
        let endpoints =
            read_directory!(self.directory, &self.secrets, &mut *tx, sqlite, SEQ.sqlite);
        // One writer at a time: batches commit in outbox order (see `store::ordering`).
        let fan_out = fan_out(events, &endpoints, checks);
        let room = offer.and_then(|o| o.reserve(&fan_out.targets));
        let births = births(&fan_out, room);
        let now = self.clock.now_millis();
        refuse(&mut tx, &fan_out, now).await?;
        sqlx::query(LIST_BATCH.sqlite)
            .bind(ids_json(&fan_out.dispatched))
            .execute(&mut *tx)
            .await?;
        let rows = sqlx::query(INSERT_SQL)
            .bind(json_rows(&fan_out, &births, now))
            .bind(sqlite_ts(now))
            .bind(births.owner)
            .fetch_all(&mut *tx)
            .await?;
        let mut leased = Vec::new();
        for r in &rows {
            if !r.try_get::<bool, _>("born")? {
                continue;
            }
            leased.push(Leased {
                delivery_id: r.try_get("id")?,
                outbox_id: r.try_get("outbox_id")?,
                attempt: 1,
                trigger: crate::delivery::Trigger::Scheduled,
                slot: births.slot(r.try_get("endpoint_id")?)?,
            });
        }
        let events = super::leases::events_of(&mut tx, &leased).await?;
        sqlx::query("UPDATE kurir_relay_cursor SET outbox_id = ?1")
            .bind(last)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(Relayed {
            born: leased
                .into_iter()
                .map(|l| l.claimed(&events, sent_at))
                .collect::<Result<_>>()?,
            outcome: fan_out.outcome(rows.len() as u64),
        })
    }
}

/// Records the batch's refused rows with their reasons (one JSON array of `[id, reason]`),
/// inside the relay's transaction.
async fn refuse(
    tx: &mut sqlx::SqliteConnection,
    fan_out: &FanOut,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<()> {
    if fan_out.refused.is_empty() {
        return Ok(());
    }
    sqlx::query(
        "UPDATE kurir_outbox SET refused_reason = (SELECT json_extract(value, '$[1]') \
                 FROM json_each(?1) WHERE json_extract(value, '$[0]') = kurir_outbox.id), \
             dispatched_at = COALESCE(dispatched_at, ?2) \
         WHERE id IN (SELECT json_extract(value, '$[0]') FROM json_each(?1))",
    )
    .bind(fan_out.refused_json())
    .bind(sqlite_ts(now))
    .execute(tx)
    .await?;
    Ok(())
}

/// The rows of [`INSERT_SQL`]: a born row's lease ends at `now` plus its slot's lease.
fn json_rows(fan_out: &FanOut, births: &Births<'_>, now: chrono::DateTime<chrono::Utc>) -> String {
    let ends = |slot: &crate::store::EndpointSlot| {
        let lease = chrono::Duration::from_std(slot.lease).unwrap_or(chrono::Duration::MAX);
        serde_json::Value::from(sqlite_ts(now + lease))
    };
    births.json_rows(fan_out, ends, serde_json::Value::Null)
}
