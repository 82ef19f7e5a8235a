//! The lanes: per endpoint, this process's claimed deliveries, in flight or waiting for a slot,
//! and the tasks that send them.
//!
//! A delivery is only started while it can still finish, and be recorded, within its lease
//! ([`Sender::latest_start`]); one that waited too long for a slot is taken out of its lane
//! unattempted, for the dispatcher to hand back (due again at once, its attempt not charged).
//! So no request is ever made under a lease that may have run out, which another process's
//! sweep would have ended and another process could hold by then.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use rand::seq::SliceRandom;
use tokio::sync::{mpsc, Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::task::TaskTracker;

use super::breakers::Breakers;
use super::deliver::log_attempt;
use super::deliver::Sender;
use super::QUICK_ANSWER;
use crate::delivery::{ClaimedDelivery, Completion};
use crate::endpoint::EndpointId;
use crate::metrics::Metrics;
use crate::store::directory::Endpoints;

/// One endpoint's deliveries in this process: requests in flight and claimed ones waiting.
#[derive(Default)]
pub(super) struct Lane {
    pub in_flight: u32,
    pub max_in_flight: u32,
    pub waiting: VecDeque<ClaimedDelivery>,
    /// The last attempt finished within [`QUICK_ANSWER`].
    pub quick: bool,
    /// Room a claim or a relay batch reserved for deliveries not here yet (see `room`).
    pub reserved: u32,
}

impl Lane {
    /// The first waiting delivery that can still start at `now`, whose endpoint is still among
    /// `known` (the process's endpoint directory as last read: not deleted, not disabled, its
    /// subscriber not disabled), and that its endpoint's circuit breaker lets through; those
    /// that cannot are moved to `late`, to be handed back uncharged.
    fn next_startable(
        &mut self,
        sender: &Sender,
        breakers: &Breakers,
        known: &Endpoints,
        now: Instant,
        late: &mut Vec<ClaimedDelivery>,
    ) -> Option<ClaimedDelivery> {
        while let Some(d) = self.waiting.pop_front() {
            if now <= sender.latest_start(&d)
                && known.get(d.endpoint.id.as_str()).is_some()
                && breakers.may_start(&d.endpoint)
            {
                return Some(d);
            }
            late.push(d);
        }
        None
    }
}

/// What the dispatcher and its delivery tasks share.
pub(super) struct Lanes {
    pub sender: Arc<Sender>,
    /// The endpoints' circuit breakers: a delivery starts only if its breaker lets it.
    pub breakers: Arc<Breakers>,
    pub slots: Arc<Semaphore>,
    lanes: Mutex<HashMap<EndpointId, Lane>>,
    pub completions: mpsc::Sender<Completion>,
    /// Notified when a slot came free, a lane runs low, or deliveries wait to be handed back:
    /// time for the dispatcher's next step.
    pub freed: Notify,
    pub tracker: TaskTracker,
    /// Counts every attempt, when set (without, attempts are only logged).
    pub metrics: OnceLock<Metrics>,
    /// Deliveries taken out of their lanes unattempted, for the dispatcher to hand back.
    late: Mutex<Vec<ClaimedDelivery>>,
    /// Set, under the lanes' lock, when shutdown drained them: nothing is taken in after.
    closed: AtomicBool,
}

impl Lanes {
    /// Lanes sending through `sender`, at most `max_concurrency` requests at once, sending
    /// what they attempted to `completions`.
    pub fn new(
        sender: Sender,
        breakers: Arc<Breakers>,
        max_concurrency: usize,
        completions: mpsc::Sender<Completion>,
    ) -> Self {
        Self {
            sender: Arc::new(sender),
            breakers,
            slots: Arc::new(Semaphore::new(max_concurrency)),
            lanes: Mutex::default(),
            completions,
            freed: Notify::new(),
            tracker: TaskTracker::new(),
            metrics: OnceLock::new(),
            late: Mutex::default(),
            closed: AtomicBool::new(false),
        }
    }

    pub fn lock(&self) -> MutexGuard<'_, HashMap<EndpointId, Lane>> {
        self.lanes.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn late(&self) -> MutexGuard<'_, Vec<ClaimedDelivery>> {
        self.late.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Deliveries in flight, waiting or reserved, all endpoints together.
    pub fn outstanding(&self) -> usize {
        self.lock()
            .values()
            .map(|l| (l.in_flight + l.reserved) as usize + l.waiting.len())
            .sum()
    }

    /// Whether shutdown drained the lanes.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Relaxed)
    }

    /// Puts claimed deliveries in their lanes and starts what the caps allow; returns them all,
    /// taking none, once shutdown drained the lanes.
    pub fn enqueue(self: &Arc<Self>, claimed: Vec<ClaimedDelivery>) -> Vec<ClaimedDelivery> {
        {
            let mut lanes = self.lock();
            if self.is_closed() {
                return claimed;
            }
            for d in claimed {
                let lane = lanes.entry(d.endpoint.id.clone()).or_default();
                lane.max_in_flight = d.endpoint.max_in_flight.max(1);
                lane.waiting.push_back(d);
            }
        }
        self.start_waiting();
        Vec::new()
    }

    /// Moves every waiting delivery that can no longer start in time to the late ones.
    pub fn expire_waiting(&self) {
        let now = Instant::now();
        let mut late = Vec::new();
        for lane in self.lock().values_mut() {
            if lane
                .waiting
                .iter()
                .any(|d| now > self.sender.latest_start(d))
            {
                let (keep, expired): (VecDeque<_>, VecDeque<_>) = lane
                    .waiting
                    .drain(..)
                    .partition(|d| now <= self.sender.latest_start(d));
                late.extend(expired);
                lane.waiting = keep;
            }
        }
        self.late().extend(late);
    }

    /// Moves every waiting delivery whose endpoint's circuit breaker holds it (open, or
    /// half-open with the probe elsewhere) to the late ones, to be handed back uncharged.
    pub fn divert_held(&self) {
        let mut late = Vec::new();
        for lane in self.lock().values_mut() {
            let held = lane.waiting.front().is_some_and(|d| {
                !self.breakers.lets_through(&d.endpoint) && !self.breakers.holds_probe(&d.endpoint)
            });
            if held {
                late.extend(lane.waiting.drain(..));
            }
        }
        self.late().extend(late);
    }

    /// Moves every waiting delivery whose endpoint is no longer among `known` (deleted,
    /// disabled, or its subscriber disabled or deleted, as the directory was just read) to the
    /// late ones, to be handed back uncharged: its deliveries wait in the database until the
    /// endpoint is back (or were cancelled with it).
    pub fn divert_stopped(&self, known: &Endpoints) {
        let mut late = Vec::new();
        for (id, lane) in self.lock().iter_mut() {
            if !lane.waiting.is_empty() && known.get(id.as_str()).is_none() {
                late.extend(lane.waiting.drain(..));
            }
        }
        self.late().extend(late);
    }

    /// The earliest instant a waiting delivery stops being able to start in time.
    pub fn next_expiry(&self) -> Option<Instant> {
        self.lock()
            .values()
            .flat_map(|lane| lane.waiting.iter())
            .map(|d| self.sender.latest_start(d))
            .min()
    }

    /// Takes every waiting delivery out of its lane (shutdown), with the late ones, and closes
    /// the lanes to any more.
    pub fn drain_waiting(&self) {
        let waiting: Vec<ClaimedDelivery> = {
            let mut lanes = self.lock();
            self.closed.store(true, Relaxed);
            lanes
                .values_mut()
                .flat_map(|lane| lane.waiting.drain(..))
                .collect()
        };
        self.late().extend(waiting);
    }

    /// Adds deliveries that can no longer start in time to the late ones, and wakes the
    /// dispatcher to hand them back before their leases run out.
    fn divert(&self, late: Vec<ClaimedDelivery>) {
        if !late.is_empty() {
            self.late().extend(late);
            self.freed.notify_one();
        }
    }

    /// The deliveries to hand back, taken.
    pub fn take_late(&self) -> Vec<ClaimedDelivery> {
        std::mem::take(&mut *self.late())
    }

    /// Puts back deliveries whose hand-back failed, to try again.
    pub fn return_late(&self, deliveries: Vec<ClaimedDelivery>) {
        self.late().extend(deliveries);
    }

    /// Starts waiting deliveries, in random lane order, while their endpoint and the process
    /// have room; those that can no longer start in time go to the late ones.
    pub fn start_waiting(self: &Arc<Self>) {
        let now = Instant::now();
        let mut started = Vec::new();
        let mut late = Vec::new();
        {
            let mut lanes = self.lock();
            let mut ids: Vec<EndpointId> = lanes
                .iter()
                .filter(|(_, l)| !l.waiting.is_empty() && l.in_flight < l.max_in_flight)
                .map(|(id, _)| id.clone())
                .collect();
            ids.shuffle(&mut rand::thread_rng());
            let known = self.breakers.store().known_endpoints();
            'lanes: for id in ids {
                let Some(lane) = lanes.get_mut(&id) else {
                    continue;
                };
                while lane.in_flight < lane.max_in_flight && !lane.waiting.is_empty() {
                    let Ok(permit) = self.slots.clone().try_acquire_owned() else {
                        break 'lanes;
                    };
                    let next =
                        lane.next_startable(&self.sender, &self.breakers, &known, now, &mut late);
                    if let Some(d) = next {
                        lane.in_flight += 1;
                        started.push((d, permit));
                    }
                }
            }
        }
        self.divert(late);
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
                // Past its lease the attempt is another process's business (the sweep may have
                // ended the lease, another claim may hold it): its completion is fenced out of
                // the delivery, and its health out of the breaker, since what held it up past the
                // lease was this process (a pause), not the endpoint.
                if Instant::now() > delivery.lease_deadline {
                    tracing::warn!(
                        endpoint_id = %delivery.endpoint.id,
                        event_id = %delivery.event.event_id,
                        attempt = delivery.attempt,
                        "attempt finished after its lease; not counted in the circuit breaker"
                    );
                } else {
                    let started_at = attempted.completion.started_at;
                    lanes
                        .breakers
                        .observe(&delivery.endpoint, attempted.class, started_at);
                }
                if attempted.completion.status_code == Some(429) {
                    super::rates::throttled(lanes.breakers.store(), &delivery.endpoint).await;
                }
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
    /// the slot is given back even if the lane has deliveries waiting. Deliveries that can no
    /// longer start in time go to the late ones.
    fn next_in_lane(
        &self,
        endpoint: &EndpointId,
        quick: bool,
        keep: bool,
    ) -> (Option<ClaimedDelivery>, bool) {
        let mut late = Vec::new();
        let known = self.breakers.store().known_endpoints();
        let next = {
            let mut lanes = self.lock();
            let Some(lane) = lanes.get_mut(endpoint) else {
                return (None, true);
            };
            lane.quick = quick;
            let next = if keep {
                let now = Instant::now();
                lane.next_startable(&self.sender, &self.breakers, &known, now, &mut late)
                    .map(|d| (d, (lane.waiting.len() as u32) < lane.max_in_flight))
            } else {
                None
            };
            if next.is_none() {
                lane.in_flight -= 1;
            }
            next
        };
        self.divert(late);
        match next {
            Some((d, low)) => (Some(d), low),
            None => (None, true),
        }
    }
}
