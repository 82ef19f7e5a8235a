//! The dispatcher: claims due deliveries with a lease, sends each outside any transaction, and
//! records the outcome with a fence.
//!
//! The loop is a thin wrapper around [`Dispatcher::step`], which claims what the process has
//! room for. Claimed deliveries wait in their endpoint's lane; a lane starts one task per
//! delivery up to the endpoint's `max_in_flight`, and a task that finishes takes the next
//! delivery of its lane at once, so the endpoint is never idle while the next claim is on its
//! way to the database. Room is bounded three ways: a global cap on concurrent requests
//! (`max_concurrency`), a per-endpoint cap (`max_in_flight`), so one slow endpoint can never
//! take every slot, and a prefetch of [`WAITING_ROUNDS`] rounds of `max_in_flight` claimed but
//! unsent deliveries per lane, only for an endpoint whose last answer came within
//! [`QUICK_ANSWER`]: a slow endpoint's deliveries stay in the database, where another process
//! may take them. The lease covers those rounds, so a delivery waiting in its lane never
//! outlives its lease. Completions go through a channel to one writer task that records them
//! in batches.

pub mod deliver;
pub mod http;
pub mod ssrf;
pub mod transport;

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::seq::SliceRandom;
use tokio::sync::{mpsc, Notify, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::DeliveryConfig;
use crate::delivery::{ClaimedDelivery, Completion, NextState};
use crate::endpoint::EndpointId;
use crate::metrics::Metrics;
use crate::store::{EndpointSlot, Store};
use deliver::{Attempted, Sender};

/// How many rounds of `max_in_flight` requests a lane may hold claimed beyond those in flight.
/// Deep enough that an endpoint answering in a millisecond does not drain its lane while the
/// next claim is on its way; shallow enough that a slow endpoint's last waiting delivery starts
/// well inside its lease (which is sized for these rounds).
pub const WAITING_ROUNDS: u32 = 3;

/// An endpoint whose last attempt took less than this gets a prefetch.
pub const QUICK_ANSWER: Duration = Duration::from_millis(250);

/// What one [`Dispatcher::step`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepOutcome {
    /// Claimed this many deliveries; as many as asked for, so poll again at once.
    Full(usize),
    /// Claimed fewer than asked for (maybe none): wait for a wake-up or the poll interval.
    Partial(usize),
    /// Every slot is busy: wait for a delivery to finish.
    Saturated,
}

/// One endpoint's deliveries in this process: requests in flight and claimed ones waiting.
#[derive(Default)]
struct Lane {
    in_flight: u32,
    max_in_flight: u32,
    waiting: VecDeque<ClaimedDelivery>,
    /// The last attempt finished within [`QUICK_ANSWER`].
    quick: bool,
}

/// What the dispatcher and its delivery tasks share.
struct Lanes {
    sender: Arc<Sender>,
    slots: Arc<Semaphore>,
    lanes: Mutex<HashMap<EndpointId, Lane>>,
    completions: mpsc::Sender<Completion>,
    freed: Notify,
    tracker: TaskTracker,
    /// Counts every attempt, when set (without, attempts are only logged).
    metrics: std::sync::OnceLock<Metrics>,
}

/// Shared state of one process's dispatcher.
pub struct Dispatcher {
    store: Store,
    config: DeliveryConfig,
    owner: String,
    lanes: Arc<Lanes>,
    completions_rx: Mutex<Option<mpsc::Receiver<Completion>>>,
}

impl Dispatcher {
    /// A dispatcher whose leases carry `owner` (unique per process).
    pub fn new(store: Store, config: DeliveryConfig, owner: String) -> Self {
        let (tx, rx) = mpsc::channel(4096);
        Self {
            lanes: Arc::new(Lanes {
                sender: Arc::new(Sender::new(config.clone())),
                slots: Arc::new(Semaphore::new(config.max_concurrency as usize)),
                lanes: Mutex::default(),
                completions: tx,
                freed: Notify::new(),
                tracker: TaskTracker::new(),
                metrics: std::sync::OnceLock::new(),
            }),
            store,
            config,
            owner,
            completions_rx: Mutex::new(Some(rx)),
        }
    }

    /// Counts every attempt in `metrics` (without, attempts are only logged).
    pub fn with_metrics(self, metrics: Metrics) -> Self {
        let _ = self.lanes.metrics.set(metrics);
        self
    }

    /// This process's lease owner id.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// Claims as many due deliveries as there is room for and starts sending them.
    pub async fn step(&self) -> Result<StepOutcome, crate::store::StoreError> {
        // Lanes that waited for a global slot get one now, if any came free.
        self.lanes.start_waiting();
        // Claimed but not yet sent counts against room too.
        let outstanding = self.lanes.outstanding();
        let room = ((1 + WAITING_ROUNDS) * self.config.max_concurrency) as usize;
        let room = room.saturating_sub(outstanding);
        let free = room.min(self.config.batch_size as usize);
        if free == 0 {
            return Ok(StepOutcome::Saturated);
        }
        let endpoint_slots = self.endpoint_slots(free).await?;
        if endpoint_slots.is_empty() {
            return Ok(if self.lanes.slots.available_permits() == 0 {
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
        self.lanes.enqueue(claimed);
        Ok(if n == free {
            StepOutcome::Full(n)
        } else {
            StepOutcome::Partial(n)
        })
    }

    /// Every enabled endpoint with room left in this process, in random order so no endpoint is
    /// always first in line when the global cap binds. An endpoint's room is its
    /// `max_in_flight` in flight plus, when it answers quickly, [`WAITING_ROUNDS`] of it
    /// waiting, less what it has, and
    /// at most its fair share of the `free` room of this claim, so one busy endpoint's
    /// prefetch cannot crowd the others out of a claim.
    async fn endpoint_slots(
        &self,
        free: usize,
    ) -> Result<Vec<EndpointSlot>, crate::store::StoreError> {
        // Read at every claim: a rotated secret or a disabled endpoint counts from the next one.
        let endpoints = self.store.enabled_endpoints().await?;
        let share = free.div_ceil(endpoints.len().max(1)) as u32;
        let lanes = self.lanes.lock();
        let mut slots: Vec<EndpointSlot> = endpoints
            .into_iter()
            .filter_map(|e| {
                let lane = lanes.get(&e.id);
                let busy = lane.map_or(0, |l| l.in_flight + l.waiting.len() as u32);
                let rounds = if lane.is_some_and(|l| l.quick) {
                    1 + WAITING_ROUNDS
                } else {
                    1
                };
                let limit = (rounds * e.max_in_flight)
                    .saturating_sub(busy)
                    .min(share.max(1));
                let o = &e.overrides;
                let attempt = o
                    .connect_timeout_ms
                    .map_or(self.config.connect_timeout, |ms| {
                        Duration::from_millis(ms.into())
                    })
                    + o.request_timeout_ms
                        .map_or(self.config.request_timeout, |ms| {
                            Duration::from_millis(ms.into())
                        });
                // Waiting rounds plus its own attempt, each bounded by the timeouts; the margin
                // keeps a live worker's lease from running out before it records the attempt.
                let lease = self.config.lease_margin + attempt * (1 + WAITING_ROUNDS);
                (limit > 0).then(|| EndpointSlot {
                    endpoint: Arc::new(e),
                    limit,
                    lease,
                })
            })
            .collect();
        drop(lanes);
        slots.shuffle(&mut rand::thread_rng());
        Ok(slots)
    }

    /// Runs until `shutdown`: claims and sends; then stops claiming, lets requests in flight
    /// and deliveries already claimed finish (each is bounded by its timeouts), records them,
    /// and releases any lease left. `wake` is notified by the relay when new deliveries exist;
    /// without it, the wait between claims grows while nothing is due, up to
    /// [`crate::wake::DISPATCHER_SLOWEST_POLL`].
    pub async fn run(self: Arc<Self>, wake: Arc<Notify>, shutdown: CancellationToken) {
        let slowest = crate::wake::DISPATCHER_SLOWEST_POLL;
        let mut poll = kurir_core::IdlePoll::new(self.config.poll_interval, slowest);
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
            let step = self.step().await;
            if let Err(e) = &step {
                tracing::warn!(error = %e, "claiming deliveries failed; retrying");
            }
            let wait = wait_after(&step, &mut poll);
            if wait.is_zero() {
                continue;
            }
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = wake.notified() => {}
                _ = self.lanes.freed.notified() => {}
                _ = tokio::time::sleep(wait.min(Duration::from_secs(3600))) => {}
            }
        }
        // Lanes drain what they hold: those deliveries are claimed, and an attempt never made
        // must not count as one.
        self.lanes.start_waiting();
        self.lanes.tracker.close();
        self.lanes.tracker.wait().await;
        // Every task has sent its completion; dropping our senders ends the writer.
        let Ok(this) = Arc::try_unwrap(self) else {
            tracing::error!("dispatcher still shared at shutdown; leases left to expire");
            return;
        };
        let Dispatcher {
            store,
            owner,
            lanes,
            ..
        } = this;
        drop(lanes);
        let _ = writer.await;
        match store.release_leases(&owner).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(released = n, "released leases at shutdown"),
            Err(e) => tracing::warn!(error = %e, "could not release leases; they will expire"),
        }
    }
}

/// The wait after a step: none after a full claim, until a slot frees when saturated, else what
/// the idle schedule says (at least 500 ms after a failure).
fn wait_after(
    step: &Result<StepOutcome, crate::store::StoreError>,
    poll: &mut kurir_core::IdlePoll,
) -> Duration {
    let found = !matches!(step, Ok(StepOutcome::Partial(0)) | Err(_));
    let wait = poll.next_wait(found);
    match step {
        Ok(StepOutcome::Full(_)) => Duration::ZERO,
        Ok(StepOutcome::Saturated) => Duration::MAX,
        Ok(StepOutcome::Partial(_)) => wait,
        Err(_) => wait.max(Duration::from_millis(500)),
    }
}

impl Lanes {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<EndpointId, Lane>> {
        self.lanes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Deliveries in flight or waiting, all endpoints together.
    fn outstanding(&self) -> usize {
        self.lock()
            .values()
            .map(|l| l.in_flight as usize + l.waiting.len())
            .sum()
    }

    /// Puts claimed deliveries in their lanes and starts what the caps allow.
    fn enqueue(self: &Arc<Self>, claimed: Vec<ClaimedDelivery>) {
        {
            let mut lanes = self.lock();
            for d in claimed {
                let lane = lanes.entry(d.endpoint.id.clone()).or_default();
                lane.max_in_flight = d.endpoint.max_in_flight.max(1);
                lane.waiting.push_back(d);
            }
        }
        self.start_waiting();
    }

    /// Starts waiting deliveries, in random lane order, while their endpoint and the process
    /// have room.
    fn start_waiting(self: &Arc<Self>) {
        let mut started = Vec::new();
        {
            let mut lanes = self.lock();
            let mut ids: Vec<EndpointId> = lanes
                .iter()
                .filter(|(_, l)| !l.waiting.is_empty() && l.in_flight < l.max_in_flight)
                .map(|(id, _)| id.clone())
                .collect();
            ids.shuffle(&mut rand::thread_rng());
            'lanes: for id in ids {
                let Some(lane) = lanes.get_mut(&id) else {
                    continue;
                };
                while lane.in_flight < lane.max_in_flight && !lane.waiting.is_empty() {
                    let Ok(permit) = self.slots.clone().try_acquire_owned() else {
                        break 'lanes;
                    };
                    if let Some(d) = lane.waiting.pop_front() {
                        lane.in_flight += 1;
                        started.push((d, permit));
                    }
                }
            }
        }
        for (d, permit) in started {
            self.spawn(d, permit);
        }
    }

    fn spawn(self: &Arc<Self>, delivery: ClaimedDelivery, permit: OwnedSemaphorePermit) {
        let lanes = self.clone();
        self.tracker.spawn(async move {
            let mut next = Some((delivery, permit));
            while let Some((delivery, permit)) = next.take() {
                let attempted = lanes.sender.attempt(&delivery).await;
                log_attempt(&delivery, &attempted);
                if let Some(metrics) = lanes.metrics.get() {
                    metrics.record_attempt(&delivery, &attempted);
                }
                let quick = attempted.completion.duration_ms < QUICK_ANSWER.as_millis() as i64;
                // The writer only stops after every task has finished, so this send succeeds.
                let _ = lanes.completions.send(attempted.completion).await;
                // With every global slot taken, other lanes may be waiting for one: give this
                // one back and let a random waiting lane (maybe this one) have it, rather than
                // keep it for this lane until its queue runs dry.
                let contended = lanes.slots.available_permits() == 0;
                let (following, low) = lanes.next_in_lane(&delivery.endpoint.id, quick, !contended);
                next = following.map(|d| (d, permit));
                if next.is_none() && contended {
                    lanes.start_waiting();
                }
                // The dispatcher claims again when a slot came free or a lane runs low, not
                // after every delivery.
                if next.is_none() || low {
                    lanes.freed.notify_one();
                }
            }
        });
    }

    /// The next waiting delivery of `endpoint`, keeping the finished task's slot, and whether
    /// the lane has less than a round left waiting; or `None`, and the slot is given back (the
    /// caller drops the permit).
    ///
    /// `quick` tells whether the attempt just made finished within [`QUICK_ANSWER`]; an idle
    /// lane stays in the map (one small entry per endpoint) to remember it. With `keep` false
    /// the slot is given back even if the lane has deliveries waiting.
    fn next_in_lane(
        &self,
        endpoint: &EndpointId,
        quick: bool,
        keep: bool,
    ) -> (Option<ClaimedDelivery>, bool) {
        let mut lanes = self.lock();
        let Some(lane) = lanes.get_mut(endpoint) else {
            return (None, true);
        };
        lane.quick = quick;
        if keep {
            if let Some(d) = lane.waiting.pop_front() {
                let low = (lane.waiting.len() as u32) < lane.max_in_flight;
                return (Some(d), low);
            }
        }
        lane.in_flight -= 1;
        (None, true)
    }
}

/// The most completions written in one transaction.
const COMPLETION_BATCH: usize = 512;

/// How long the completion writer waits for more after the first of a batch. A steady trickle of
/// deliveries is then written in a couple of hundred transactions a second instead of one
/// per delivery; the lease (far longer) is all that waits on it.
const COMPLETION_LINGER: Duration = Duration::from_millis(5);

/// Records completions in batches: waits for one, gathers what else arrives within
/// [`COMPLETION_LINGER`] (up to [`COMPLETION_BATCH`]), writes them in one transaction. A failed
/// write is retried, never dropped.
async fn write_completions(store: Store, owner: String, mut rx: mpsc::Receiver<Completion>) {
    let mut batch = Vec::with_capacity(COMPLETION_BATCH);
    while rx.recv_many(&mut batch, COMPLETION_BATCH).await > 0 {
        let deadline = tokio::time::Instant::now() + COMPLETION_LINGER;
        while batch.len() < COMPLETION_BATCH {
            let room = COMPLETION_BATCH - batch.len();
            match tokio::time::timeout_at(deadline, rx.recv_many(&mut batch, room)).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
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

/// One line per attempt (INFO when it delivered, WARN when it failed), and one more at ERROR when
/// the delivery is given up on. Never the payload, the secret, the signature or the response body
/// (which may echo the payload).
fn log_attempt(d: &ClaimedDelivery, a: &Attempted) {
    let c = &a.completion;
    macro_rules! attempt_line {
        ($level:expr) => {
            tracing::event!(
                $level,
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
            )
        };
    }
    if a.outcome == deliver::Outcome::Sent {
        attempt_line!(tracing::Level::INFO);
    } else {
        attempt_line!(tracing::Level::WARN);
    }
    if matches!(c.next, NextState::DeadLetter | NextState::Gone) {
        tracing::error!(
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
