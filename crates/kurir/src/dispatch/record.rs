//! The completion writer: the one task that records what delivery tasks send it, in batches.
//!
//! A batch the database cannot take right now (unreachable, restarting, busy: see
//! [`StoreError::is_unavailable`]) is retried: nothing is lost while the database is down. A
//! batch the database refuses is written again one completion at a time, and only the
//! completion refused on its own is set aside: logged at ERROR with its delivery id, counted
//! in `kurir_completions_refused_total`, and left to its lease, whose expiry makes the delivery
//! due again. One bad row never holds up the others.
//!
//! Once shutdown is underway, a write that the database keeps failing is given up after
//! [`SHUTDOWN_RECORDING_PATIENCE`], and so is every later one (the database counts as down);
//! what is unrecorded is left to its lease. A database that answers is waited for as usual.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::delivery::{Completion, NextState};
use crate::metrics::Metrics;
use crate::store::{Store, StoreError};

/// The most completions written in one transaction.
const COMPLETION_BATCH: usize = 512;

/// How long the writer waits for more after the first of a batch. A steady trickle of
/// deliveries is then written in one transaction per wait instead of one per delivery; the
/// lease (far longer) is all that waits on it.
const COMPLETION_LINGER: Duration = Duration::from_millis(5);

/// Once shutdown is underway, how long one write may wait for an unavailable database before
/// it and every later one are left to their leases.
pub const SHUTDOWN_RECORDING_PATIENCE: Duration = Duration::from_secs(5);

/// What the writer needs besides its channel.
pub(super) struct Writer {
    store: Store,
    owner: String,
    metrics: Option<Metrics>,
    /// Cancelled when the process shuts down.
    shutdown: CancellationToken,
    /// A write ran out of patience at shutdown: the database counts as down.
    gave_up: AtomicBool,
    /// Notified when a recorded batch finished a delivery (sent or dead-lettered): the next
    /// delivery of its aggregate may now be claimable (see `store::ordering`).
    finished: Arc<Notify>,
}

/// How one write ended.
enum Written {
    /// Recorded; this many were fenced out (their lease had been taken over).
    Recorded(u64),
    /// The database refused the data.
    Refused(StoreError),
    /// The database stayed unavailable past the shutdown patience.
    GaveUp,
}

impl Writer {
    /// A writer recording under `owner`'s leases, counting refusals in `metrics` when given.
    pub(super) fn new(
        store: Store,
        owner: String,
        metrics: Option<Metrics>,
        shutdown: CancellationToken,
        finished: Arc<Notify>,
    ) -> Self {
        Self {
            store,
            owner,
            metrics,
            shutdown,
            gave_up: AtomicBool::new(false),
            finished,
        }
    }

    /// Records completions in batches until every sender is gone: waits for one, gathers what
    /// else arrives within [`COMPLETION_LINGER`] (up to [`COMPLETION_BATCH`]), writes them in
    /// one transaction.
    pub(super) async fn run(self, mut rx: mpsc::Receiver<Completion>) {
        let mut batch = Vec::with_capacity(COMPLETION_BATCH);
        while rx.recv_many(&mut batch, COMPLETION_BATCH).await > 0 {
            let deadline = Instant::now() + COMPLETION_LINGER;
            while batch.len() < COMPLETION_BATCH {
                let room = COMPLETION_BATCH - batch.len();
                match tokio::time::timeout_at(deadline, rx.recv_many(&mut batch, room)).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
            }
            self.record(&batch).await;
            if batch.iter().any(|c| !matches!(c.next, NextState::Retry(_))) {
                self.finished.notify_one();
            }
            batch.clear();
        }
    }

    /// Records `batch`; on a refusal, each of its completions on its own.
    async fn record(&self, batch: &[Completion]) {
        match self.write(batch).await {
            Written::Recorded(fenced) => self.log_fenced(fenced),
            Written::Refused(e) if batch.len() == 1 => self.set_aside(&batch[0], &e),
            Written::Refused(e) => {
                tracing::warn!(error = %e, completions = batch.len(), "the database refused a batch of completions; recording them one by one");
                for one in batch.chunks(1) {
                    match self.write(one).await {
                        Written::Recorded(fenced) => self.log_fenced(fenced),
                        Written::Refused(e) => self.set_aside(&one[0], &e),
                        Written::GaveUp => self.give_up(one),
                    }
                }
            }
            Written::GaveUp => self.give_up(batch),
        }
    }

    /// Writes `batch`, retrying with backoff while the database is unavailable. Once shutdown
    /// is underway a write may take at most [`SHUTDOWN_RECORDING_PATIENCE`]; if one gives up,
    /// the database counts as down and later writes give up at once.
    async fn write(&self, batch: &[Completion]) -> Written {
        if self.gave_up.load(Ordering::Relaxed) {
            return Written::GaveUp;
        }
        let mut deadline = None;
        let mut backoff = Duration::from_millis(100);
        loop {
            let result = tokio::select! {
                result = self.store.complete_deliveries(&self.owner, batch) => result,
                () = self.out_of_patience(&mut deadline) => return self.give_up_writing(),
            };
            match result {
                Ok(fenced) => return Written::Recorded(fenced),
                Err(e) if !e.is_unavailable() => return Written::Refused(e),
                Err(e) => {
                    tracing::warn!(error = %e, pending = batch.len(), "recording completions failed; retrying")
                }
            }
            tokio::select! {
                () = tokio::time::sleep(backoff) => {}
                () = self.out_of_patience(&mut deadline) => return self.give_up_writing(),
            }
            backoff = (backoff * 2).min(Duration::from_secs(5));
        }
    }

    /// Resolves [`SHUTDOWN_RECORDING_PATIENCE`] after the write it bounds first saw the
    /// shutdown (`deadline` keeps that instant for the write); never while running.
    async fn out_of_patience(&self, deadline: &mut Option<Instant>) {
        self.shutdown.cancelled().await;
        let at = *deadline.get_or_insert_with(|| Instant::now() + SHUTDOWN_RECORDING_PATIENCE);
        tokio::time::sleep_until(at).await;
    }

    fn give_up_writing(&self) -> Written {
        self.gave_up.store(true, Ordering::Relaxed);
        Written::GaveUp
    }

    fn set_aside(&self, c: &Completion, e: &StoreError) {
        tracing::error!(
            delivery_id = c.delivery_id,
            endpoint_id = %c.endpoint_id,
            attempt = c.attempt,
            error = %e,
            "the database refused to record an attempt; set aside, the delivery is due again when its lease expires"
        );
        if let Some(metrics) = &self.metrics {
            metrics.record_completion_refused(&c.endpoint_id);
        }
    }

    fn give_up(&self, batch: &[Completion]) {
        tracing::error!(
            completions = batch.len(),
            "the database stayed unreachable at shutdown; these attempts are left unrecorded and their deliveries are due again when their leases expire"
        );
    }

    fn log_fenced(&self, fenced: u64) {
        if fenced > 0 {
            tracing::warn!(fenced, "completions arrived after their lease was taken over; attempts recorded, state left to the newer lease");
        }
    }
}
