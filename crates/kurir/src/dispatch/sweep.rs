//! The lease sweep: the dispatcher side's clean-up, run by every process beside its dispatcher.
//! It ends leases that expired (a worker stopped mid-delivery, so each counts as an attempt) and
//! removes the deliveries of endpoints deleted outside kurir; [`report_orphans`] logs and counts
//! those removals, here and when a claim finds some.

use std::time::Duration;

use kurir_core::retry::RetryPolicy;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::store::{Orphan, Store};

/// How often each process sweeps expired leases. Every lease is at least `lease_margin` (30 s by
/// default) long, so this is a small part of it; an idle process pays one statement per sweep.
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(2);

/// How often the lease sweep also looks for deliveries of endpoints deleted outside kurir.
pub const DELETED_ENDPOINTS_CHECK_INTERVAL: Duration = Duration::from_secs(60);

/// Deliveries removed per statement when an endpoint was deleted outside kurir.
const ORPHANS_PER_STATEMENT: u32 = 10_000;

/// Ends expired leases every `interval`, until `shutdown`: each counts as an attempt, so the
/// delivery is due again after the retry backoff (the endpoint's, else `defaults`), or
/// dead-lettered at its maximum. At its start and every [`DELETED_ENDPOINTS_CHECK_INTERVAL`],
/// also removes the deliveries of endpoints deleted outside kurir (counted in `metrics`).
pub async fn run(
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
                report_orphans(&removed, Some(metrics));
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

/// Logs once and counts deliveries removed because their event or endpoint was deleted by
/// hand: one line per removal, naming at most 20 of them.
pub fn report_orphans(orphans: &[Orphan], metrics: Option<&Metrics>) {
    let Some(first) = orphans.first() else {
        return;
    };
    if let Some(metrics) = metrics {
        metrics.record_orphans(orphans);
    }
    let mut endpoints: Vec<&str> = orphans.iter().map(|o| o.endpoint_id.as_str()).collect();
    endpoints.sort_unstable();
    endpoints.dedup();
    let events: Vec<&str> = orphans
        .iter()
        .take(20)
        .map(|o| o.event_id.as_str())
        .collect();
    tracing::warn!(
        removed = orphans.len(),
        reason = first.reason.as_str(),
        endpoint_ids = ?endpoints,
        event_ids = ?events,
        "deliveries removed: their event or endpoint was deleted outside kurir"
    );
}
