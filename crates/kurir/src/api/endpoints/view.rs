//! An endpoint as the API shows it ([`EndpointView`]).

use chrono::{DateTime, Utc};
use kurir_core::Circuit;
use serde::Serialize;
use utoipa::ToSchema;

use crate::api::error::ApiError;
use crate::api::state::AppState;
use crate::endpoint::{each_override, Endpoint, OnDeadLetter, Ordering};
use crate::redact::Sensitive;
use crate::store::breaker::StoredCircuit;

each_override!(api_struct! { view
/// An endpoint as the API shows it.
#[derive(Debug, Serialize, ToSchema)]
pub struct EndpointView {
    /// Its id (a UUID).
    pub id: String,
    /// Where events are POSTed.
    pub url: String,
    /// Free text for operators.
    pub description: String,
    /// Event types it receives: names, `*`, or prefix wildcards like `order.*`; empty = all.
    pub event_types: Vec<String>,
    /// Whether deliveries are made.
    pub enabled: bool,
    /// Why it was disabled.
    pub disabled_reason: Option<String>,
    /// The subscriber it belongs to; absent: the operator's own.
    pub subscriber_id: Option<String>,
    /// Concurrent requests to it per kurir process.
    pub max_in_flight: u32,
    /// Requests per second to it, all kurir processes together; `null`: no limit.
    pub rate_limit_per_second: Option<u32>,
    /// `aggregate`: deliveries of events that share `aggregate_type` and `aggregate_id` are
    /// attempted one at a time, in outbox order; `none`: no order.
    pub ordering: Ordering,
    /// With ordering: whether a dead-lettered delivery holds back the later ones of its
    /// aggregate until it is replayed (`block`) or not (`skip`).
    pub ordering_on_dead_letter: OnDeadLetter,
} {
    /// Its circuit breaker (read-only).
    pub circuit: CircuitView,
    /// The signing secret: only in the answers of create and rotate-secret.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub secret: Option<Sensitive>,
    /// When each rotated-out secret that still signs stops signing.
    pub previous_secrets_expire_at: Vec<DateTime<Utc>>,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When it last changed.
    pub updated_at: DateTime<Utc>,
    /// Problems worth knowing at once, e.g. a URL the SSRF guard will refuse (create and update
    /// only; absent when there is none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}
});

impl EndpointView {
    /// The view of `e` at `now` (rotated-out secrets expired by then are left out), with its
    /// secret when `with_secret` (create and rotate only).
    pub fn new(e: Endpoint, with_secret: bool, now: DateTime<Utc>) -> Self {
        Self {
            id: e.id.to_string(),
            url: e.url,
            description: e.description,
            event_types: e.event_types.patterns().to_vec(),
            enabled: e.enabled,
            disabled_reason: e.disabled_reason,
            subscriber_id: e.subscriber_id,
            max_in_flight: e.max_in_flight,
            rate_limit_per_second: e.rate_limit_per_second,
            ordering: e.ordering,
            ordering_on_dead_letter: e.ordering_on_dead_letter,
            connect_timeout_ms: e.overrides.connect_timeout_ms,
            request_timeout_ms: e.overrides.request_timeout_ms,
            retry_initial_delay_ms: e.overrides.retry_initial_delay_ms,
            retry_max_delay_ms: e.overrides.retry_max_delay_ms,
            retry_max_attempts: e.overrides.retry_max_attempts,
            circuit_failure_threshold: e.overrides.circuit_failure_threshold,
            circuit_cooldown_ms: e.overrides.circuit_cooldown_ms,
            circuit: CircuitView::of(None, e.created_at),
            secret: with_secret.then(|| e.secret.expose().into()),
            previous_secrets_expire_at: e
                .previous_secrets
                .iter()
                .filter(|p| p.expires_at > now)
                .map(|p| p.expires_at)
                .collect(),
            created_at: e.created_at,
            updated_at: e.updated_at,
            warnings: Vec::new(),
        }
    }

    /// The view with its circuit as stored now.
    pub(crate) async fn with_circuit(mut self, state: &AppState) -> Result<Self, ApiError> {
        let stored = state.store.circuit(&self.id).await?;
        self.circuit = CircuitView::of(stored.as_ref().map(|s| &s.circuit), self.created_at);
        Ok(self)
    }

    /// The view with the warnings `state` has about its URL.
    pub(crate) fn warned(mut self, state: &AppState) -> Self {
        self.warnings.extend(state.probe.url_warning(&self.url));
        self
    }
}

/// An endpoint's circuit breaker.
#[derive(Clone, Debug, PartialEq, Serialize, ToSchema)]
pub struct CircuitView {
    /// `closed` (deliveries flow), `open` (none are attempted until `next_probe_at`) or
    /// `half_open` (one probe delivery is under way).
    #[schema(value_type = String, example = "closed")]
    pub state: &'static str,
    /// When it entered that state (for a circuit that never counted a failure: when the
    /// endpoint was created).
    pub since: DateTime<Utc>,
    /// Failed attempts (timeouts, connection errors, 5xx) since the last one that did not fail.
    pub consecutive_failures: u32,
    /// When open: when a probe may be sent.
    pub next_probe_at: Option<DateTime<Utc>>,
}

impl CircuitView {
    /// The view of `circuit`, or of a closed one since `created_at` when there is none.
    pub fn of(circuit: Option<&Circuit>, created_at: DateTime<Utc>) -> Self {
        let closed = Circuit::closed(created_at);
        let c = circuit.unwrap_or(&closed);
        Self {
            state: c.state.as_str(),
            since: c.since,
            consecutive_failures: c.consecutive_failures,
            next_probe_at: c.next_probe_at,
        }
    }

    /// The view of the circuit of `endpoint_id` among `stored`.
    pub fn find(stored: &[StoredCircuit], endpoint_id: &str, created_at: DateTime<Utc>) -> Self {
        let c = stored.iter().find(|s| s.endpoint_id == endpoint_id);
        Self::of(c.map(|s| &s.circuit), created_at)
    }
}
