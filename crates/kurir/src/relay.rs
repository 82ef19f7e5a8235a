//! The relay: turns committed outbox rows into deliveries, one per subscribed endpoint.
//!
//! Polls, re-polling at once while batches come back full and slowing down while it finds
//! nothing ([`crate::wake`]); [`crate::store::Store::relay_batch`] makes each batch atomic and
//! safe to run in several processes at once.

use std::time::Duration;

use kurir_core::retry::RetryPolicy;
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

/// How often the lease sweep also looks for deliveries of endpoints deleted outside kurir.
pub const DELETED_ENDPOINTS_CHECK_INTERVAL: Duration = Duration::from_secs(60);

/// Deliveries removed per statement when an endpoint was deleted outside kurir.
const ORPHANS_PER_STATEMENT: u32 = 10_000;

/// Ends expired leases every `interval`, until `shutdown`: each counts as an attempt, so the
/// delivery is due again after the retry backoff (the endpoint's, else `defaults`), or
/// dead-lettered at its maximum. At its start and every [`DELETED_ENDPOINTS_CHECK_INTERVAL`],
/// also removes the deliveries of endpoints deleted outside kurir (counted in `metrics`).
pub async fn sweep_leases(
    store: Store,
    interval: Duration,
    defaults: RetryPolicy,
    metrics: Metrics,
    shutdown: CancellationToken,
) {
    let mut next_check = tokio::time::Instant::now();
    loop {
        if tokio::time::Instant::now() >= next_check {
            remove_deliveries_of_deleted_endpoints(&store, &metrics).await;
            next_check += DELETED_ENDPOINTS_CHECK_INTERVAL;
        }
        match store.sweep_expired_leases(&defaults).await {
            Ok(r) if r.total() == 0 => {}
            Ok(r) => tracing::warn!(
                retried = r.retried,
                dead_lettered = r.dead_lettered,
                "leases expired (a worker stopped mid-delivery); each counts as an attempt"
            ),
            Err(e) => tracing::warn!(error = %e, "lease sweep failed"),
        }
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tokio::time::sleep(interval) => {}
        }
    }
}

/// Removes, in statements of [`ORPHANS_PER_STATEMENT`], every delivery of an endpoint deleted
/// outside kurir.
async fn remove_deliveries_of_deleted_endpoints(store: &Store, metrics: &Metrics) {
    loop {
        match store
            .remove_deliveries_of_deleted_endpoints(ORPHANS_PER_STATEMENT)
            .await
        {
            Ok(removed) => {
                crate::dispatch::report_orphans(&removed, Some(metrics));
                if removed.len() < ORPHANS_PER_STATEMENT as usize {
                    return;
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "looking for deliveries of deleted endpoints failed");
                return;
            }
        }
    }
}
