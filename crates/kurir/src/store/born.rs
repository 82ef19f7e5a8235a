//! Deliveries born claimed (issue 19, item 2): a relay batch inserts the deliveries its own
//! process has room for already leased to that process, as a claim would lease them, and the
//! relay hands them straight to the dispatcher's lanes. The claim's separate round trip, and
//! its rewrite of every such row, are saved; the rest are inserted pending, for any process.
//!
//! A born-claimed row is exactly what a claim leaves: `processing`, `lease_owner` the process,
//! `lease_expires_at` the database's now plus the slot's lease, `attempt_count` 1. So every
//! rule written for leased rows holds for it unchanged: the completion's fence, the hand-back,
//! the lease sweep (which takes back a dead process's born rows), the shutdown release, an
//! endpoint's deletion (which waits for the relay's batch, see each dialect's relay). The
//! dispatcher offers room only where a claim would take rows (see `dispatch::room`); this
//! module also refuses keyed rows, whatever room is offered: an ordered endpoint's delivery may
//! start only once it is its aggregate's head, which only the claim checks.

use std::collections::HashMap;
use std::sync::Arc;

use super::rules::FanOut;
use super::{EndpointSlot, RelayOutcome, Result};
use crate::delivery::ClaimedDelivery;
use crate::endpoint::Endpoint;

/// Room for a relay batch's deliveries born claimed, asked for once the batch knows where its
/// deliveries go: the room of the endpoints the batch fans out to, and of no other, is reserved
/// (the dispatcher's side, `dispatch::room`, implements it).
pub trait BirthOffer: Send {
    /// Reserves room at `targets` (the batch's endpoints, as it read them) until the batch's
    /// deliveries are handed over; `None` when there is none.
    fn reserve(&mut self, targets: &[Arc<Endpoint>]) -> Option<BornRoom<'_>>;
}

/// The room a relay batch may fill with deliveries born claimed.
#[derive(Clone, Copy, Debug)]
pub struct BornRoom<'a> {
    /// The lease owner: the relaying process.
    pub owner: &'a str,
    /// Per endpoint, how many of its deliveries the process can take, and their lease.
    pub slots: &'a [EndpointSlot],
    /// How many in all.
    pub limit: u32,
}

/// What a relay batch did, with the deliveries born claimed to the relaying process.
#[derive(Debug, Default)]
pub struct Relayed {
    /// Events and deliveries, as for a batch without room.
    pub outcome: RelayOutcome,
    /// The deliveries leased to the owner of the room, ready to be sent.
    pub born: Vec<ClaimedDelivery>,
}

impl From<RelayOutcome> for Relayed {
    fn from(outcome: RelayOutcome) -> Self {
        Self {
            outcome,
            born: Vec::new(),
        }
    }
}

/// Per fan-out row, the slot it is born claimed into, if any: rows without an ordering key,
/// in batch order, while their endpoint's slot and the room's limit last.
pub(crate) fn births<'a>(fan_out: &FanOut, room: Option<BornRoom<'a>>) -> Births<'a> {
    let Some(room) = room.filter(|r| r.limit > 0 && !r.slots.is_empty()) else {
        return Births::default();
    };
    // The slots are of the endpoints as this batch read them (see `BirthOffer`), so a born
    // delivery is signed and sent with the settings the batch fanned it out with.
    let mut left: HashMap<&str, (u32, &'a EndpointSlot)> = (room.slots.iter())
        .map(|s| (s.endpoint.id.as_str(), (s.limit, s)))
        .collect();
    let mut total = room.limit;
    let mut rows = Vec::with_capacity(fan_out.endpoint_ids.len());
    for (endpoint, key) in fan_out.endpoint_ids.iter().zip(&fan_out.ordering_keys) {
        let slot = match left.get_mut(endpoint.as_str()) {
            Some((n, slot)) if *n > 0 && total > 0 && key.is_none() => {
                *n -= 1;
                total -= 1;
                Some(*slot)
            }
            _ => None,
        };
        rows.push(slot);
    }
    Births {
        owner: Some(room.owner),
        rows,
        slots: left.into_iter().map(|(id, (_, slot))| (id, slot)).collect(),
    }
}

/// Which rows of a fan-out are born claimed, and to whom.
#[derive(Default)]
pub(crate) struct Births<'a> {
    pub owner: Option<&'a str>,
    /// Parallel to the fan-out's rows.
    pub rows: Vec<Option<&'a EndpointSlot>>,
    slots: HashMap<&'a str, &'a EndpointSlot>,
}

impl<'a> Births<'a> {
    /// Whether any row is born claimed (else the batch is inserted as before: all pending).
    pub fn any(&self) -> bool {
        self.rows.iter().any(Option::is_some)
    }

    /// The owner, when [`Births::any`].
    pub fn owner(&self) -> &'a str {
        self.owner.unwrap_or_default()
    }

    /// Per row, the lease in seconds, `None` for a row inserted pending (PostgreSQL's array).
    pub fn lease_secs(&self, rows: usize) -> Vec<Option<f64>> {
        (0..rows)
            .map(|i| self.rows.get(i).copied().flatten())
            .map(|s| s.map(|s| s.lease.as_secs_f64()))
            .collect()
    }

    /// The slot of the born row of `endpoint_id`, for the rows the insert returns.
    pub fn slot(&self, endpoint_id: &str) -> Result<&'a EndpointSlot> {
        self.slots
            .get(endpoint_id)
            .copied()
            .ok_or_else(|| super::StoreError::Corrupt {
                table: "kurir_deliveries",
                message: format!("born claimed a row of endpoint {endpoint_id} without room"),
            })
    }

    /// The fan-out's rows as JSON arrays `[outbox_id, event_id, endpoint_id, ordering_key,
    /// born]`, `born` being `lease(slot)` for a born row and `pending` for the others (the
    /// dialects that bind rows as one JSON text).
    pub fn json_rows(
        &self,
        fan_out: &FanOut,
        lease: impl Fn(&EndpointSlot) -> serde_json::Value,
        pending: serde_json::Value,
    ) -> String {
        let rows = (fan_out.outbox_ids.iter())
            .zip(&fan_out.event_ids)
            .zip(&fan_out.endpoint_ids)
            .zip(&fan_out.ordering_keys)
            .enumerate()
            .map(|(i, (((outbox_id, event_id), endpoint_id), key))| {
                let slot = self.rows.get(i).copied().flatten();
                let born = slot.map_or_else(|| pending.clone(), &lease);
                serde_json::json!([outbox_id, event_id, endpoint_id, key, born])
            })
            .collect();
        serde_json::Value::Array(rows).to_string()
    }
}
