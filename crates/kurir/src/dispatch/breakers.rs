//! The dispatcher's side of the endpoints' circuit breakers: which endpoints a claim may take
//! deliveries of, who probes an open one, and the recorder that counts attempts into the
//! shared circuits.
//!
//! The circuits live in the database (`store::breaker`), so every process sees one breaker per
//! endpoint. Each step reads them ([`Breakers::refresh`]); a claim skips an endpoint whose
//! circuit is not closed, so its deliveries are neither attempted nor charged, and takes one
//! delivery of an open endpoint whose cool-down is over only after winning its probe
//! ([`Breakers::gate`], a compare-and-set: one probe across all processes). Attempts are
//! counted by one recorder task per process, in batches ([`Breakers::run_recorder`]); an
//! endpoint whose circuit was clean at the last read and that answered is not written, since
//! answers cannot change a clean circuit but for the success count of the failure-ratio
//! window (so the window counts successes only once it holds a failure). Each process also
//! counts its own attempts into its copy at once, so it stops sending to an endpoint its own
//! attempts just tripped without waiting for the recorder.
//!
//! Transitions are logged at WARN with the endpoint's id and url, and counted. An endpoint
//! that has failed with no answer for [`Breakers::disable_after`] is disabled.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use chrono::{DateTime, Utc};
use kurir_core::breaker::{State, Transition};
use kurir_core::{BreakerPolicy, Circuit, Health};
use tokio::sync::mpsc;

mod unrecorded;

use crate::delivery::ClaimedDelivery;
use crate::delivery::ResponseClass;
use crate::endpoint::Endpoint;
use crate::metrics::Metrics;
use crate::store::{Store, StoreError};
use unrecorded::Unrecorded;

/// Whether a claim may take an endpoint's deliveries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gate {
    /// Closed: as many as there is room for.
    Pass,
    /// A probe is due: one delivery, to carry it if this process wins it.
    Probe,
    /// Open or half-open: none.
    Hold,
}

/// One attempt, for the recorder.
struct Observed {
    endpoint: Arc<Endpoint>,
    health: Health,
    started_at: DateTime<Utc>,
}

/// The breakers as this process knows them, and the recorder's channel.
pub struct Breakers {
    store: Store,
    defaults: BreakerPolicy,
    disable_after: Duration,
    metrics: OnceLock<Metrics>,
    /// The circuits as last read or written (no entry: closed, nothing counted), with this
    /// process's attempts the recorder has not written yet counted in.
    known: Mutex<HashMap<String, Circuit>>,
    /// Per endpoint, those attempts, in order: counted in again when the circuits are read.
    unrecorded: Mutex<Unrecorded>,
    /// Endpoints whose probe this process took and has not started yet.
    probes: Mutex<HashSet<String>>,
    tx: mpsc::UnboundedSender<Observed>,
    rx: Mutex<Option<mpsc::UnboundedReceiver<Observed>>>,
}

/// The health an attempt's outcome says, if it says any: nothing was sent when the SSRF guard
/// refused or the request could not be built.
pub fn health_of(class: ResponseClass) -> Option<Health> {
    match class {
        ResponseClass::Status(5) | ResponseClass::Timeout | ResponseClass::ConnectError => {
            Some(Health::Failed)
        }
        ResponseClass::Status(_) => Some(Health::Answered),
        ResponseClass::Refused | ResponseClass::RequestError => None,
    }
}

impl Breakers {
    /// Breakers with the process-wide `defaults`, disabling an endpoint that failed for
    /// `disable_after`.
    pub fn new(store: Store, defaults: BreakerPolicy, disable_after: Duration) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        Self {
            store,
            defaults,
            disable_after,
            metrics: OnceLock::new(),
            known: Mutex::default(),
            unrecorded: Mutex::default(),
            probes: Mutex::default(),
            tx,
            rx: Mutex::new(Some(rx)),
        }
    }

    /// Counts transitions and disablings in `metrics`.
    pub fn set_metrics(&self, metrics: Metrics) {
        let _ = self.metrics.set(metrics);
    }

    /// The store the circuits are kept in.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Now by the store's clock, which every process sharing the circuits agrees on (see
    /// `crate::clock`).
    fn now(&self) -> DateTime<Utc> {
        self.store.clock().now_millis()
    }

    /// How long an endpoint fails, with no answer, before it is disabled.
    pub fn disable_after(&self) -> Duration {
        self.disable_after
    }

    /// `endpoint`'s policy: its overrides, else the defaults.
    pub fn policy(&self, endpoint: &Endpoint) -> BreakerPolicy {
        let o = &endpoint.overrides;
        BreakerPolicy {
            failure_threshold: o
                .circuit_failure_threshold
                .unwrap_or(self.defaults.failure_threshold),
            cooldown: o
                .circuit_cooldown_ms
                .map_or(self.defaults.cooldown, Duration::from_millis),
        }
    }

    fn known(&self) -> MutexGuard<'_, HashMap<String, Circuit>> {
        self.known.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn probes(&self) -> MutexGuard<'_, HashSet<String>> {
        self.probes.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn unrecorded(&self) -> MutexGuard<'_, Unrecorded> {
        self.unrecorded.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reads every circuit from the database (one statement, no locks), and counts in this
    /// process's attempts not written yet, so a read never forgets them.
    pub async fn refresh(&self) -> Result<(), StoreError> {
        let began = self.unrecorded().writes;
        let stored = self.store.circuits().await?;
        let unrecorded = self.unrecorded();
        let newer = |id: &str| unrecorded.written_at.get(id).is_some_and(|&w| w > began);
        let mut known = self.known();
        known.retain(|id, _| newer(id));
        let now = self.now();
        for s in stored.into_iter().filter(|s| !newer(&s.endpoint_id)) {
            known.insert(s.endpoint_id, s.circuit);
        }
        for id in unrecorded.attempts.keys().filter(|id| !newer(id)) {
            let c = known
                .entry(id.clone())
                .or_insert_with(|| Circuit::closed(now));
            unrecorded.count_into(id, c, now);
        }
        Ok(())
    }

    /// Takes `circuit`, just written by this process, as its copy of `id`'s; the first
    /// `written` attempts not written yet were in that write, the others are counted in.
    fn wrote(&self, id: &str, circuit: Circuit, written: usize) {
        let mut unrecorded = self.unrecorded();
        unrecorded.forget(id, written);
        unrecorded.writes += 1;
        let writes = unrecorded.writes;
        unrecorded.written_at.insert(id.to_owned(), writes);
        let mut c = circuit;
        unrecorded.count_into(id, &mut c, self.now());
        self.known().insert(id.to_owned(), c);
    }

    /// Forgets the first `n` attempts not written of `id` (their write failed).
    fn forget(&self, id: &str, n: usize) {
        self.unrecorded().forget(id, n);
    }

    /// Whether a claim may take `endpoint`'s deliveries now, as this process knows its
    /// circuit. [`Gate::Probe`] is a candidate: the claimed delivery becomes the probe only if
    /// this process wins it ([`Breakers::take_probes`]).
    pub fn gate(&self, endpoint: &Endpoint) -> Gate {
        if self.lets_through(endpoint) {
            return Gate::Pass;
        }
        let due = self
            .known()
            .get(endpoint.id.as_str())
            .is_some_and(|c| c.probe_due(self.now()));
        if due && !self.holds_probe(endpoint) {
            Gate::Probe
        } else {
            Gate::Hold
        }
    }

    /// Splits claimed deliveries into those that may start and those to hand back: a delivery
    /// of an endpoint whose circuit is not closed is its probe if this process wins the probe
    /// (a compare-and-set on the shared circuit: one probe across all processes, until its
    /// lease is up), and is handed back otherwise. A claim taken before the probe means one
    /// is only taken when a delivery is due to carry it.
    pub async fn take_probes(
        &self,
        claimed: Vec<ClaimedDelivery>,
    ) -> (Vec<ClaimedDelivery>, Vec<ClaimedDelivery>) {
        let (mut start, mut back) = (Vec::with_capacity(claimed.len()), Vec::new());
        for d in claimed {
            if self.lets_through(&d.endpoint) {
                start.push(d);
                continue;
            }
            if self.holds_probe(&d.endpoint) {
                back.push(d);
                continue;
            }
            let now = self.now();
            let lease = d
                .lease_deadline
                .saturating_duration_since(tokio::time::Instant::now());
            let taken = self
                .store
                .update_circuit(d.endpoint.id.as_str(), |c| c.take_probe(now, lease))
                .await;
            match taken {
                Ok((circuit, Some(t))) => {
                    self.wrote(d.endpoint.id.as_str(), circuit, 0);
                    self.log_transition(&d.endpoint, t, &circuit);
                    self.probes().insert(d.endpoint.id.to_string());
                    start.push(d);
                }
                Ok((circuit, None)) => {
                    self.wrote(d.endpoint.id.as_str(), circuit, 0);
                    back.push(d);
                }
                Err(e) => {
                    tracing::warn!(endpoint_id = %d.endpoint.id, error = %e, "could not take a circuit breaker probe");
                    back.push(d);
                }
            }
        }
        (start, back)
    }

    /// Whether `endpoint`'s deliveries may be sent as far as this process knows: its breaker
    /// is off or closed.
    pub fn lets_through(&self, endpoint: &Endpoint) -> bool {
        Circuit::is_off(&self.policy(endpoint))
            || self
                .known()
                .get(endpoint.id.as_str())
                .is_none_or(Circuit::lets_through)
    }

    /// Whether `endpoint` has a probe this process took and has not started.
    pub fn holds_probe(&self, endpoint: &Endpoint) -> bool {
        self.probes().contains(endpoint.id.as_str())
    }

    /// Whether a claimed delivery of `endpoint` may start: its circuit lets it through, or this
    /// is the probe this process took (which starts once).
    pub fn may_start(&self, endpoint: &Endpoint) -> bool {
        self.lets_through(endpoint) || self.probes().remove(endpoint.id.as_str())
    }

    /// Counts an attempt to `endpoint` that started at `started_at` and ended as `class`: into
    /// this process's copy at once, and into the database through the recorder.
    pub fn observe(
        &self,
        endpoint: &Arc<Endpoint>,
        class: ResponseClass,
        started_at: DateTime<Utc>,
    ) {
        let Some(health) = health_of(class) else {
            return;
        };
        // Counted even with the breaker off: the auto-disable reads the same circuit.
        let policy = self.policy(endpoint);
        let mut unrecorded = self.unrecorded();
        let mut known = self.known();
        let now = self.now();
        let c = known.get_mut(endpoint.id.as_str());
        if health == Health::Answered && c.as_ref().is_none_or(|c| c.is_clean()) {
            return;
        }
        let c = match c {
            Some(c) => c,
            None => known
                .entry(endpoint.id.to_string())
                .or_insert_with(|| Circuit::closed(now)),
        };
        c.record(&policy, health, started_at, now);
        unrecorded
            .attempts
            .entry(endpoint.id.to_string())
            .or_default()
            .push((policy, health, started_at));
        drop((known, unrecorded));
        self.send(endpoint, health, started_at);
    }

    fn send(&self, endpoint: &Arc<Endpoint>, health: Health, started_at: DateTime<Utc>) {
        // The receiver lives as long as the process's dispatcher; without it there is nothing
        // to record into.
        let _ = self.tx.send(Observed {
            endpoint: endpoint.clone(),
            health,
            started_at,
        });
    }

    /// Records observed attempts into the shared circuits, in batches, until every sender is
    /// gone (the [`Breakers`] is dropped). A batch the database cannot take is logged and
    /// dropped: the breaker then counts fewer failures, never more.
    pub async fn run_recorder(self: Arc<Self>) {
        let rx = self.rx.lock().unwrap_or_else(|p| p.into_inner()).take();
        let Some(mut rx) = rx else {
            return;
        };
        let weak = Arc::downgrade(&self);
        drop(self);
        let mut batch = Vec::new();
        while rx.recv_many(&mut batch, 1024).await > 0 {
            let Some(this) = weak.upgrade() else {
                return;
            };
            this.record(&batch).await;
            batch.clear();
        }
    }

    async fn record(&self, batch: &[Observed]) {
        let mut by_endpoint: HashMap<&str, Vec<&Observed>> = HashMap::new();
        for o in batch {
            by_endpoint
                .entry(o.endpoint.id.as_str())
                .or_default()
                .push(o);
        }
        for (id, seen) in by_endpoint {
            let endpoint = &seen[0].endpoint;
            let policy = self.policy(endpoint);
            let now = self.now();
            let written = self
                .store
                .update_circuit(id, |c| {
                    let moved: Vec<Transition> = seen
                        .iter()
                        .filter_map(|o| c.record(&policy, o.health, o.started_at, now))
                        .collect();
                    Some(moved)
                })
                .await;
            match &written {
                Ok((circuit, _)) => self.wrote(id, *circuit, seen.len()),
                // Given up: no longer this process's to count in.
                Err(_) => self.forget(id, seen.len()),
            }
            match written {
                Ok((circuit, moved)) => {
                    for t in moved.unwrap_or_default() {
                        self.log_transition(endpoint, t, &circuit);
                    }
                    if circuit.failing_for(self.disable_after, now) {
                        self.disable(endpoint, &circuit).await;
                    }
                }
                Err(e) => tracing::warn!(
                    endpoint_id = %endpoint.id,
                    error = %e,
                    attempts = seen.len(),
                    "could not count attempts into the circuit breaker"
                ),
            }
        }
    }

    async fn disable(&self, endpoint: &Endpoint, circuit: &Circuit) {
        let since = circuit.failing_since.unwrap_or(circuit.since);
        let reason = format!(
            "failed with no successful attempt since {} (KURIR_ENDPOINT_DISABLE_AFTER)",
            since.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        );
        match self
            .store
            .disable_failing_endpoint(&endpoint.id, &reason)
            .await
        {
            Ok(true) => {
                tracing::warn!(
                    endpoint_id = %endpoint.id,
                    url = %endpoint.url,
                    failing_since = %since,
                    "endpoint disabled: it kept failing; its pending deliveries wait until it is enabled again"
                );
                if let Some(m) = self.metrics.get() {
                    m.record_endpoint_auto_disabled(&endpoint.id);
                }
            }
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(endpoint_id = %endpoint.id, error = %e, "could not disable a failing endpoint")
            }
        }
    }

    fn log_transition(&self, endpoint: &Endpoint, t: Transition, c: &Circuit) {
        tracing::warn!(
            endpoint_id = %endpoint.id,
            url = %endpoint.url,
            from = t.from.as_str(),
            to = t.to.as_str(),
            // The counts that made this transition, not those after the rest of its batch.
            consecutive_failures = t.counts.consecutive_failures,
            window_attempts = t.counts.window_attempts,
            window_failures = t.counts.window_failures,
            next_probe_at = c.next_probe_at.map(|at| at.to_rfc3339()),
            "circuit breaker {}",
            match t.to {
                State::Open => "opened: no deliveries to this endpoint until a probe succeeds",
                State::HalfOpen => "half-open: one probe delivery",
                State::Closed => "closed: deliveries flow again",
            }
        );
        if let Some(m) = self.metrics.get() {
            m.record_circuit_transition(&endpoint.id, t.from.as_str(), t.to.as_str());
        }
    }
}
