//! The relay: turns committed outbox rows into deliveries, one per subscribed endpoint.
//!
//! Polls, re-polling at once while batches come back full and slowing down while it finds
//! nothing ([`crate::wake`]); [`crate::store::Store::relay_batch`] makes each batch atomic and
//! safe to run in several processes at once.

use std::time::Duration;

use kurir_core::IdlePoll;
use tokio_util::sync::CancellationToken;

use crate::delivery::ClaimedDelivery;
use crate::dispatch::{BirthRoom, Births};
use crate::metrics::Metrics;
use crate::store::{RelayOutcome, Store, StoreError};
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
    // Room is reserved only for a batch that will run: a reservation holds off the claims.
    if !store.outbox_pending().await? {
        return Ok(RelayOutcome::default());
    }
    let room = downstream.births.as_ref().and_then(Births::room);
    let relayed = store
        .relay_batch_born(batch_size, room.as_ref().map(BirthRoom::as_born))
        .await?;
    let outcome = relayed.outcome;
    metrics.record_relayed(&outcome);
    let born = relayed.born.len();
    if outcome.deliveries > born {
        downstream.wake.wake();
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
    Ok(outcome)
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
/// starts at `poll_interval` and grows while nothing is found, up to [`RELAY_SLOWEST_POLL`].
/// `wake` cuts the wait short (kurir's own publishes).
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
    while !shutdown.is_cancelled() {
        let wait = match step_into(&store, batch_size, &downstream, &metrics).await {
            Ok(o) if o.events as u32 >= batch_size => {
                poll.next_wait(true);
                continue;
            }
            Ok(o) => poll.next_wait(o.events > 0),
            Err(e) => {
                tracing::warn!(error = %e, "relay batch failed; retrying");
                poll.next_wait(false).max(Duration::from_millis(500))
            }
        };
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = wake.notified() => {}
            _ = tokio::time::sleep(wait) => {}
        }
    }
}
