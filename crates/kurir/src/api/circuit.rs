//! The read-only `circuit` of an endpoint as the API shows it: the state of its circuit
//! breaker, shared by every kurir process (`store::breaker`).

use chrono::{DateTime, Utc};
use kurir_core::Circuit;
use serde::Serialize;
use utoipa::ToSchema;

use crate::store::breaker::StoredCircuit;

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
