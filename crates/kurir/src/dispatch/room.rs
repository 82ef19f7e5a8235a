//! The room this process has for deliveries, per endpoint: what a claim may take, and what a
//! relay batch may insert born claimed (see `store::born`).
//!
//! Both are one computation over the lanes: an endpoint's room is its `max_in_flight` in
//! flight plus, when it answers quickly, [`WAITING_ROUNDS`] of it waiting, less what its lane
//! holds or has reserved, and at most its fair share of the room left in the process. Born
//! claims are offered less: only endpoints whose circuit is closed, without a rate limit and
//! without ordering (a claim alone takes an ordered endpoint's head, a probe, or a share of a
//! rate limit's bucket), so nothing is ever born claimed that a claim would refuse.
//!
//! A claim and a relay batch each reserve their room in the lanes ([`Room`]) until their
//! deliveries are there (or the database call failed), so neither takes the room the other is
//! about to fill: a claim in flight and a relay batch both seeing a one-in-flight endpoint's lane
//! empty would lease it two deliveries.

use std::sync::{Arc, Weak};
use std::time::Duration;

use super::breakers::Gate;
use super::lanes::Lanes;
use super::WAITING_ROUNDS;
use crate::config::DeliveryConfig;
use crate::delivery::ClaimedDelivery;
use crate::endpoint::{Endpoint, EndpointId, Ordering};
use crate::store::{BirthOffer, BornRoom, EndpointSlot};

/// Who may take a slot.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum For {
    Claim,
    Birth,
}

/// The endpoints of `endpoints` with room left in this process for `who`, in their order,
/// sharing `free` (see the module doc), reserved in the lanes until the returned [`Room`] is
/// dropped. Only as many as can fill `free`: a claim or batch never takes more than that, and
/// each endpoint asked for costs the statement a probe of its due rows whether it yields one or
/// not, so asking every endpoint with room made a claim cost the endpoints with due deliveries
/// instead of the deliveries it takes. [`Room::cut`] tells whether some were left out.
pub(super) fn reserve(
    lanes: &Arc<Lanes>,
    endpoints: &[Arc<Endpoint>],
    free: usize,
    margin: Duration,
    who: For,
) -> Room {
    let share = free.div_ceil(endpoints.len().max(1)) as u32;
    let mut held = lanes.lock();
    let mut slots: Vec<EndpointSlot> = Vec::new();
    let mut asked = 0usize;
    let mut cut = false;
    for e in endpoints {
        if asked >= free {
            cut = true;
            break;
        }
        let probe = match lanes.breakers.gate(e) {
            Gate::Pass => None,
            Gate::Probe if who == For::Claim => Some(1),
            Gate::Probe | Gate::Hold => continue,
        };
        let born_refused = e.ordering != Ordering::None || e.rate_limit_per_second.is_some();
        if who == For::Birth && born_refused {
            continue;
        }
        let lane = held.get(&e.id);
        let busy = lane.map_or(0, |l| l.in_flight + l.waiting.len() as u32 + l.reserved);
        let rounds = if lane.is_some_and(|l| l.quick) {
            1 + WAITING_ROUNDS
        } else {
            1
        };
        let limit = (rounds * e.max_in_flight)
            .saturating_sub(busy)
            .min(share.max(1));
        let limit = probe.unwrap_or(limit);
        if limit == 0 {
            continue;
        }
        held.entry(e.id.clone()).or_default().reserved += limit;
        asked += limit as usize;
        slots.push(EndpointSlot {
            endpoint: e.clone(),
            limit,
            lease: lease(lanes, margin, e),
        });
    }
    drop(held);
    Room {
        reserved: slots
            .iter()
            .map(|s| (s.endpoint.id.clone(), s.limit))
            .collect(),
        slots,
        limit: free as u32,
        cut,
        lanes: Arc::downgrade(lanes),
        who,
    }
}

/// The lease of a delivery to `e`: waiting rounds plus its own attempt, each bounded by the
/// timeouts; the margin keeps a live worker's lease from running out before it records the
/// attempt.
pub(super) fn lease(lanes: &Lanes, margin: Duration, e: &Endpoint) -> Duration {
    let t = lanes.sender.timeouts(e);
    margin + (t.connect + t.response) * (1 + WAITING_ROUNDS)
}

/// The claimed deliveries this process has room for, as many as a claim could take now
/// (`room` of [`super::Dispatcher::step`]), at most `batch`.
pub(super) fn free_room(lanes: &Lanes, config: &DeliveryConfig) -> usize {
    let room = ((1 + WAITING_ROUNDS) * config.max_concurrency) as usize;
    room.saturating_sub(lanes.outstanding())
        .min(config.batch_size as usize)
}

/// The relay's handle on this process's dispatcher, for deliveries born claimed. It holds the
/// lanes weakly: the dispatcher's shutdown waits for every strong holder of its lanes.
#[derive(Clone)]
pub struct Births {
    pub(super) lanes: Weak<Lanes>,
    pub(super) config: DeliveryConfig,
    pub(super) owner: String,
}

/// Room reserved for one claim or relay batch, as it was reserved: given back when dropped,
/// after its deliveries are in their lanes (a claim may narrow its slots meanwhile, for a rate
/// limit's bucket, and still gives back all it reserved).
pub struct Room {
    reserved: Vec<(EndpointId, u32)>,
    pub(super) slots: Vec<EndpointSlot>,
    limit: u32,
    /// Endpoints with room were left out: the slots could already fill the room.
    cut: bool,
    lanes: Weak<Lanes>,
    who: For,
}

impl Room {
    /// No endpoint has room.
    pub(super) fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Whether endpoints with room were left out of the slots, which could fill the room by
    /// themselves: a claim that comes back short has not seen every endpoint it could claim for.
    pub(super) fn cut(&self) -> bool {
        self.cut
    }
}

/// The room of a relay batch, with the process its deliveries are born claimed to: nothing
/// is reserved until the batch names its endpoints ([`BirthOffer::reserve`]).
pub struct BirthRoom {
    lanes: Arc<Lanes>,
    free: usize,
    margin: Duration,
    owner: String,
    room: Option<Room>,
}

impl BirthRoom {
    /// The lease owner the room's deliveries are born claimed to.
    pub fn owner(&self) -> &str {
        &self.owner
    }
}

impl BirthOffer for BirthRoom {
    fn reserve(&mut self, targets: &[Arc<Endpoint>]) -> Option<BornRoom<'_>> {
        let room = reserve(&self.lanes, targets, self.free, self.margin, For::Birth);
        let room = self.room.insert(room);
        (!room.is_empty()).then(|| BornRoom {
            owner: &self.owner,
            slots: &room.slots,
            limit: room.limit,
        })
    }
}

impl Drop for Room {
    fn drop(&mut self) {
        let Some(lanes) = self.lanes.upgrade() else {
            return;
        };
        {
            let mut held = lanes.lock();
            for (id, n) in &self.reserved {
                if let Some(lane) = held.get_mut(id) {
                    lane.reserved = lane.reserved.saturating_sub(*n);
                }
            }
        }
        // A claim that found the room reserved by a relay batch may have gone to wait: what the
        // batch did not use is free again. The dispatcher's own claims do not wake it: it is
        // not waiting while it claims, and a stored wake-up would make an idle one spin.
        if self.who == For::Birth {
            lanes.freed.notify_one();
        }
    }
}

impl Births {
    /// Room for the next relay batch, to be reserved at the batch's endpoints; `None` when the
    /// process has none, or is shutting down.
    pub fn room(&self) -> Option<BirthRoom> {
        let lanes = self.lanes.upgrade()?;
        if lanes.is_closed() {
            return None;
        }
        let free = free_room(&lanes, &self.config);
        (free > 0).then(|| BirthRoom {
            lanes,
            free,
            margin: self.config.lease_margin,
            owner: self.owner.clone(),
            room: None,
        })
    }

    /// Puts the deliveries born claimed in `room` into their lanes and starts what the caps
    /// allow, then gives the room's reservation back. Returns those the lanes refused (the
    /// dispatcher is shutting down), for the caller to hand back.
    pub fn hand_over(&self, room: BirthRoom, born: Vec<ClaimedDelivery>) -> Vec<ClaimedDelivery> {
        let refused = room.lanes.enqueue(born);
        drop(room);
        refused
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use tokio::sync::mpsc;

    use super::{reserve, For};
    use crate::config::DeliveryConfig;
    use crate::dispatch::breakers::Breakers;
    use crate::dispatch::deliver::Sender;
    use crate::dispatch::lanes::Lanes;
    use crate::endpoint::{Endpoint, NewEndpoint};
    use crate::store::{endpoint_from_new, Store};

    async fn lanes() -> Arc<Lanes> {
        let store = Store::connect("sqlite::memory:").await.unwrap();
        let config = DeliveryConfig::default();
        let sender = Sender::new(config.clone(), store.clock().clone());
        let breakers = Arc::new(Breakers::new(
            store,
            config.breaker,
            Duration::from_secs(60),
        ));
        let (tx, _rx) = mpsc::channel(1);
        Arc::new(Lanes::new(sender, breakers, 10, tx))
    }

    fn one_at_a_time() -> Arc<Endpoint> {
        let mut new = NewEndpoint::new("http://127.0.0.1:9/hook");
        new.max_in_flight = Some(1);
        Arc::new(endpoint_from_new(new, chrono::Utc::now()))
    }

    /// A claim of room for 3 asks 3 endpoints, not each of the 10 with room: each asked costs
    /// the claim's statement a probe of its due rows. Before, all 10 were asked, each for one.
    #[tokio::test]
    async fn a_claim_asks_only_as_many_endpoints_as_can_fill_its_room() {
        let lanes = lanes().await;
        let endpoints: Vec<_> = (0..10).map(|_| one_at_a_time()).collect();
        let margin = Duration::from_secs(1);
        let claim = reserve(&lanes, &endpoints, 3, margin, For::Claim);
        let asked: Vec<_> = claim.slots.iter().map(|s| s.endpoint.id.clone()).collect();
        let first: Vec<_> = endpoints[..3].iter().map(|e| e.id.clone()).collect();
        assert_eq!(asked, first, "the first three, in the order given");
        assert!(claim.cut(), "seven endpoints with room were left out");
        drop(claim);
        let everything = reserve(&lanes, &endpoints, 10, margin, For::Claim);
        assert_eq!(everything.slots.len(), 10);
        assert!(!everything.cut(), "nothing was left out");
    }

    /// A claim on its way to the database holds its endpoints' room: a relay batch meanwhile
    /// finds none at a one-in-flight endpoint, and finds it again once the claim is done. With
    /// only the relay's room reserved, both took the endpoint's one slot.
    #[tokio::test]
    async fn a_claim_in_flight_holds_its_room_against_a_relay_batch() {
        let lanes = lanes().await;
        let endpoints = [one_at_a_time()];
        let margin = Duration::from_secs(1);
        let claim = reserve(&lanes, &endpoints, 10, margin, For::Claim);
        assert_eq!(claim.slots.len(), 1);
        let birth = reserve(&lanes, &endpoints, 10, margin, For::Birth);
        assert!(
            birth.is_empty(),
            "a relay batch took the room a claim holds"
        );
        drop(birth);
        drop(claim);
        let birth = reserve(&lanes, &endpoints, 10, margin, For::Birth);
        assert_eq!(birth.slots.iter().map(|s| s.limit).sum::<u32>(), 1);
        let claim = reserve(&lanes, &endpoints, 10, margin, For::Claim);
        assert!(
            claim.is_empty(),
            "a claim took the room a relay batch holds"
        );
    }
}
