//! The store's pure rules, the same whatever the dialect: which endpoints an event fans out to,
//! and which status a completion leads to. Each backend runs its SQL around these.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use super::rows::{FanOutRow, OutboxHead};
use super::{Result, StoreError};
use crate::delivery::NextState;
use crate::endpoint::{ordering_key, Ordering};

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

/// An enabled endpoint as the relay sees it.
pub(crate) struct FanOutTarget {
    pub id: String,
    pub filter: crate::endpoint::EventFilter,
    pub ordering: Ordering,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl FanOutTarget {
    /// Whether an event of `event_type` written at `event_created_at` goes to this endpoint.
    pub fn wants(&self, event_type: &str, event_created_at: DateTime<Utc>) -> bool {
        self.created_at <= event_created_at && self.filter.matches(event_type)
    }
}

impl TryFrom<FanOutRow> for FanOutTarget {
    type Error = StoreError;

    fn try_from(row: FanOutRow) -> Result<Self> {
        let filter = serde_json::from_str(&row.event_types).map_err(|e| StoreError::Corrupt {
            table: "kurir_endpoints",
            message: format!("event_types of {}: {e}", row.id),
        })?;
        let ordering = Ordering::from_stored(&row.ordering).ok_or_else(|| StoreError::Corrupt {
            table: "kurir_endpoints",
            message: format!("ordering of {}: '{}'", row.id, row.ordering),
        })?;
        Ok(Self {
            id: row.id,
            filter,
            ordering,
            created_at: row.created_at.0,
            updated_at: row.updated_at.0,
        })
    }
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
    pub events_by_type: BTreeMap<String, u64>,
    /// Each target's `updated_at` as this batch read it: a delivery is born claimed only with
    /// the endpoint's settings as of this read (see `store::born`).
    pub versions: BTreeMap<String, DateTime<Utc>>,
}

/// Fans `events` out to the endpoints of `targets` that want them: one created no later than
/// the event, whose filter matches its type.
pub(crate) fn fan_out(events: Vec<OutboxHead>, targets: Vec<FanOutRow>) -> Result<FanOut> {
    let targets = targets
        .into_iter()
        .map(FanOutTarget::try_from)
        .collect::<Result<Vec<_>>>()?;
    let mut out = FanOut {
        versions: targets
            .iter()
            .map(|t| (t.id.clone(), t.updated_at))
            .collect(),
        ..FanOut::default()
    };
    for event in events {
        out.dispatched.push(event.id);
        if event.passed {
            continue;
        }
        for target in targets
            .iter()
            .filter(|t| t.wants(&event.event_type, event.created_at.0))
        {
            out.outbox_ids.push(event.id);
            out.event_ids.push(event.event_id.clone());
            out.endpoint_ids.push(target.id.clone());
            out.ordering_keys.push(ordering_key(
                target.ordering,
                event.aggregate_type.as_deref(),
                event.aggregate_id.as_deref(),
            ));
        }
        *out.events_by_type.entry(event.event_type).or_default() += 1;
    }
    Ok(out)
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

    /// The relay batch's outcome, given how many deliveries the insert created.
    pub fn outcome(self, inserted: u64) -> super::RelayOutcome {
        super::RelayOutcome {
            events: self.dispatched.len(),
            deliveries: inserted as usize,
            events_by_type: self.events_by_type,
        }
    }
}
