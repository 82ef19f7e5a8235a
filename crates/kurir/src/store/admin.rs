//! What the admin API asks of the store: publishing an event with an idempotency key, listings
//! paged newest first by a keyset on row ids, replay with its audit row, and stats.
//!
//! The types and the backend-neutral [`Store`] methods live here; publishing is written once
//! for every dialect in [`super::publish`], the replay in `postgres/admin.rs`, `sqlite/admin.rs`
//! and `mysql/admin.rs`, one implementation per dialect. Cursors are the API's business: the
//! store only takes "rows with an id below this one".

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::{on_backend, Result, Store};
use crate::delivery::{DeliveryRecord, DeliveryStatus};
use crate::outbox::NewEvent;

/// An `Idempotency-Key` header and the hash of the request it came with.
#[derive(Clone, Debug)]
pub struct IdempotencyKey {
    /// The key as the client sent it.
    pub key: String,
    /// Hex SHA-256 of the request's content.
    pub request_hash: String,
}

/// What [`Store::publish_event`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Published {
    /// The event was recorded (and the key, if any, with it).
    Created(String),
    /// The idempotency key was already used; nothing was written.
    KeyExists {
        /// The event the key created.
        event_id: String,
        /// The hash of the request that first used the key.
        request_hash: String,
    },
    /// An event with this id already exists; nothing was written.
    EventIdExists(String),
}

/// One event to publish with [`Store::publish_events`], and its `Idempotency-Key` if any.
#[derive(Clone, Debug)]
pub struct PublishItem {
    /// The event.
    pub event: NewEvent,
    /// The key it came with.
    pub key: Option<IdempotencyKey>,
}

/// Filters of the event listing; every `None` matches all.
#[derive(Clone, Debug, Default)]
pub struct EventQuery {
    /// Exact event type.
    pub event_type: Option<String>,
    /// Exact aggregate id.
    pub aggregate_id: Option<String>,
    /// Written at or after.
    pub since: Option<DateTime<Utc>>,
    /// Written before.
    pub until: Option<DateTime<Utc>>,
    /// Only rows with a smaller outbox id (the cursor).
    pub before_id: Option<i64>,
    /// At most this many rows.
    pub limit: u32,
    /// Only events addressed to this subscriber.
    pub subscriber_id: Option<String>,
}

/// Filters of the delivery listing; every `None` matches all.
#[derive(Clone, Debug, Default)]
pub struct DeliveryQuery {
    /// Exact status.
    pub status: Option<DeliveryStatus>,
    /// Exact endpoint.
    pub endpoint_id: Option<String>,
    /// Exact event type.
    pub event_type: Option<String>,
    /// Delivery created at or after.
    pub since: Option<DateTime<Utc>>,
    /// Delivery created before.
    pub until: Option<DateTime<Utc>>,
    /// Only rows with a smaller delivery id (the cursor).
    pub before_id: Option<i64>,
    /// At most this many rows.
    pub limit: u32,
    /// Only deliveries to this subscriber's endpoints (tombstones too: their history).
    pub subscriber_id: Option<String>,
}

/// A delivery with the type of its event, as the delivery listing shows it.
#[derive(Clone, Debug)]
pub struct DeliveryListItem {
    /// The delivery.
    pub delivery: DeliveryRecord,
    /// Its event's type.
    pub event_type: String,
}

/// Which deliveries a replay moves back to `pending`. Only `dead_letter` deliveries, and `sent`
/// ones when asked for ([`ReplayFilter::status`] `sent`, or [`ReplayFilter::include_sent`]), are
/// ever replayed: a replay re-sends what did not succeed, and re-sending what did is a choice
/// the operator makes explicitly. `failed` deliveries are still being retried on their schedule,
/// `pending` and `processing` ones are on their way, and `cancelled` ones belong to deleted
/// endpoints, so none of those is replayed. The filter narrows that set. Stored as the audit
/// row's `filter`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ReplayFilter {
    /// One event's deliveries.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_id: Option<String>,
    /// Exact status (`sent` or `dead_letter`; any other replays nothing). Without it,
    /// `dead_letter`, and `sent` too with [`ReplayFilter::include_sent`].
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "status_name"
    )]
    pub status: Option<DeliveryStatus>,
    /// Exact endpoint.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub endpoint_id: Option<String>,
    /// Exact event type.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_type: Option<String>,
    /// Delivery created at or after.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since: Option<DateTime<Utc>>,
    /// Delivery created before.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub until: Option<DateTime<Utc>>,
    /// Without a status, re-send the `sent` deliveries too (recorded in the audit only when set).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub include_sent: bool,
    /// Only deliveries of events addressed to this subscriber (a subscriber token's replay is
    /// always confined to its own); also the audit row's `subscriber_id`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subscriber_id: Option<String>,
}

fn status_name<S: serde::Serializer>(
    status: &Option<DeliveryStatus>,
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(status.map_or("", DeliveryStatus::as_str))
}

/// Who replays and why, for the audit row.
#[derive(Clone, Debug)]
pub struct ReplayRequest {
    /// What to replay.
    pub filter: ReplayFilter,
    /// The name of the token that asked.
    pub actor: String,
    /// Where the request came from.
    pub via: crate::access::Via,
    /// Why, in the operator's words.
    pub reason: String,
}

/// One row of the replay audit.
#[derive(Clone, Debug)]
pub struct ReplayRecord {
    /// Its id.
    pub id: i64,
    /// Who replayed.
    pub actor: String,
    /// Where from (`api`, `cli`, `dashboard`); `None` for replays recorded before kurir kept it.
    pub via: Option<String>,
    /// Why.
    pub reason: String,
    /// The filter, as recorded.
    pub filter: serde_json::Value,
    /// How many deliveries went back to `pending`.
    pub count: i64,
    /// When.
    pub created_at: DateTime<Utc>,
}

/// Counts for `GET /v1/stats`.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    /// Events in the outbox.
    pub events_total: i64,
    /// Events not yet fanned out by the relay.
    pub events_undispatched: i64,
    /// When the oldest not-yet-fanned-out event was written.
    pub oldest_undispatched_at: Option<DateTime<Utc>>,
    /// Per delivery status: how many, and when the oldest of them was created.
    pub deliveries: Vec<StatusCount>,
}

/// Deliveries in one status.
#[derive(Clone, Debug)]
pub struct StatusCount {
    /// The status.
    pub status: DeliveryStatus,
    /// How many.
    pub count: i64,
    /// When the oldest was created.
    pub oldest_created_at: Option<DateTime<Utc>>,
}

impl Store {
    /// Moves every delivery the filter replays (see [`ReplayFilter`]) back to `pending` (same
    /// event id, attempt count 0, due now, trigger `replay`) and writes the audit row, in one
    /// transaction. Returns the audit row.
    pub async fn replay(&self, request: &ReplayRequest) -> Result<ReplayRecord> {
        on_backend!(self, s => s.replay(request).await)
    }
}
