//! The retention pruner: deletes finished history past its keep time ([`RetentionConfig`]) in
//! small batches, so no transaction holds many rows and delivery goes on between batches.
//! What may go, and the locking that keeps one process at a time at it, is
//! [`crate::store::retention`].

use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use crate::config::RetentionConfig;
use crate::metrics::Metrics;
use crate::store::retention::{Cutoffs, Pruned};
use crate::store::{Store, StoreError};

/// Rows per table in one batch: small enough that a batch's transaction is short.
pub const BATCH_SIZE: u32 = 500;

/// What one round did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RoundOutcome {
    /// The rows deleted, all batches together.
    Pruned(Pruned),
    /// Another process is pruning (PostgreSQL's advisory lock): nothing done.
    Busy,
}

/// The cutoffs of `retention` at `now`.
pub fn cutoffs(retention: &RetentionConfig, now: DateTime<Utc>) -> Cutoffs {
    let before = |d: Duration| now - chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX);
    Cutoffs {
        events: before(retention.events),
        dead_letters: before(retention.dead_letters),
        inbox: before(retention.inbox),
        replays: retention.replay_audit.map(before),
    }
}

/// One round: batches until one comes back short of [`BATCH_SIZE`] in every table, each
/// counted as it commits. Stops early at `shutdown`.
pub async fn round(
    store: &Store,
    retention: &RetentionConfig,
    metrics: &Metrics,
    shutdown: &CancellationToken,
) -> Result<RoundOutcome, StoreError> {
    let cutoffs = cutoffs(retention, crate::store::now_millis());
    let mut total = Pruned::default();
    loop {
        let Some(batch) = store.prune_batch(&cutoffs, BATCH_SIZE).await? else {
            return Ok(RoundOutcome::Busy);
        };
        metrics.record_pruned(&batch);
        total = add(total, batch);
        let full = batch
            .by_table()
            .iter()
            .any(|(_, n)| *n >= u64::from(BATCH_SIZE));
        if !full || shutdown.is_cancelled() {
            return Ok(RoundOutcome::Pruned(total));
        }
        // Let the relay and the dispatcher have the database between batches.
        tokio::task::yield_now().await;
    }
}

fn add(a: Pruned, b: Pruned) -> Pruned {
    Pruned {
        events: a.events + b.events,
        deliveries: a.deliveries + b.deliveries,
        attempts: a.attempts + b.attempts,
        inbox: a.inbox + b.inbox,
        replays: a.replays + b.replays,
        endpoints: a.endpoints + b.endpoints,
    }
}

/// Runs a [`round`] every `retention.interval` until `shutdown`. Errors are logged and the next
/// round tries again.
pub async fn run(
    store: Store,
    retention: RetentionConfig,
    metrics: Metrics,
    shutdown: CancellationToken,
) {
    loop {
        match round(&store, &retention, &metrics, &shutdown).await {
            Ok(RoundOutcome::Pruned(p)) if p.total() > 0 => tracing::info!(
                events = p.events,
                deliveries = p.deliveries,
                attempts = p.attempts,
                inbox = p.inbox,
                replays = p.replays,
                endpoints = p.endpoints,
                "pruned history past its retention"
            ),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "pruning failed; trying again next round"),
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(retention.interval) => {}
        }
    }
}
