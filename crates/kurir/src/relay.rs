//! The relay: turns committed outbox rows into deliveries, one per subscribed endpoint.
//!
//! Polls, re-polling at once while batches come back full and slowing down while it finds
//! nothing ([`crate::wake`]); [`crate::store::Store::relay_batch`] makes each batch atomic and
//! safe to run in several processes at once.
//!
//! **The pace is the installation's.** Every batch costs its statements whatever its size, so a
//! batch should have had the poll interval to fill. One process gets that from its own wait;
//! several processes polling the same outbox would each find a fraction of a batch. So the
//! database keeps when the last batch of any process ran (PostgreSQL's relay cursor, MySQL's
//! `kurir_relay_pace`), and what a poll finds is relayed only once the interval has passed since
//! then; otherwise the relay waits out the rest, plus a random part of up to half an interval so
//! that the processes do not all look again at once. The batch checks the pace again under its
//! lock, so two processes never relay within one interval. Not paced: a wake-up (kurir's own
//! publish, relayed at once as before) and the batch after a full one (a backlog).

use std::time::Duration;

use kurir_core::IdlePoll;
use rand::Rng;
use tokio_util::sync::CancellationToken;

use crate::delivery::ClaimedDelivery;
use crate::dispatch::Births;
use crate::metrics::Metrics;
use crate::store::{BirthOffer, RelayOutcome, Store, StoreError};
use crate::wake::{Wake, RELAY_SLOWEST_POLL};

/// Fans out one batch, counts its events, and wakes the dispatchers when deliveries were
/// created (the batch has committed).
pub async fn step(
    store: &Store,
    batch_size: u32,
    dispatcher: &Wake,
    metrics: &Metrics,
) -> Result<RelayOutcome, StoreError> {
    let downstream = Downstream {
        wake: dispatcher.clone(),
        births: None,
    };
    step_into(store, batch_size, &downstream, metrics).await
}

/// Where the relay's deliveries go: the dispatchers to wake (every process's, for deliveries
/// inserted pending), and this process's lanes, for those born claimed.
#[derive(Clone)]
pub struct Downstream {
    /// Wakes the dispatchers.
    pub wake: Wake,
    /// This process's dispatcher, when it runs one.
    pub births: Option<Births>,
}

/// [`step`], with the deliveries the dispatcher has room for born claimed and handed to its
/// lanes; the dispatchers are woken only for those inserted pending.
pub async fn step_into(
    store: &Store,
    batch_size: u32,
    downstream: &Downstream,
    metrics: &Metrics,
) -> Result<RelayOutcome, StoreError> {
    match look(store, batch_size, None, downstream, metrics).await? {
        Found::Ran(outcome) => Ok(outcome),
        Found::Nothing | Found::Paced(_) => Ok(RelayOutcome::default()),
    }
}

/// What one look of the relay found.
enum Found {
    /// The outbox has nothing to relay.
    Nothing,
    /// Rows wait, but a batch ran less than the pace ago: this much of the pace is left.
    Paced(Duration),
    /// A batch ran (perhaps empty: another process's relay took the rows first, or ran within
    /// the pace meanwhile).
    Ran(RelayOutcome),
}

/// [`step_into`], keeping to `pace` when given (see the module's doc).
async fn look(
    store: &Store,
    batch_size: u32,
    pace: Option<Duration>,
    downstream: &Downstream,
    metrics: &Metrics,
) -> Result<Found, StoreError> {
    let seen = store.outbox_look().await?;
    if !seen.pending {
        return Ok(Found::Nothing);
    }
    if let (Some(pace), Some(since)) = (pace, seen.since_move) {
        if since < pace {
            return Ok(Found::Paced(pace - since));
        }
    }
    // Room is reserved only for a batch that will run: a reservation holds off the claims.
    let mut room = downstream.births.as_ref().and_then(Births::room);
    let offer = room.as_mut().map(|r| r as &mut dyn BirthOffer);
    let relayed = store.relay_batch_born(batch_size, offer, pace).await?;
    let outcome = relayed.outcome;
    metrics.record_relayed(&outcome);
    log_refusals(&outcome);
    let born = relayed.born.len();
    if outcome.deliveries > born {
        downstream.wake.wake();
    } else if outcome.events == 0 {
        // Rows were waiting and another process's relay took them first: its pending
        // deliveries exist, and without notifications only its own dispatcher heard of them.
        downstream.wake.wake_here_if_unannounced();
    }
    if let (Some(births), Some(room)) = (&downstream.births, room) {
        let owner = room.owner().to_owned();
        let refused = births.hand_over(room, relayed.born);
        hand_back_refused(store, &owner, &refused).await;
    }
    if outcome.events > 0 {
        tracing::debug!(
            events = outcome.events,
            deliveries = outcome.deliveries,
            born,
            "relayed outbox batch"
        );
    }
    Ok(Found::Ran(outcome))
}

/// Logs each event the catalog refused, once: the relay passes a refused row for good (a
/// recheck is the operator's act). Without the failing values, which are payload content.
fn log_refusals(outcome: &RelayOutcome) {
    for r in &outcome.refused {
        tracing::error!(
            event_id = %r.event_id,
            event_type = %r.event_type,
            version = r.version,
            reason = %r.masked_reason,
            "event refused by the event catalog: recorded as refused, not delivered \
             (kurir events show / kurir events recheck)"
        );
    }
}

/// Gives back what was born claimed after the dispatcher stopped taking deliveries (shutdown);
/// what cannot be given back now ends with the shutdown's release or its lease.
async fn hand_back_refused(store: &Store, owner: &str, refused: &[ClaimedDelivery]) {
    if refused.is_empty() {
        return;
    }
    if let Err(e) = store.hand_back(owner, refused).await {
        tracing::warn!(error = %e, deliveries = refused.len(), "handing back deliveries born claimed at shutdown failed");
    }
}

/// Runs [`step`] until `shutdown`: at once after a full batch; otherwise after a wait that
/// starts at `poll_interval` and grows while the outbox has nothing to relay, up to [`RELAY_SLOWEST_POLL`].
/// `wake` cuts the wait short (kurir's own publishes). What polling finds keeps to the
/// installation's pace of one batch per `poll_interval` (see the module's doc).
pub async fn run(
    store: Store,
    batch_size: u32,
    poll_interval: Duration,
    wake: Wake,
    downstream: Downstream,
    metrics: Metrics,
    shutdown: CancellationToken,
) {
    let mut poll = IdlePoll::new(poll_interval, RELAY_SLOWEST_POLL);
    let mut paced = true;
    while !shutdown.is_cancelled() {
        let pace = paced.then_some(poll_interval);
        let wait = match look(&store, batch_size, pace, &downstream, &metrics).await {
            Ok(Found::Ran(o)) if o.events as u32 >= batch_size => {
                poll.next_wait(true);
                paced = false;
                continue;
            }
            // Rows were waiting even if another process's relay took them first: work is
            // flowing, and a relay that slowed down for losing such races would leave the
            // stream to the others (and its dispatcher without hand-overs).
            Ok(Found::Ran(_)) => poll.next_wait(true),
            Ok(Found::Paced(left)) => {
                // Another process's relay ran a batch within the pace: its pending deliveries
                // exist, and without notifications only its own dispatcher heard of them.
                downstream.wake.wake_here_if_unannounced();
                left + rand::thread_rng().gen_range(Duration::ZERO..=poll_interval / 2)
            }
            Ok(Found::Nothing) => poll.next_wait(false),
            Err(e) => {
                tracing::warn!(error = %e, "relay batch failed; retrying");
                poll.next_wait(false).max(Duration::from_millis(500))
            }
        };
        paced = tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = wake.notified() => false,
            _ = tokio::time::sleep(wait) => true,
        };
    }
}
