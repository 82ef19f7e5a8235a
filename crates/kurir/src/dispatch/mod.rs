//! The dispatcher: claims due deliveries with a lease, sends each outside any transaction, and
//! records the outcome with a fence.
//!
//! How the parts fit, in the order a delivery meets them:
//!
//! - this module: [`Dispatcher`], the loop around [`Dispatcher::step`], which claims what the
//!   process has room for, and the shutdown;
//! - `due`: which endpoints a claim asks for: those found to have due deliveries, not every
//!   endpoint installed;
//! - `lanes`: per endpoint, the claimed deliveries in flight or waiting for a slot, and the
//!   tasks that send them;
//! - [`deliver`]: one attempt: the signed request (through [`crate::webhook_client`]) and what
//!   its answer means for the retry schedule;
//! - [`record`]: the completion writer, the one task that records outcomes in batches;
//! - [`sweep`]: the lease sweep, which ends the leases of workers that stopped mid-delivery.
//!
//! Claimed deliveries wait in their endpoint's lane; a lane starts one task per delivery up to
//! the endpoint's `max_in_flight`, and a task that finishes takes the next delivery of its lane
//! at once, so the endpoint is never idle while the next claim is on its way to the database.
//! Room is bounded three ways: a global cap on concurrent requests (`max_concurrency`), a
//! per-endpoint cap (`max_in_flight`), so one slow endpoint can never take every slot, and a
//! prefetch of [`WAITING_ROUNDS`] rounds of `max_in_flight` claimed but unsent deliveries per
//! lane, only for an endpoint whose last answer came within [`QUICK_ANSWER`]: a slow endpoint's
//! deliveries stay in the database, where another process may take them. The lease covers
//! those rounds; a delivery that still cannot start in time (every global slot held by slow
//! requests) is handed back unattempted, so no request is ever made under a lease that may have
//! run out. Completions go through a channel to the writer.
//!
//! At shutdown the dispatcher stops claiming, hands back what waits in its lanes (not charged:
//! never attempted), lets the requests in flight finish (each bounded by its timeouts), records
//! them, and ends what leases are left, each counted as an attempt.

pub mod breakers;
pub mod deliver;
mod due;
mod lanes;
pub mod rates;
pub mod record;
mod room;
pub mod sweep;

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::seq::SliceRandom;
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::DeliveryConfig;
use crate::delivery::Completion;
use crate::metrics::Metrics;
use crate::store::Store;
use breakers::Breakers;
use deliver::Sender;
use lanes::Lanes;
use record::SHUTDOWN_RECORDING_PATIENCE;
use room::Room;
pub use room::{BirthRoom, Births};

/// How many rounds of `max_in_flight` requests a lane may hold claimed beyond those in flight.
/// Deep enough that an endpoint answering in a millisecond does not drain its lane while the
/// next claim is on its way; shallow enough that a slow endpoint's last waiting delivery starts
/// well inside its lease (which is sized for these rounds).
pub const WAITING_ROUNDS: u32 = 3;

/// An endpoint whose last attempt took less than this gets a prefetch.
pub const QUICK_ANSWER: Duration = Duration::from_millis(250);

/// A unique lease owner for this process: pid plus a UUIDv7, so a restarted process never
/// mistakes its predecessor's leases for its own.
pub fn owner_id() -> String {
    format!(
        "kurir-{}-{}",
        std::process::id(),
        uuid::Uuid::now_v7().simple()
    )
}

/// What one [`Dispatcher::step`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepOutcome {
    /// Claimed this many deliveries: as many as there was room for, or the room was cut (see
    /// `room::reserve`): claim again at once.
    Full(usize),
    /// Claimed fewer than asked for (maybe none): wait for a wake-up or the poll interval.
    Partial(usize),
    /// Every slot is busy: wait for a delivery to finish.
    Saturated,
    /// Due deliveries were held back by their endpoints' rate limits: look again after the
    /// poll interval.
    Throttled,
}

/// Shared state of one process's dispatcher.
pub struct Dispatcher {
    store: Store,
    breakers: Arc<Breakers>,
    config: DeliveryConfig,
    owner: String,
    lanes: Arc<Lanes>,
    completions_rx: Mutex<Option<mpsc::Receiver<Completion>>>,
    /// Notified by the completion writer when it recorded a finished delivery.
    finished: Arc<Notify>,
    /// Some endpoint orders its deliveries per aggregate (as of the last claim): a finished
    /// delivery may then unblock the next of its aggregate, so the loop claims again at once
    /// instead of waiting for the poll.
    any_ordered: AtomicBool,
    /// The endpoints that may have due deliveries: the ones a claim asks for.
    due: due::DueEndpoints,
}

impl Dispatcher {
    /// A dispatcher whose leases carry `owner` (unique per process).
    pub fn new(store: Store, config: DeliveryConfig, owner: String) -> Self {
        let (tx, rx) = mpsc::channel(4096);
        let breakers = Arc::new(Breakers::new(
            store.clone(),
            config.breaker,
            config.endpoint_disable_after,
        ));
        Self {
            lanes: Arc::new(Lanes::new(
                Sender::new(config.clone(), store.clock().clone()),
                breakers.clone(),
                config.max_concurrency as usize,
                tx,
            )),
            breakers,
            store,
            config,
            owner,
            completions_rx: Mutex::new(Some(rx)),
            finished: Arc::new(Notify::new()),
            any_ordered: AtomicBool::new(false),
            due: due::DueEndpoints::default(),
        }
    }

    /// Counts every attempt in `metrics` (without, attempts are only logged).
    pub fn with_metrics(self, metrics: Metrics) -> Self {
        self.breakers.set_metrics(metrics.clone());
        let _ = self.lanes.metrics.set(metrics);
        self
    }

    /// This process's lease owner id.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// Hands back what waits in the lanes and can no longer start within its lease, claims as
    /// many due deliveries as there is room for and starts sending them.
    pub async fn step(&self) -> Result<StepOutcome, crate::store::StoreError> {
        // Lanes that waited for a global slot get one now, if any came free.
        self.lanes.start_waiting();
        self.lanes.expire_waiting();
        self.hand_back_late("lease").await;
        // Every process's attempts count: what waits here for an endpoint another process's
        // failures opened goes back, uncharged.
        self.breakers.refresh().await?;
        self.lanes.divert_held();
        self.hand_back_late("circuit_open").await;
        // Read at every step: a rotated secret or a disabled endpoint counts from the next
        // claim, and what waits here for an endpoint that was deleted or disabled, or whose
        // subscriber was, on any process, goes back uncharged, to wait in the database. Only what
        // changed since the last read is read (see `store::directory`).
        let endpoints = self.store.live_endpoints().await?;
        self.lanes.divert_stopped(&endpoints);
        self.hand_back_late("endpoint_stopped").await;
        // Claimed but not yet sent counts against room too.
        let free = room::free_room(&self.lanes, &self.config);
        if free == 0 {
            return Ok(StepOutcome::Saturated);
        }
        // Held until the claimed deliveries are in their lanes: a relay batch meanwhile sees the
        // room as taken.
        let mut room = self.reserve(&endpoints, free).await?;
        let cut = room.cut();
        let endpoint_slots = std::mem::take(&mut room.slots);
        let (endpoint_slots, taken, held) = rates::take(&self.store, endpoint_slots).await?;
        if endpoint_slots.is_empty() {
            return Ok(if self.lanes.slots.available_permits() == 0 {
                StepOutcome::Saturated
            } else if held {
                StepOutcome::Throttled
            } else {
                StepOutcome::Partial(0)
            });
        }
        let claim = self
            .store
            .claim_due_deliveries(&self.owner, &endpoint_slots, free as u32)
            .await?;
        if claim.deliveries.len() < free {
            self.due.remove(drained(&endpoint_slots, &claim.deliveries));
        }
        sweep::report_orphans(&claim.orphans, self.lanes.metrics.get());
        rates::give_back(&self.store, taken, &claim.deliveries).await;
        let n = claim.deliveries.len();
        let (start, back) = self.breakers.take_probes(claim.deliveries).await;
        // The lanes close in `shut_down`, after the last step; were any refused, they would be
        // handed back with the late ones.
        let refused = self.lanes.enqueue(start);
        drop(room);
        self.lanes.return_late(refused);
        if !back.is_empty() {
            self.lanes.return_late(back);
            self.hand_back_late("circuit_open").await;
        }
        // A short claim of a cut room asked only some endpoints with room: the others are
        // asked at once. Each such round drops from the due set the endpoints it found drained,
        // so the rounds end.
        Ok(if n == free || cut {
            StepOutcome::Full(n)
        } else if held && n == 0 {
            StepOutcome::Throttled
        } else {
            StepOutcome::Partial(n)
        })
    }

    /// The endpoints that may have due deliveries (see `due`) with room left in this process,
    /// as many as can fill `free`, reserved, taken in random order so no endpoint is always
    /// first in line when the global cap binds or the room is cut (see `room` for each one's
    /// room).
    async fn reserve(
        &self,
        endpoints: &crate::store::directory::Endpoints,
        free: usize,
    ) -> Result<Room, crate::store::StoreError> {
        self.any_ordered.store(endpoints.any_ordered(), Relaxed);
        if self.due.look_due() {
            let found = self.store.endpoints_with_due_deliveries().await?;
            self.due.looked(found);
        }
        let (mut live, mut gone) = (Vec::new(), Vec::new());
        for id in self.due.ids() {
            match endpoints.get(&id) {
                Some(e) => live.push(e.clone()),
                None => gone.push(id),
            }
        }
        self.due.remove(gone.iter().map(String::as_str));
        live.shuffle(&mut rand::thread_rng());
        let margin = self.config.lease_margin;
        Ok(room::reserve(
            &self.lanes,
            &live,
            free,
            margin,
            room::For::Claim,
        ))
    }

    /// The relay's handle for deliveries born claimed to this process (see `room`).
    pub fn births(&self) -> Births {
        Births {
            lanes: Arc::downgrade(&self.lanes),
            config: self.config.clone(),
            owner: self.owner.clone(),
        }
    }

    /// Runs until `shutdown`: claims and sends, waking for the relay's `wake` (new deliveries
    /// exist), a slot coming free, the poll interval (which grows while nothing is due, up to
    /// [`crate::wake::DISPATCHER_SLOWEST_POLL`]), or the moment a waiting delivery could no
    /// longer start within its lease; then shuts down as the module doc says.
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
        let writer = record::Writer::new(
            self.store.clone(),
            self.owner.clone(),
            self.lanes.metrics.get().cloned(),
            shutdown.clone(),
            self.finished.clone(),
        );
        let writer = tokio::spawn(writer.run(rx));
        let recorder = tokio::spawn(self.breakers.clone().run_recorder());
        while !shutdown.is_cancelled() {
            let step = self.step().await;
            if let Err(e) = &step {
                tracing::warn!(error = %e, "claiming deliveries failed; retrying");
            }
            let wait = wait_after(&step, &mut poll);
            if wait.is_zero() {
                continue;
            }
            let until = tokio::time::Instant::now() + wait.min(Duration::from_secs(3600));
            let until = self.lanes.next_expiry().map_or(until, |at| at.min(until));
            let until = self.due.busy_look_at().map_or(until, |at| at.min(until));
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = wake.notified() => self.due.look_soon(),
                _ = self.lanes.freed.notified() => {}
                _ = self.finished.notified(), if self.any_ordered.load(Relaxed) => {
                    self.due.look_soon();
                }
                _ = tokio::time::sleep_until(until) => {}
            }
        }
        self.shut_down(writer, recorder).await;
    }

    /// Hands back what waits, lets the tasks finish, ends the writer, ends leases left over.
    /// Each step that needs the database is bounded, so an unreachable database cannot hold
    /// shutdown up for long.
    async fn shut_down(self: Arc<Self>, writer: JoinHandle<()>, recorder: JoinHandle<()>) {
        self.lanes.drain_waiting();
        let _ = tokio::time::timeout(SHUTDOWN_RECORDING_PATIENCE, self.hand_back_late("shutdown"))
            .await;
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
            config,
            breakers,
            ..
        } = this;
        drop(lanes);
        drop(breakers);
        let _ = writer.await;
        // The last attempts' counts, if the database takes them in time.
        let _ = tokio::time::timeout(SHUTDOWN_RECORDING_PATIENCE, recorder).await;
        let release = store.release_leases(&owner, &config.retry);
        match tokio::time::timeout(SHUTDOWN_RECORDING_PATIENCE, release).await {
            Ok(Ok(r)) if r.total() == 0 => {}
            Ok(Ok(r)) => tracing::warn!(
                retried = r.retried,
                dead_lettered = r.dead_lettered,
                "leases left unrecorded at shutdown; each counts as an attempt"
            ),
            Ok(Err(e)) => tracing::warn!(error = %e, "could not release leases; they will expire"),
            Err(_) => tracing::warn!("releasing leases timed out; they will expire"),
        }
    }

    /// Gives back the deliveries taken out of their lanes unattempted (not charged; due again
    /// where they were in the queue). If the database cannot take them now, they are kept for
    /// the next step; if it never can, their leases expire and each counts as an attempt.
    async fn hand_back_late(&self, reason: &'static str) {
        let late = self.lanes.take_late();
        if late.is_empty() {
            return;
        }
        // Due again at once, wherever they go: the next claim asks for their endpoints.
        self.due.add(late.iter().map(|d| d.endpoint.id.as_str()));
        match self.store.hand_back(&self.owner, &late).await {
            Ok(n) => {
                tracing::info!(
                    handed_back = n,
                    reason,
                    "claimed deliveries given back unattempted"
                );
                if let Some(metrics) = self.lanes.metrics.get() {
                    metrics.record_handed_back(reason, n);
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, deliveries = late.len(), "handing back deliveries failed; trying again");
                self.lanes.return_late(late);
            }
        }
    }
}

/// The endpoints of `slots` whose claim took fewer deliveries than the slot asked for: nothing
/// more is due there now (the claim as a whole was not cut short by the process's room).
fn drained<'a>(
    slots: &'a [crate::store::EndpointSlot],
    claimed: &[crate::delivery::ClaimedDelivery],
) -> Vec<&'a str> {
    let mut taken: std::collections::HashMap<&str, u32> = std::collections::HashMap::new();
    for d in claimed {
        *taken.entry(d.endpoint.id.as_str()).or_default() += 1;
    }
    slots
        .iter()
        .filter(|s| taken.get(s.endpoint.id.as_str()).copied().unwrap_or(0) < s.limit)
        .map(|s| s.endpoint.id.as_str())
        .collect()
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
        Ok(StepOutcome::Partial(_) | StepOutcome::Throttled) => wait,
        Err(_) => wait.max(Duration::from_millis(500)),
    }
}
