//! The dispatcher: claims due deliveries with a lease, sends each outside any transaction, and
//! records the outcome with a fence.
//!
//! The loop is a thin wrapper around [`Dispatcher::step`], which claims what the process has
//! room for and starts one task per delivery. Room is bounded twice: a global cap on concurrent
//! requests (`max_concurrency`) and a per-endpoint cap (`max_in_flight`), so one slow endpoint
//! can never take every slot. Completions go through a channel to one writer task that records
//! them in batches.

pub mod deliver;
pub mod http;
pub mod ssrf;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::seq::SliceRandom;
use tokio::sync::{mpsc, Notify, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::DeliveryConfig;
use crate::delivery::{ClaimedDelivery, Completion, NextState};
use crate::endpoint::EndpointId;
use crate::metrics::Metrics;
use crate::store::{EndpointSlot, Store};
use deliver::{Attempted, Sender};

/// What one [`Dispatcher::step`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepOutcome {
    /// Claimed and started this many deliveries; as many as asked for, so poll again at once.
    Full(usize),
    /// Claimed fewer than asked for (maybe none): wait for a wake-up or the poll interval.
    Partial(usize),
    /// Every slot is busy: wait for a delivery to finish.
    Saturated,
}

/// Shared state of one process's dispatcher.
pub struct Dispatcher {
    store: Store,
    config: DeliveryConfig,
    sender: Arc<Sender>,
    owner: String,
    slots: Arc<Semaphore>,
    in_flight: Arc<Mutex<HashMap<EndpointId, u32>>>,
    completions: mpsc::Sender<Completion>,
    completions_rx: Mutex<Option<mpsc::Receiver<Completion>>>,
    freed: Arc<Notify>,
    tracker: TaskTracker,
    metrics: Option<Metrics>,
}

impl Dispatcher {
    /// A dispatcher whose leases carry `owner` (unique per process).
    pub fn new(store: Store, config: DeliveryConfig, owner: String) -> Self {
        let (tx, rx) = mpsc::channel(4096);
        Self {
            sender: Arc::new(Sender::new(config.clone())),
            slots: Arc::new(Semaphore::new(config.max_concurrency as usize)),
            store,
            config,
            owner,
            in_flight: Arc::default(),
            completions: tx,
            completions_rx: Mutex::new(Some(rx)),
            freed: Arc::new(Notify::new()),
            tracker: TaskTracker::new(),
            metrics: None,
        }
    }

    /// Counts every attempt in `metrics` (without, attempts are only logged).
    pub fn with_metrics(mut self, metrics: Metrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// This process's lease owner id.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// Claims as many due deliveries as there is room for and starts sending them.
    pub async fn step(&self) -> Result<StepOutcome, crate::store::StoreError> {
        let free = self
            .slots
            .available_permits()
            .min(self.config.batch_size as usize);
        if free == 0 {
            return Ok(StepOutcome::Saturated);
        }
        let endpoint_slots = self.endpoint_slots().await?;
        if endpoint_slots.is_empty() {
            return Ok(if self.slots.available_permits() == 0 {
                StepOutcome::Saturated
            } else {
                StepOutcome::Partial(0)
            });
        }
        let claimed = self
            .store
            .claim_due_deliveries(&self.owner, &endpoint_slots, free as u32)
            .await?;
        let n = claimed.len();
        for delivery in claimed {
            self.start(delivery);
        }
        Ok(if n == free {
            StepOutcome::Full(n)
        } else {
            StepOutcome::Partial(n)
        })
    }

    /// Every enabled endpoint with room left in this process, in random order so no endpoint is
    /// always first in line when the global cap binds.
    async fn endpoint_slots(&self) -> Result<Vec<EndpointSlot>, crate::store::StoreError> {
        let endpoints = self.store.enabled_endpoints().await?;
        let in_flight = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
        let mut slots: Vec<EndpointSlot> = endpoints
            .into_iter()
            .filter_map(|e| {
                let busy = in_flight.get(&e.id).copied().unwrap_or(0);
                let limit = e.max_in_flight.saturating_sub(busy);
                let o = &e.overrides;
                // The margin keeps a live worker's lease from running out before it records the attempt.
                let lease = self.config.lease_margin
                    + o.connect_timeout_ms
                        .map_or(self.config.connect_timeout, |ms| {
                            Duration::from_millis(ms.into())
                        })
                    + o.request_timeout_ms
                        .map_or(self.config.request_timeout, |ms| {
                            Duration::from_millis(ms.into())
                        });
                (limit > 0).then(|| EndpointSlot {
                    endpoint: Arc::new(e),
                    limit,
                    lease,
                })
            })
            .collect();
        drop(in_flight);
        slots.shuffle(&mut rand::thread_rng());
        Ok(slots)
    }

    fn start(&self, delivery: ClaimedDelivery) {
        let Ok(permit) = self.slots.clone().try_acquire_owned() else {
            // Cannot happen: a claim never exceeds the free permits and only this task takes them.
            tracing::error!(
                delivery_id = delivery.delivery_id,
                "claimed a delivery without a free slot"
            );
            return;
        };
        let endpoint_id = delivery.endpoint.id.clone();
        *self
            .in_flight
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(endpoint_id.clone())
            .or_default() += 1;
        let sender = self.sender.clone();
        let in_flight = self.in_flight.clone();
        let completions = self.completions.clone();
        let freed = self.freed.clone();
        let metrics = self.metrics.clone();
        self.tracker.spawn(async move {
            let attempted = sender.attempt(&delivery).await;
            log_attempt(&delivery, &attempted);
            if let Some(metrics) = &metrics {
                metrics.record_attempt(&delivery, &attempted);
            }
            {
                let mut map = in_flight.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(n) = map.get_mut(&endpoint_id) {
                    *n -= 1;
                    if *n == 0 {
                        map.remove(&endpoint_id);
                    }
                }
            }
            // The writer only stops after every task has finished, so this send succeeds.
            let _ = completions.send(attempted.completion).await;
            drop(permit);
            freed.notify_one();
        });
    }

    /// Runs until `shutdown`: claims and sends; then stops claiming, lets requests in flight
    /// finish (each is bounded by its timeouts), records them, and releases any lease left.
    /// `wake` is notified by the relay when new deliveries exist.
    pub async fn run(self: Arc<Self>, wake: Arc<Notify>, shutdown: CancellationToken) {
        let rx = self
            .completions_rx
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        let Some(rx) = rx else {
            tracing::error!("dispatcher started twice");
            return;
        };
        let writer = tokio::spawn(write_completions(
            self.store.clone(),
            self.owner.clone(),
            rx,
        ));
        while !shutdown.is_cancelled() {
            let wait = match self.step().await {
                Ok(StepOutcome::Full(_)) => continue,
                Ok(StepOutcome::Partial(_)) => self.config.poll_interval,
                Ok(StepOutcome::Saturated) => Duration::MAX,
                Err(e) => {
                    tracing::warn!(error = %e, "claiming deliveries failed; retrying");
                    self.config.poll_interval.max(Duration::from_millis(500))
                }
            };
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = wake.notified() => {}
                _ = self.freed.notified() => {}
                _ = tokio::time::sleep(wait.min(Duration::from_secs(3600))) => {}
            }
        }
        self.tracker.close();
        self.tracker.wait().await;
        // Every task has sent its completion; dropping our sender ends the writer.
        let Ok(this) = Arc::try_unwrap(self) else {
            tracing::error!("dispatcher still shared at shutdown; leases left to expire");
            return;
        };
        let Dispatcher {
            store,
            owner,
            completions,
            ..
        } = this;
        drop(completions);
        let _ = writer.await;
        match store.release_leases(&owner).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(released = n, "released leases at shutdown"),
            Err(e) => tracing::warn!(error = %e, "could not release leases; they will expire"),
        }
    }
}

/// Records completions in batches: waits for one, takes whatever else is queued (up to 512),
/// writes them in one transaction. A failed write is retried, never dropped.
async fn write_completions(store: Store, owner: String, mut rx: mpsc::Receiver<Completion>) {
    let mut batch = Vec::with_capacity(512);
    while rx.recv_many(&mut batch, 512).await > 0 {
        let mut backoff = Duration::from_millis(100);
        loop {
            match store.complete_deliveries(&owner, &batch).await {
                Ok(0) => break,
                Ok(fenced) => {
                    tracing::warn!(fenced, "completions arrived after their lease was taken over; attempts recorded, state left to the newer lease");
                    break;
                }
                Err(e) => {
                    tracing::warn!(error = %e, pending = batch.len(), "recording completions failed; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
            }
        }
        batch.clear();
    }
}

/// One line per attempt, and one more when the delivery is given up on. Never the payload, the
/// secret, the signature or the response body (which may echo the payload).
fn log_attempt(d: &ClaimedDelivery, a: &Attempted) {
    let c = &a.completion;
    tracing::info!(
        event_id = %d.event.event_id,
        event_type = %d.event.event_type,
        aggregate_id = d.event.aggregate_id.as_deref(),
        endpoint_id = %d.endpoint.id,
        attempt = d.attempt,
        status_code = c.status_code,
        error = c.error.as_deref(),
        duration_ms = c.duration_ms,
        outcome = a.outcome.as_str(),
        trigger = c.trigger.as_str(),
        "delivery attempt"
    );
    if matches!(c.next, NextState::DeadLetter | NextState::Gone) {
        tracing::warn!(
            event_id = %d.event.event_id,
            event_type = %d.event.event_type,
            aggregate_id = d.event.aggregate_id.as_deref(),
            endpoint_id = %d.endpoint.id,
            attempt = d.attempt,
            status_code = c.status_code,
            error = c.error.as_deref(),
            gone = c.next == NextState::Gone,
            "delivery dead-lettered"
        );
    }
}
