//! `/v1/events`: publish an event (for systems that cannot share kurir's database), read one
//! with its deliveries and every attempt, and list them.
//!
//! Publishing is idempotent two ways: an `Idempotency-Key` header, or a repeated `event_id`.
//! Either returns the original event (200) and creates nothing when the content is the same, and
//! is refused with 409 when it differs.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use chrono::{DateTime, Utc};
use kurir_core::event::EventId;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};
use utoipa::ToSchema;

use super::auth::Actor;
use super::deliveries::{check_event_type, check_window, AttemptView, DeliveryView};
use super::error::{ApiError, ErrorBody};
use super::extract::{ApiJson, ApiPath, ApiQuery};
use super::page::{Page, PageRequest};
use crate::access::Listing;
use crate::api::state::AppState;
use crate::catalog::check::RefusalKind;
use crate::catalog::{Checks, Verdict};
use crate::outbox::{valid_aggregate, NewEvent, MAX_AGGREGATE_BYTES};
use crate::store::{EventQuery, IdempotencyKey, PublishItem, Published, StoredEvent};

/// The header that makes a publish idempotent.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// Body of `POST /v1/events`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"event_type": "order.paid", "aggregate_type": "order", "aggregate_id": "98765", "data": {"order_id": "98765", "total": 250000}}))]
pub struct PublishEvent {
    /// Dot-separated lowercase type, e.g. `order.paid`: segments of `a-z 0-9 _ -`, 1 to 255
    /// bytes.
    #[schema(
        pattern = "^[a-z0-9_-]+(\\.[a-z0-9_-]+)*$",
        max_length = 255,
        example = "order.paid"
    )]
    pub event_type: String,
    /// The payload: a JSON object, stored and delivered byte-for-byte; at most 1 MiB, nested at
    /// most 128 levels deep (`400` above; 31 on MariaDB).
    #[schema(value_type = Object)]
    pub data: Box<RawValue>,
    /// Payload schema version, 1 or more (default 1).
    #[serde(default, deserialize_with = "super::extract::whole")]
    #[schema(minimum = 1)]
    pub version: Option<i32>,
    /// What kind of thing the event is about, e.g. `order`.
    pub aggregate_type: Option<String>,
    /// Which one, e.g. `98765`.
    pub aggregate_id: Option<String>,
    /// When it happened (RFC 3339; default now).
    pub occurred_at: Option<DateTime<Utc>>,
    /// Your id for the event (visible ASCII, at most 255); a UUIDv7 when absent.
    #[schema(pattern = "^[\\x21-\\x7e]{1,255}$")]
    pub event_id: Option<String>,
    /// The subscriber the event is addressed to (its id): delivered only to that subscriber's
    /// endpoints. Absent: only to the endpoints without a subscriber.
    #[schema(example = "cus_8Hq2")]
    pub subscriber_id: Option<String>,
}

/// Answer of a newly accepted event.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"event_id": "0190f3c2-5b7e-7cc1-8f3a-2d4e6b8a9c01"}))]
pub struct Accepted {
    /// The event's id.
    pub event_id: String,
}

/// An event as stored.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"event_id": "0190f3c2-5b7e-7cc1-8f3a-2d4e6b8a9c01", "event_type": "order.paid", "version": 1, "aggregate_type": "order", "aggregate_id": "98765", "occurred_at": "2026-06-11T08:15:30Z", "created_at": "2026-06-11T08:15:30.120Z", "dispatched_at": "2026-06-11T08:15:30.180Z", "dispatched": true, "data": {"order_id": "98765", "total": 250000}}))]
pub struct EventView {
    /// Its id.
    pub event_id: String,
    /// Its type.
    pub event_type: String,
    /// Payload schema version.
    pub version: i32,
    /// Aggregate kind.
    pub aggregate_type: Option<String>,
    /// Aggregate id.
    pub aggregate_id: Option<String>,
    /// When it happened.
    pub occurred_at: DateTime<Utc>,
    /// When kurir recorded it.
    pub created_at: DateTime<Utc>,
    /// When the relay fanned it out to endpoints (absent: not yet, see `dispatched`). On
    /// PostgreSQL and SQLite the outbox is append-only and records no such time: for events
    /// fanned out since kurir's migration 0011 this is when the event's first delivery was
    /// written (by the relay, as it fanned out), and absent when the event matched no endpoint.
    pub dispatched_at: Option<DateTime<Utc>>,
    /// Whether the relay has fanned it out (true too for an event refused at migration).
    pub dispatched: bool,
    /// Why it was refused and never delivered: written by SQL before the database enforced the
    /// outbox's rules, it breaks the rule named here. Absent for every other event.
    pub refused_reason: Option<String>,
    /// The subscriber it is addressed to; absent: the operator's own endpoints.
    pub subscriber_id: Option<String>,
    /// The payload, as stored.
    #[schema(value_type = Object)]
    pub data: Box<RawValue>,
}

impl TryFrom<StoredEvent> for EventView {
    type Error = ApiError;

    fn try_from(e: StoredEvent) -> Result<Self, ApiError> {
        let data = RawValue::from_string(e.payload).map_err(|err| {
            ApiError::Internal(
                format!("stored payload of {} is not JSON: {err}", e.event_id).into(),
            )
        })?;
        Ok(Self {
            event_id: e.event_id,
            event_type: e.event_type,
            version: e.version,
            aggregate_type: e.aggregate_type,
            aggregate_id: e.aggregate_id,
            occurred_at: e.occurred_at,
            created_at: e.created_at,
            dispatched_at: e.dispatched_at,
            dispatched: e.dispatched,
            refused_reason: e.refused_reason,
            subscriber_id: e.subscriber_id,
            data,
        })
    }
}

/// A delivery with every attempt made for it.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeliveryDetail {
    /// The delivery.
    #[serde(flatten)]
    pub delivery: DeliveryView,
    /// Its attempts, oldest first.
    pub attempts: Vec<AttemptView>,
}

/// An event with its deliveries.
#[derive(Debug, Serialize, ToSchema)]
pub struct EventDetail {
    /// The event.
    #[serde(flatten)]
    pub event: EventView,
    /// One per subscribed endpoint, once the relay has fanned the event out.
    pub deliveries: Vec<DeliveryDetail>,
}

fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(value) = headers.get(IDEMPOTENCY_KEY) else {
        return Ok(None);
    };
    let bad = |m: &str| ApiError::field("Idempotency-Key", m);
    let key = value.to_str().map_err(|_| bad("must be visible ASCII"))?;
    EventId::parse(key)
        .map(|k| Some(k.to_string()))
        .map_err(|e| bad(&e.to_string().replace("event id", "key")))
}

pub(super) fn new_event(b: &PublishEvent) -> Result<NewEvent, ApiError> {
    let mut event = NewEvent::raw(&b.event_type, b.data.clone())?;
    if let Some(v) = b.version {
        if v < 1 {
            return Err(ApiError::field("version", "must be 1 or more"));
        }
        event = event.version(v);
    }
    event.aggregate_type = b.aggregate_type.clone();
    event.aggregate_id = b.aggregate_id.clone();
    event.subscriber_id = b.subscriber_id.clone();
    event.validate()?;
    event.occurred_at = b.occurred_at;
    if let Some(id) = &b.event_id {
        event = event
            .event_id(EventId::parse(id).map_err(|e| ApiError::field("event_id", e.to_string()))?);
    }
    Ok(event)
}

/// Checks the event against the catalog (`KURIR_EVENT_CATALOG`): a refusal is a `422` naming
/// each failing value, and nothing is stored.
pub(super) fn check_catalog(
    state: &AppState,
    checks: &Checks,
    b: &PublishEvent,
) -> Result<(), ApiError> {
    let version = b.version.unwrap_or(1);
    let Verdict::Refused(r) = checks.check_text(&b.event_type, version, Some(b.data.get())) else {
        return Ok(());
    };
    state
        .metrics
        .record_catalog_refusal(&b.event_type, &r.reason, "api");
    Err(match r.kind {
        RefusalKind::Unknown => ApiError::Unprocessable {
            code: "unknown_event_type",
            message: r.reason,
            failures: Vec::new(),
        },
        RefusalKind::Schema => ApiError::Unprocessable {
            code: "schema_mismatch",
            message: format!(
                "data does not match the event catalog's schema of {} v{version}: {}",
                b.event_type,
                r.reason.trim_start_matches("schema: ")
            ),
            failures: r.failures,
        },
    })
}

/// The payload as a JSON value, for comparing content regardless of formatting. One too deep
/// for serde_json's `Value` (exactly [`crate::limits::MAX_JSON_DEPTH`] levels) is compared by
/// its text, so two different ones never compare equal.
fn json(raw: &str) -> serde_json::Value {
    serde_json::from_str(raw).unwrap_or_else(|_| serde_json::Value::String(raw.to_owned()))
}

/// SHA-256 of what the request asks for, formatting aside.
fn request_hash(b: &PublishEvent) -> String {
    let canonical = serde_json::json!({
        "event_type": b.event_type, "version": b.version.unwrap_or(1),
        "aggregate_type": b.aggregate_type, "aggregate_id": b.aggregate_id,
        "occurred_at": b.occurred_at.map(|t| t.timestamp_millis()), "event_id": b.event_id,
        "data": json(b.data.get()), "subscriber_id": b.subscriber_id,
    });
    Sha256::digest(canonical.to_string().as_bytes())
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// Whether `stored` is what `b` asks to publish (an absent `occurred_at` matches any).
fn same_content(stored: &StoredEvent, b: &PublishEvent) -> bool {
    stored.event_type == b.event_type
        && stored.version == b.version.unwrap_or(1)
        && stored.aggregate_type == b.aggregate_type
        && stored.aggregate_id == b.aggregate_id
        && stored.subscriber_id == b.subscriber_id
        && b.occurred_at
            .is_none_or(|at| at.timestamp_millis() == stored.occurred_at.timestamp_millis())
        && json(&stored.payload) == json(b.data.get())
}

/// The event `event_id` names, or `404`. An id no event could have (not visible ASCII, too long)
/// is not looked up.
pub(super) async fn stored(state: &AppState, event_id: &str) -> Result<StoredEvent, ApiError> {
    let not_found = || ApiError::NotFound(format!("no event with event_id '{event_id}'"));
    if EventId::parse(event_id).is_err() {
        return Err(not_found());
    }
    state.store.get_event(event_id).await?.ok_or_else(not_found)
}

/// The event `event_id` names, if `actor` reaches it ([`Actor::reaches`]): another subscriber's
/// event, or one addressed to no subscriber to a subscriber token, answers exactly as a missing
/// one.
pub(super) async fn reached_event(
    state: &AppState,
    actor: &Actor,
    event_id: &str,
) -> Result<StoredEvent, ApiError> {
    let event = stored(state, event_id).await?;
    if actor.reaches(event.subscriber_id.as_deref()) {
        return Ok(event);
    }
    Err(ApiError::NotFound(format!(
        "no event with event_id '{event_id}'"
    )))
}

/// Records an event in the outbox; the relay fans it out to every subscribed endpoint.
#[utoipa::path(post, path = "/v1/events", operation_id = "publish_event", tag = "events", request_body = PublishEvent,
    params(("Idempotency-Key" = Option<String>, Header, pattern = "^[\\x21-\\x7e]{1,255}$",
        description = "Repeating a request with the same key (1 to 255 visible ASCII characters) returns the original event")),
    responses((status = 202, description = "Accepted for delivery", body = Accepted),
              (status = 200, description = "Already accepted: the original event, nothing created", body = EventView),
              (status = 400, description = "A field is invalid", body = ErrorBody),
              (status = 409, description = "The event_id or key was used for different content", body = ErrorBody),
              (status = 422, description = "The event catalog refuses the event: its data fails the version's schema (schema_mismatch, each failing value in failures), or KURIR_EVENT_CATALOG=strict and the catalog lacks the type or version (unknown_event_type); nothing stored", body = ErrorBody),
              (status = 408, description = "The body did not arrive within the HTTP body timeout", body = ErrorBody),
              (status = 413, description = "The body, or its data, is over the limit", body = ErrorBody),
              (status = 503, description = "The database is unavailable; retry after Retry-After", body = ErrorBody)))]
pub async fn publish(
    State(state): State<AppState>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<PublishEvent>,
) -> Result<Response, ApiError> {
    let key = idempotency_key(&headers)?;
    let event = new_event(&body)?;
    super::subscribers::addressable(&state, body.subscriber_id.as_deref()).await?;
    let checks = state.store.event_checks().await?;
    check_catalog(&state, &checks, &body)?;
    let key = key.map(|key| IdempotencyKey {
        key,
        request_hash: request_hash(&body),
    });
    let item = PublishItem {
        event,
        key: key.clone(),
    };
    let published = state.ingest.publish(item).await?;
    Ok(
        match settle(&state, &body, key.as_ref(), published).await? {
            Outcome::Accepted(event_id) => {
                (StatusCode::ACCEPTED, Json(Accepted { event_id })).into_response()
            }
            Outcome::Repeat(original) => {
                (StatusCode::OK, Json(EventView::try_from(original)?)).into_response()
            }
        },
    )
}

/// What a publish came to, for its answer.
pub(super) enum Outcome {
    /// Newly recorded (`202`).
    Accepted(String),
    /// Already recorded with the same content: the original (`200`), nothing created.
    Repeat(StoredEvent),
}

/// Turns what the store did with `body` into its answer: a repeat of a key or an `event_id`
/// with different content is a `409`. Wakes the relay for a new event.
pub(super) async fn settle(
    state: &AppState,
    body: &PublishEvent,
    key: Option<&IdempotencyKey>,
    published: Published,
) -> Result<Outcome, ApiError> {
    match published {
        Published::Created(event_id) => {
            state.relay_wake.wake();
            tracing::info!(event_id = %event_id, event_type = %body.event_type, "event accepted");
            Ok(Outcome::Accepted(event_id))
        }
        Published::KeyExists {
            event_id,
            request_hash,
        } => {
            if key.is_some_and(|k| k.request_hash != request_hash) {
                return Err(ApiError::Conflict {
                    code: "idempotency_key_reused",
                    message: "this Idempotency-Key was already used for a different request".into(),
                });
            }
            Ok(Outcome::Repeat(stored(state, &event_id).await?))
        }
        Published::EventIdExists(event_id) => {
            let original = stored(state, &event_id).await?;
            if !same_content(&original, body) {
                return Err(ApiError::Conflict {
                    code: "event_id_conflict",
                    message: format!(
                        "an event with event_id '{event_id}' already exists with different content"
                    ),
                });
            }
            Ok(Outcome::Repeat(original))
        }
    }
}

/// Reads an event, its deliveries and every attempt.
#[utoipa::path(get, path = "/v1/events/{event_id}", operation_id = "get_event", tag = "events",
    params(("event_id" = String, Path, description = "Event id")),
    responses((status = 200, description = "The event", body = EventDetail),
              (status = 404, description = "No such event", body = ErrorBody)))]
pub async fn show(
    State(state): State<AppState>,
    Extension(actor): Extension<Actor>,
    ApiPath(event_id): ApiPath<String>,
) -> Result<Json<EventDetail>, ApiError> {
    // Its deliveries are its subscriber's too: the fan-out rule sends an event only to its own
    // subscriber's endpoints.
    let event = EventView::try_from(reached_event(&state, &actor, &event_id).await?)?;
    let mut deliveries = Vec::new();
    let circuits = state.store.circuits().await?;
    for d in state.store.deliveries_for_event(&event_id).await? {
        let attempts = state.store.attempts_for_delivery(d.id).await?;
        deliveries.push(DeliveryDetail {
            delivery: DeliveryView::new(d, event.event_type.clone(), &circuits),
            attempts: AttemptView::history(attempts),
        });
    }
    Ok(Json(EventDetail { event, deliveries }))
}

/// Query of `GET /v1/events`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListEvents {
    /// Only events of this type.
    pub event_type: Option<String>,
    /// Only events about this aggregate id.
    pub aggregate_id: Option<String>,
    /// Recorded at or after (RFC 3339).
    pub since: Option<DateTime<Utc>>,
    /// Recorded before (RFC 3339).
    pub until: Option<DateTime<Utc>>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
    /// Rows per page, 1 to 200 (default 50).
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<u32>,
    /// Only events addressed to this subscriber. A subscriber token always sees only its own.
    pub subscriber_id: Option<String>,
}

/// Lists events, newest first.
#[utoipa::path(get, path = "/v1/events", operation_id = "list_events", tag = "events", params(ListEvents),
    responses((status = 200, description = "A page of events", body = Page<EventView>),
              (status = 400, description = "A parameter is invalid", body = ErrorBody)))]
pub async fn list(
    State(state): State<AppState>,
    Extension(actor): Extension<Actor>,
    ApiQuery(q): ApiQuery<ListEvents>,
) -> Result<Json<Page<EventView>>, ApiError> {
    let page = PageRequest::new("events", q.cursor.as_deref(), q.limit)?;
    check_window(q.since, q.until)?;
    check_event_type(q.event_type.as_deref())?;
    if q.aggregate_id
        .as_deref()
        .is_some_and(|a| !valid_aggregate(a))
    {
        return Err(ApiError::field(
            "aggregate_id",
            format!("must be 1 to {MAX_AGGREGATE_BYTES} bytes without NUL"),
        ));
    }
    let query = EventQuery {
        event_type: q.event_type,
        aggregate_id: q.aggregate_id,
        since: q.since,
        until: q.until,
        before_id: page.past,
        limit: page.fetch(),
        subscriber_id: match actor.listing(q.subscriber_id.as_deref()) {
            Listing::Nothing => return Ok(Json(Page::empty())),
            Listing::Everyone => None,
            Listing::Subscriber(s) => Some(s),
        },
    };
    let rows = state
        .store
        .list_events(&query)
        .await?
        .into_iter()
        .map(|r| Ok((r.id, EventView::try_from(r)?)))
        .collect::<Result<Vec<_>, ApiError>>()?;
    Ok(Json(page.page(rows, |(id, _)| *id, |(_, view)| view)))
}

/// The routes of this resource.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/events", post(publish).get(list))
        .route("/events/{event_id}", get(show))
}
