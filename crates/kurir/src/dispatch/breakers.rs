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

use super::deliver::ResponseClass;
use crate::endpoint::Endpoint;
use crate::metrics::Metrics;
use crate::store::{now_millis, Store, StoreError};

/// Whether a claim may take an endpoint's deliveries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gate {
    /// Closed: as many as there is room for.
    Pass,
    /// This process holds the endpoint's probe: one delivery.
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
    /// The circuits as last read or written (no entry: closed, nothing counted).
    known: Mutex<HashMap<String, Circuit>>,
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
            probes: Mutex::default(),
            tx,
            rx: Mutex::new(Some(rx)),
        }
    }

    /// Counts transitions and disablings in `metrics`.
    pub fn set_metrics(&self, metrics: Metrics) {
        let _ = self.metrics.set(metrics);
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

    /// Reads every circuit from the database (one statement, no locks).
    pub async fn refresh(&self) -> Result<(), StoreError> {
        let stored = self.store.circuits().await?;
        let mut known = self.known();
        known.clear();
        known.extend(stored.into_iter().map(|s| (s.endpoint_id, s.circuit)));
        Ok(())
    }

    /// Whether a claim may take `endpoint`'s deliveries now. An open endpoint whose cool-down is
    /// over is probed by the one process that wins the compare-and-set; `lease` bounds the
    /// probe, after which another process may take it.
    pub async fn gate(&self, endpoint: &Endpoint, lease: Duration) -> Result<Gate, StoreError> {
        let now = now_millis();
        let due = match self.known().get(endpoint.id.as_str()) {
            None => return Ok(Gate::Pass),
            Some(c) if c.lets_through() => return Ok(Gate::Pass),
            Some(c) => c.probe_due(now),
        };
        if !due || self.probes().contains(endpoint.id.as_str()) {
            return Ok(Gate::Hold);
        }
        let (circuit, took) = self
            .store
            .update_circuit(endpoint.id.as_str(), |c| c.take_probe(now, lease))
            .await?;
        self.known().insert(endpoint.id.to_string(), circuit);
        let Some(t) = took else {
            return Ok(Gate::Hold);
        };
        self.log_transition(endpoint, t, &circuit);
        self.probes().insert(endpoint.id.to_string());
        Ok(Gate::Probe)
    }

    /// Whether a claimed delivery of `endpoint_id` may start: its circuit is closed, or this is
    /// the probe this process took (which starts once).
    pub fn may_start(&self, endpoint_id: &str) -> bool {
        if self
            .known()
            .get(endpoint_id)
            .is_none_or(Circuit::lets_through)
        {
            return true;
        }
        self.probes().remove(endpoint_id)
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
        let policy = self.policy(endpoint);
        {
            let mut known = self.known();
            let Some(c) = known.get_mut(endpoint.id.as_str()) else {
                if health == Health::Answered {
                    return;
                }
                let mut c = Circuit::closed(now_millis());
                c.record(&policy, health, started_at, now_millis());
                known.insert(endpoint.id.to_string(), c);
                drop(known);
                return self.send(endpoint, health, started_at);
            };
            if c.is_clean() && health == Health::Answered {
                return;
            }
            c.record(&policy, health, started_at, now_millis());
        }
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
            let now = now_millis();
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
            match written {
                Ok((circuit, moved)) => {
                    self.known().insert(id.to_string(), circuit);
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
            consecutive_failures = c.consecutive_failures,
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
