//! The store's pure rules, the same whatever the dialect: which endpoints an event fans out to,
//! and which status a completion leads to. Each backend runs its SQL around these.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::directory::Endpoints;
use super::rows::OutboxHead;
use crate::catalog::{Checks, Verdict};
use crate::delivery::NextState;
use crate::endpoint::{ordering_key, Endpoint};

/// The delivery status a completion leads to.
pub(crate) fn next_status(next: &NextState) -> &'static str {
    match next {
        NextState::Sent => "sent",
        NextState::Retry(_) => "failed",
        NextState::DeadLetter | NextState::Gone => "dead_letter",
    }
}

/// When a completion makes its delivery due again (`None`: it keeps its `available_at`).
pub(crate) fn next_at(next: &NextState) -> Option<DateTime<Utc>> {
    match next {
        NextState::Retry(at) => Some(*at),
        _ => None,
    }
}

/// The endpoints of the completions that answered 410 Gone (to be disabled).
pub(crate) fn gone_endpoints(done: &[crate::delivery::Completion]) -> Vec<&str> {
    done.iter()
        .filter(|c| c.next == NextState::Gone)
        .map(|c| c.endpoint_id.as_str())
        .collect()
}

/// What one relay batch writes: a delivery per (event, wanting endpoint), as parallel columns
/// (with its ordering key, see [`crate::endpoint::ordering_key`]), and the outbox rows it passes
/// (MySQL marks them dispatched).
#[derive(Default)]
pub(crate) struct FanOut {
    pub outbox_ids: Vec<i64>,
    pub event_ids: Vec<String>,
    pub endpoint_ids: Vec<String>,
    pub ordering_keys: Vec<Option<String>>,
    pub dispatched: Vec<i64>,
    /// Rows written with plain SQL that the API would have refused, with the reason: a
    /// payload nested deeper than [`crate::limits::MAX_JSON_DEPTH`], or one the event catalog
    /// refuses. Recorded as refused, fanned out to no one.
    pub refused: Vec<(i64, String)>,
    /// The catalog's refusals among them, for the relay's log line and metrics.
    pub refusals: Vec<super::RefusedEvent>,
    /// Events of a deprecated version, per (type, version): delivered, and counted.
    pub deprecated: BTreeMap<(String, i32), u64>,
    pub events_by_type: BTreeMap<String, u64>,
    /// The endpoints that get a delivery of this batch, each once, as the batch read them: the
    /// only ones a relay batch offers born claims to (see `store::born`).
    pub targets: Vec<Arc<Endpoint>>,
}

/// The `refused_reason` of an outbox row whose payload nests too deep, named as the contract's
/// rules are (the SQL contract table in the README).
pub(crate) fn too_deep_reason() -> String {
    format!(
        "kurir_outbox_payload_depth: payload must nest at most {} levels deep",
        crate::limits::MAX_JSON_DEPTH
    )
}

/// Fans `events` out to the endpoints of `endpoints` that want them: one created no later than
/// the event, whose filter matches its type. Each event costs the endpoints it matches, found
/// through the directory's index, not the number installed.
///
/// Each event is first checked against the catalog (`checks`): one it refuses is recorded as
/// refused with the reason, as a payload nested too deep is.
pub(crate) fn fan_out(events: Vec<OutboxHead>, endpoints: &Endpoints, checks: &Checks) -> FanOut {
    let mut out = FanOut::default();
    let mut targets: HashSet<&str> = HashSet::new();
    for event in events {
        out.dispatched.push(event.id);
        if event.passed {
            continue;
        }
        let depth = event.suspect.as_deref().map(crate::limits::json_depth);
        if depth.is_some_and(|d| d > crate::limits::MAX_JSON_DEPTH) {
            out.refused.push((event.id, too_deep_reason()));
            continue;
        }
        match checks.check_text(&event.event_type, event.version, event.payload.as_deref()) {
            Verdict::Refused(r) => {
                out.refused.push((event.id, r.reason));
                out.refusals.push(super::RefusedEvent {
                    event_id: event.event_id,
                    event_type: event.event_type,
                    version: event.version,
                    masked_reason: r.masked_reason,
                });
                continue;
            }
            Verdict::Pass { deprecated: true } => {
                let key = (event.event_type.clone(), event.version);
                *out.deprecated.entry(key).or_default() += 1;
            }
            Verdict::Pass { deprecated: false } => {}
        }
        let created_at = event.created_at.0;
        for target in endpoints.matching(event.subscriber_id.as_deref(), &event.event_type) {
            if target.created_at > created_at {
                continue;
            }
            if targets.insert(target.id.as_str()) {
                out.targets.push(target.clone());
            }
            out.outbox_ids.push(event.id);
            out.event_ids.push(event.event_id.clone());
            out.endpoint_ids.push(target.id.as_str().to_owned());
            out.ordering_keys.push(ordering_key(
                target.ordering,
                event.aggregate_type.as_deref(),
                event.aggregate_id.as_deref(),
            ));
        }
        *out.events_by_type.entry(event.event_type).or_default() += 1;
    }
    out
}

impl FanOut {
    /// The first outbox row of the batch, when the batch holds keyed deliveries: they may be
    /// written only after every earlier batch (see `store::ordering`).
    pub fn ordered_from(&self) -> Option<i64> {
        self.ordering_keys
            .iter()
            .any(Option::is_some)
            .then(|| self.dispatched.iter().copied().min())
            .flatten()
    }

    /// The refused rows as parallel columns of ids and reasons, for one statement that records
    /// them all.
    pub fn refused_columns(&self) -> (Vec<i64>, Vec<&str>) {
        self.refused.iter().map(|(id, r)| (*id, r.as_str())).unzip()
    }

    /// The refused rows as one JSON array of `[id, reason]`.
    pub fn refused_json(&self) -> String {
        serde_json::to_string(&self.refused).unwrap_or_else(|_| "[]".to_owned())
    }

    /// The relay batch's outcome, given how many deliveries the insert created.
    pub fn outcome(self, inserted: u64) -> super::RelayOutcome {
        super::RelayOutcome {
            events: self.dispatched.len(),
            deliveries: inserted as usize,
            events_by_type: self.events_by_type,
            refused: self.refusals,
            deprecated: self.deprecated,
        }
    }
}
