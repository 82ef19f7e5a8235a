//! The relay: turns committed outbox rows into deliveries, one per subscribed endpoint.
//!
//! Polls, re-polling at once while batches come back full and slowing down while it finds
//! nothing ([`crate::wake`]); [`crate::store::Store::relay_batch`] makes each batch atomic and
//! safe to run in several processes at once.

use std::time::Duration;

use kurir_core::IdlePoll;
use tokio_util::sync::CancellationToken;

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
    let outcome = store.relay_batch(batch_size).await?;
    metrics.record_relayed(&outcome);
    if outcome.deliveries > 0 {
        dispatcher.wake();
    }
    if outcome.events > 0 {
        tracing::debug!(
            events = outcome.events,
            deliveries = outcome.deliveries,
            "relayed outbox batch"
        );
    }
    Ok(outcome)
}

/// Runs [`step`] until `shutdown`: at once after a full batch; otherwise after a wait that
/// starts at `poll_interval` and grows while nothing is found, up to [`RELAY_SLOWEST_POLL`].
/// `wake` cuts the wait short (kurir's own publishes).
pub async fn run(
    store: Store,
    batch_size: u32,
    poll_interval: Duration,
    wake: Wake,
    dispatcher: Wake,
    metrics: Metrics,
    shutdown: CancellationToken,
) {
    let mut poll = IdlePoll::new(poll_interval, RELAY_SLOWEST_POLL);
    while !shutdown.is_cancelled() {
        let wait = match step(&store, batch_size, &dispatcher, &metrics).await {
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
