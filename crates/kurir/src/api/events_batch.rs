//! `POST /v1/events/batch`: up to [`MAX_BATCH_EVENTS`] events in one request and one
//! transaction, with a result per event.
//!
//! Each event is checked and recorded exactly as `POST /v1/events` would record it alone, in
//! order: a bad event gets its own `400` naming the field (`events[3].event_type`) and the
//! others are still recorded; an `event_id` already stored, or repeated earlier in the batch,
//! answers `200` when the content is the same and `409` when it differs. The request itself is
//! refused whole (`400`, nothing recorded) when it is not the batch the OpenAPI document
//! describes: malformed JSON, no `events` array, more than [`MAX_BATCH_EVENTS`] events, an event
//! that is not shaped like the body of `POST /v1/events` (an unknown field, a value of the wrong
//! type, a missing `event_type`), a body over the batch limit (`413`), or an `Idempotency-Key`.
//!
//! No `Idempotency-Key` on a batch: one key for many events could not say which of them a
//! retry repeats. Give each event an `event_id` instead; a retried batch then answers `200` for
//! every event already recorded and records only the rest.

use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::{Extension, Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use utoipa::ToSchema;

use super::error::{ApiError, ErrorBody, ErrorDetail};
use super::events::{check_catalog, new_event, settle, Outcome, PublishEvent, IDEMPOTENCY_KEY};
use super::extract::{parse_json, ApiJson, BodyLimit};
use crate::api::state::AppState;
use crate::catalog::Checks;
use crate::outbox::NewEvent;
use crate::store::PublishItem;

/// Most events in one batch.
pub const MAX_BATCH_EVENTS: usize = 1000;

/// How many times the admin API's body limit a batch may be: room for [`MAX_BATCH_EVENTS`]
/// events of the usual size (a few hundred bytes each) under the default limit.
pub const BATCH_BODY_FACTOR: usize = 16;

/// Body of `POST /v1/events/batch`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PublishBatch {
    /// 1 to 1,000 events, each as the body of `POST /v1/events` (a `PublishEvent`).
    #[schema(value_type = Vec<BatchEvent>, min_items = 1, max_items = 1000)]
    pub events: Vec<Box<RawValue>>,
}

/// One event of a batch as the document describes it: the fields of a `PublishEvent` and their
/// JSON types, which the batch refuses whole when an event has others. Their values (the event
/// type's format, `version` 1 or more, `data` an object, …) are checked per event and answered
/// in its own result (`400` there) without refusing the rest, so they are left open here.
/// Only documents; the server reads each event as a [`PublishEvent`].
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct BatchEvent {
    /// As in `PublishEvent`.
    event_type: String,
    /// As in `PublishEvent`: an object, checked per event.
    #[schema(value_type = Value)]
    data: serde_json::Value,
    /// As in `PublishEvent`: 1 or more, checked per event.
    #[schema(value_type = Option<i32>)]
    version: Option<serde_json::Number>,
    /// As in `PublishEvent`.
    aggregate_type: Option<String>,
    /// As in `PublishEvent`.
    aggregate_id: Option<String>,
    /// As in `PublishEvent`: RFC 3339.
    occurred_at: Option<chrono::DateTime<chrono::Utc>>,
    /// As in `PublishEvent`: checked per event.
    event_id: Option<String>,
    /// As in `PublishEvent`: a subscriber that exists, checked per event.
    subscriber_id: Option<String>,
}

/// What became of one event of a batch.
#[derive(Debug, Serialize, ToSchema)]
pub struct BatchItemResult {
    /// What `POST /v1/events` would have answered for this event alone: `202` recorded, `200`
    /// already recorded with the same content (nothing created), `400` invalid (see `error`),
    /// `409` its `event_id` is taken by different content, `413` its data is over the limit,
    /// `422` the event catalog refuses it (see `POST /v1/events`),
    /// `503` the database was unavailable (retry it).
    pub status: u16,
    /// The event's id, unless it was refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_id: Option<String>,
    /// Why it was refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorDetail>,
}

/// `e`, about event `index`, with its field named within the batch (`events[3].event_type`).
fn within_batch(index: usize, e: ApiError) -> ApiError {
    match e {
        ApiError::InvalidField { field, message } => {
            ApiError::field(format!("events[{index}].{field}"), message)
        }
        ApiError::MalformedJson(message) | ApiError::InvalidRequest(message) => {
            ApiError::field(format!("events[{index}]"), message)
        }
        other => other,
    }
}

/// Answer of `POST /v1/events/batch`.
#[derive(Debug, Serialize, ToSchema)]
pub struct BatchResults {
    /// One per event, in the request's order.
    pub results: Vec<BatchItemResult>,
}

impl BatchItemResult {
    fn ok(status: StatusCode, event_id: String) -> Self {
        Self {
            status: status.as_u16(),
            event_id: Some(event_id),
            error: None,
        }
    }

    /// The error `e` of event `index`, its field named within the batch.
    fn refused(index: usize, e: ApiError) -> Self {
        let (status, error) = within_batch(index, e).detail();
        Self {
            status: status.as_u16(),
            event_id: None,
            error: Some(error),
        }
    }
}

/// Records up to 1,000 events in one transaction, with a result per event.
#[utoipa::path(post, path = "/v1/events/batch", operation_id = "publish_events", tag = "events",
    request_body = PublishBatch,
    responses((status = 200, description = "Every event's result, in order (each as POST /v1/events would answer it)", body = BatchResults),
              (status = 400, description = "Not a batch: malformed, no events, more than 1,000, an event not shaped like the body of POST /v1/events (named as `events[3].colour`; nothing recorded), or an Idempotency-Key header", body = ErrorBody),
              (status = 408, description = "The body did not arrive within the HTTP body timeout", body = ErrorBody),
              (status = 413, description = "The body is over the batch limit", body = ErrorBody)))]
pub async fn publish_batch(
    State(state): State<AppState>,
    headers: HeaderMap,
    ApiJson(batch): ApiJson<PublishBatch>,
) -> Result<Json<BatchResults>, ApiError> {
    if headers.contains_key(IDEMPOTENCY_KEY) {
        return Err(ApiError::field(
            "Idempotency-Key",
            "is not taken on a batch: give each event an event_id, which makes each idempotent",
        ));
    }
    if batch.events.is_empty() || batch.events.len() > MAX_BATCH_EVENTS {
        return Err(ApiError::field(
            "events",
            format!(
                "must hold 1 to {MAX_BATCH_EVENTS} events, not {}",
                batch.events.len()
            ),
        ));
    }
    // Every event's shape first: a request the document refuses is refused whole.
    let parsed = batch
        .events
        .iter()
        .enumerate()
        .map(|(i, raw)| {
            parse_json::<PublishEvent>(raw.get().as_bytes()).map_err(|e| within_batch(i, e))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let checks = state.store.event_checks().await?;
    let mut results: Vec<Option<BatchItemResult>> = Vec::with_capacity(batch.events.len());
    let mut bodies = Vec::new();
    let mut items = Vec::new();
    for (i, body) in parsed.into_iter().enumerate() {
        match checked(&state, &checks, &body).await {
            Ok(event) => {
                results.push(None);
                bodies.push((i, body));
                items.push(PublishItem { event, key: None });
            }
            Err(e) => results.push(Some(BatchItemResult::refused(i, e))),
        }
    }
    let published = crate::ingest::publish_all(&state.store, &items).await;
    for ((i, body), done) in bodies.iter().zip(published) {
        let settled = match done {
            Ok(p) => settle(&state, body, None, p).await,
            Err(e) => Err(e.into()),
        };
        results[*i] = Some(match settled {
            Ok(Outcome::Accepted(id)) => BatchItemResult::ok(StatusCode::ACCEPTED, id),
            Ok(Outcome::Repeat(original)) => BatchItemResult::ok(StatusCode::OK, original.event_id),
            Err(e) => BatchItemResult::refused(*i, e),
        });
    }
    Ok(Json(BatchResults {
        results: results.into_iter().flatten().collect(),
    }))
}

/// One event of a batch as `POST /v1/events` would take it: its fields, the catalog's schema
/// and its subscriber.
async fn checked(
    state: &AppState,
    checks: &Checks,
    body: &PublishEvent,
) -> Result<NewEvent, ApiError> {
    let event = new_event(body)?;
    check_catalog(state, checks, body)?;
    super::subscribers::addressable(state, body.subscriber_id.as_deref()).await?;
    Ok(event)
}

/// The batch route, with its own body limit: `limit` is the admin API's.
pub fn router(limit: usize) -> Router<AppState> {
    let limit = limit.saturating_mul(BATCH_BODY_FACTOR);
    // Layers on this router only, inside the admin API's: they set the limit this route reads.
    Router::new()
        .route("/events/batch", post(publish_batch))
        .layer(Extension(BodyLimit(limit)))
        .layer(DefaultBodyLimit::max(limit))
}
