//! The dispatcher's side of the endpoints' rate limits: a claim takes no more of a
//! rate-limited endpoint's deliveries than its shared bucket allows, and gives back what it did
//! not use; a `429` from such an endpoint halves its rate for a minute
//! (`kurir_core::rate::Bucket`).
//!
//! The bucket lives in the database (`store::rates`), so the limit holds across every process
//! together; its times are read from the store's clock, which every process agrees on (see
//! `crate::clock`). Deliveries held back stay in the database, claimable by any process once the
//! bucket allows.

use std::collections::HashMap;

use crate::delivery::ClaimedDelivery;
use crate::endpoint::Endpoint;
use crate::store::{EndpointSlot, Store, StoreError};

/// Per rate-limited endpoint of a claim: its limit and how many requests were taken for it.
pub type Taken = HashMap<String, (u32, u32)>;

/// Lowers each rate-limited slot's limit to what its endpoint's bucket gives now, dropping the
/// slots that get nothing. Returns what was taken per endpoint, and whether any slot was held
/// back (the dispatcher then looks again soon, not after an idle wait).
pub async fn take(
    store: &Store,
    slots: Vec<EndpointSlot>,
) -> Result<(Vec<EndpointSlot>, Taken, bool), StoreError> {
    let mut kept = Vec::with_capacity(slots.len());
    let mut taken = HashMap::new();
    let mut held = false;
    for mut slot in slots {
        let Some(limit) = slot.endpoint.rate_limit_per_second else {
            kept.push(slot);
            continue;
        };
        let want = slot.limit;
        let got = store
            .update_bucket(slot.endpoint.id.as_str(), |b| {
                b.take(limit, want, store.clock().now_millis())
            })
            .await?;
        held |= got < want;
        if got > 0 {
            taken.insert(slot.endpoint.id.to_string(), (limit, got));
            slot.limit = got;
            kept.push(slot);
        }
    }
    Ok((kept, taken, held))
}

/// Gives back to each bucket what was taken for a claim and not claimed. A failure is logged:
/// the endpoint then gets less than its limit for a moment, never more.
pub async fn give_back(store: &Store, taken: Taken, claimed: &[ClaimedDelivery]) {
    for (id, (limit, n)) in taken {
        let used = claimed
            .iter()
            .filter(|d| d.endpoint.id.as_str() == id)
            .count() as u32;
        let unused = n.saturating_sub(used);
        if unused == 0 {
            continue;
        }
        let back = store
            .update_bucket(&id, |b| {
                b.give_back(limit, unused, store.clock().now_millis())
            })
            .await;
        if let Err(e) = back {
            tracing::warn!(endpoint_id = %id, error = %e, "could not give back unused rate limit");
        }
    }
}

/// A `429` from `endpoint`: halves its rate limit for a minute (see `kurir_core::rate`); no-op
/// for an endpoint without one.
pub async fn throttled(store: &Store, endpoint: &Endpoint) {
    if endpoint.rate_limit_per_second.is_none() {
        return;
    }
    let done = store
        .update_bucket(endpoint.id.as_str(), |b| {
            b.throttled(store.clock().now_millis())
        })
        .await;
    match done {
        Ok(()) => tracing::warn!(
            endpoint_id = %endpoint.id,
            "429 from the endpoint: its rate limit is halved for a minute"
        ),
        Err(e) => {
            tracing::warn!(endpoint_id = %endpoint.id, error = %e, "could not lower the rate limit after a 429")
        }
    }
}
