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

/// How the pruner shares the database with delivery: rows per table in one batch, and how
/// long it rests after each batch, as a multiple of the time the batch held its locks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pacing {
    /// Rows per table in one batch: small enough that a batch's transaction is short.
    pub batch_size: u32,
    /// Rest after a batch for this many times it held its locks. With a rest of `r`, the
    /// pruner holds them at most `1 / (1 + r)` of the time. The wait for the locks does not
    /// count: it is time the others had them.
    pub rest: u32,
}

impl Pacing {
    /// The pacing for `store`'s database.
    ///
    /// SQLite has one write lock, which the pruner shares with the application's inserts, the
    /// relay, the claims and the completions. Its waiters sleep in the busy handler's growing
    /// steps, so a pruner that starts its next batch at once takes the lock again before they
    /// wake, and holds it nearly all the time while a backlog of old rows lasts: delivery then
    /// runs at the pace of the waiters' back-off. Short batches and a rest of nine times each
    /// batch's hold keep the pruner to a tenth of the lock. PostgreSQL and MySQL lock rows, not the
    /// database: a batch there holds up nothing that delivery touches, and the pruner only
    /// yields between batches.
    pub fn for_store(store: &Store) -> Self {
        match store {
            Store::Sqlite(_) => Pacing {
                batch_size: 100,
                rest: 9,
            },
            Store::Postgres(_) | Store::Mysql(_) => Pacing {
                batch_size: 500,
                rest: 0,
            },
        }
    }

    /// How long to rest after a batch that held its locks for `held`.
    pub fn rest_after(self, held: Duration) -> Duration {
        held.saturating_mul(self.rest)
    }
}

/// What one round did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RoundOutcome {
    /// The rows deleted, all batches together.
    Pruned(Pruned),
    /// Another process is pruning (PostgreSQL's advisory lock): nothing done.
    Busy,
}

/// How long after its end a portal link (its expiry) or session (its expiry or revocation) is
/// kept: neither can be used any more, and a day leaves time to look into a sign-in that went
/// wrong. Not a setting: the rows hold no history anyone reads.
pub const PORTAL_GRACE: Duration = Duration::from_secs(24 * 3600);

/// The cutoffs of `retention` at `now`.
pub fn cutoffs(retention: &RetentionConfig, now: DateTime<Utc>) -> Cutoffs {
    let before = |d: Duration| now - chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX);
    Cutoffs {
        events: before(retention.events),
        dead_letters: before(retention.dead_letters),
        inbox: before(retention.inbox),
        replays: retention.replay_audit.map(before),
        portal: before(PORTAL_GRACE),
    }
}

/// One round: batches until one comes back short of the batch size in every table, each
/// counted as it commits, paced as [`Pacing::for_store`] says. Stops early at `shutdown`.
pub async fn round(
    store: &Store,
    retention: &RetentionConfig,
    metrics: &Metrics,
    shutdown: &CancellationToken,
) -> Result<RoundOutcome, StoreError> {
    let cutoffs = cutoffs(retention, store.clock().now_millis());
    let pacing = Pacing::for_store(store);
    let mut total = Pruned::default();
    loop {
        let Some((batch, held)) = store.prune_batch_held(&cutoffs, pacing.batch_size).await? else {
            return Ok(RoundOutcome::Busy);
        };
        metrics.record_pruned(&batch);
        total = add(total, batch);
        let full = batch
            .by_table()
            .iter()
            .any(|(_, n)| *n >= u64::from(pacing.batch_size));
        if !full || shutdown.is_cancelled() {
            return Ok(RoundOutcome::Pruned(total));
        }
        // Let the relay, the dispatcher and the application have the database between batches.
        let rest = pacing.rest_after(held);
        if rest.is_zero() {
            tokio::task::yield_now().await;
        } else {
            tokio::select! {
                () = shutdown.cancelled() => return Ok(RoundOutcome::Pruned(total)),
                () = tokio::time::sleep(rest) => {}
            }
        }
    }
}

fn add(a: Pruned, b: Pruned) -> Pruned {
    Pruned {
        events: a.events + b.events,
        deliveries: a.deliveries + b.deliveries,
        attempts: a.attempts + b.attempts,
        inbox: a.inbox + b.inbox,
        inbox_attempts: a.inbox_attempts + b.inbox_attempts,
        inbox_retries: a.inbox_retries + b.inbox_retries,
        replays: a.replays + b.replays,
        endpoints: a.endpoints + b.endpoints,
        portal_links: a.portal_links + b.portal_links,
        portal_sessions: a.portal_sessions + b.portal_sessions,
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
                portal_links = p.portal_links,
                portal_sessions = p.portal_sessions,
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
