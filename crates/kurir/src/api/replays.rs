//! Replay: `POST /v1/events/{event_id}/replay` for one event, `POST /v1/replays` for every
//! delivery matching a filter, their dry runs (`GET …/preview`), `GET /v1/replays` for the audit.
//!
//! A replay moves the deliveries that did not succeed (`dead_letter`) back to `pending` with the
//! same event id, and `sent` ones only when asked (`include_sent` for an event, `status: sent`
//! by filter); other statuses are left alone and not counted (see
//! [`crate::store::ReplayFilter`]). It records who, why, which filter and how many in
//! `kurir_replays`, in the same transaction.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use chrono::{DateTime, Utc};
use kurir_core::event::EventType;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::auth::Actor;
use super::deliveries::{check_window, parse_status};
use super::endpoints::{endpoint_id, not_found};
use super::error::{ApiError, ErrorBody};
use super::events::reached_event;
use super::extract::{ApiJson, ApiPath, ApiQuery};
use super::page::{Page, PageRequest};
use super::subscribers::{addressable, unknown_subscriber};
use crate::access::Listing;
use crate::api::state::AppState;
use crate::delivery::DeliveryStatus;
use crate::endpoint::EndpointId;
use crate::store::{ReplayCandidate, ReplayFilter, ReplayRecord, ReplayRequest};

/// Longest reason accepted.
const MAX_REASON_LEN: usize = 1000;

/// How many of the deliveries a dry run would replay it names (it counts them all).
const PREVIEW_DELIVERIES: u32 = 100;

/// Body of `POST /v1/events/{event_id}/replay`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"reason": "the partner lost it", "include_sent": false}))]
pub struct ReplayEvent {
    /// Only the delivery to this endpoint (default: every delivery of the event).
    pub endpoint_id: Option<String>,
    /// Re-send the deliveries that were already sent too. Default `false`: only the deliveries
    /// that did not succeed (`dead_letter`) are replayed.
    #[serde(default)]
    pub include_sent: bool,
    /// Why, for the audit: 1 to 1000 bytes.
    #[schema(min_length = 1, max_length = 1000)]
    pub reason: String,
}

/// Body of `POST /v1/replays`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"status": "dead_letter", "event_type": "order.paid", "since": "2026-06-11T00:00:00Z", "reason": "partner fixed their TLS certificate"}))]
pub struct BulkReplay {
    /// `dead_letter` (the default) or `sent`; other statuses match nothing to replay.
    #[schema(pattern = "^(pending|processing|sent|retrying|failed|dead_letter|cancelled)$")]
    pub status: Option<String>,
    /// Only this endpoint's deliveries.
    pub endpoint_id: Option<String>,
    /// Only events of this type.
    #[schema(pattern = "^[a-z0-9_-]+(\\.[a-z0-9_-]+)*$", max_length = 255)]
    pub event_type: Option<String>,
    /// Deliveries created at or after (RFC 3339).
    pub since: Option<DateTime<Utc>>,
    /// Deliveries created before (RFC 3339).
    pub until: Option<DateTime<Utc>>,
    /// Only deliveries of events addressed to this subscriber. A subscriber token's replay is
    /// always confined to its own.
    pub subscriber_id: Option<String>,
    /// Why, for the audit: 1 to 1000 bytes.
    #[schema(min_length = 1, max_length = 1000)]
    pub reason: String,
}

/// Answer of a replay.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"replayed": 3, "replay_id": 17}))]
pub struct Replayed {
    /// How many deliveries went back to `pending`.
    pub replayed: i64,
    /// The audit row.
    pub replay_id: i64,
}

/// One replay in the audit.
#[derive(Debug, Serialize, ToSchema)]
pub struct ReplayView {
    /// Its id.
    pub id: i64,
    /// The name of the token that asked.
    pub actor: String,
    /// Where the request came from: `api`, `cli` or `dashboard`; absent on replays recorded
    /// before kurir kept it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub via: Option<String>,
    /// Why.
    pub reason: String,
    /// The filter, as given.
    #[schema(value_type = Object)]
    pub filter: serde_json::Value,
    /// How many deliveries went back to `pending`.
    pub count: i64,
    /// When.
    pub created_at: DateTime<Utc>,
}

impl From<ReplayRecord> for ReplayView {
    fn from(r: ReplayRecord) -> Self {
        Self {
            id: r.id,
            actor: r.actor,
            via: r.via,
            reason: r.reason,
            filter: r.filter,
            count: r.count,
            created_at: r.created_at,
        }
    }
}

pub(crate) fn reason(reason: String) -> Result<String, ApiError> {
    let trimmed = reason.trim();
    if trimmed.is_empty() || trimmed.len() > MAX_REASON_LEN {
        return Err(ApiError::field(
            "reason",
            format!("say why you replay, in 1 to {MAX_REASON_LEN} bytes"),
        ));
    }
    if let Some(problem) = crate::limits::text_problem(trimmed, MAX_REASON_LEN) {
        return Err(ApiError::field("reason", problem));
    }
    Ok(trimmed.to_owned())
}

/// The refusal to replay deliveries of a deleted endpoint: there is nowhere to send them.
fn endpoint_deleted(id: &str) -> ApiError {
    ApiError::Conflict {
        code: "endpoint_deleted",
        message: format!(
            "endpoint '{id}' was deleted: its deliveries are kept as history until retention \
             takes them, and are never replayed"
        ),
    }
}

/// As [`endpoint_deleted`], for an event all of whose deliveries belong to deleted endpoints.
fn endpoint_deleted_all(event_id: &str) -> ApiError {
    ApiError::Conflict {
        code: "endpoint_deleted",
        message: format!(
            "every delivery of event '{event_id}' belongs to a deleted endpoint: they are kept \
             as history until retention takes them, and are never replayed"
        ),
    }
}

/// The refusal to re-send a delivery that was sent, unless asked to: a replay re-sends what did
/// not succeed, and answering "0 replayed" would not say why.
fn delivery_sent(event_id: &str, endpoint_id: &str) -> ApiError {
    ApiError::Conflict {
        code: "delivery_sent",
        message: format!(
            "the delivery of event '{event_id}' to endpoint '{endpoint_id}' was sent; replay it \
             with include_sent (kurir replay --include-sent) to send it again"
        ),
    }
}

/// The checked filter of one event's replay and of its dry run, so both answer alike: 404 for
/// an unknown event or an endpoint it was not delivered to, 409 when what was asked for
/// belongs to a deleted endpoint, or is one sent delivery without `include_sent`.
async fn event_filter(
    state: &AppState,
    actor: &Actor,
    event_id: String,
    endpoint_id: Option<String>,
    include_sent: bool,
) -> Result<ReplayFilter, ApiError> {
    // Its deliveries are all its subscriber's (the fan-out rule): reaching the event is
    // reaching them.
    let event = reached_event(state, actor, &event_id).await?;
    let no_delivery = |id: &str| {
        ApiError::NotFound(format!(
            "event '{event_id}' has no delivery to endpoint '{id}'"
        ))
    };
    if let Some(id) = &endpoint_id {
        EndpointId::parse(id).map_err(|_| no_delivery(id))?;
    }
    let asked: Vec<_> = (state.store.deliveries_for_event(&event_id).await?)
        .into_iter()
        .filter(|d| endpoint_id.as_ref().is_none_or(|id| &d.endpoint_id == id))
        .collect();
    if let (Some(id), true) = (&endpoint_id, asked.is_empty()) {
        return Err(no_delivery(id));
    }
    // Deliveries of a deleted endpoint are history: the replay skips them, and refuses when
    // they are all it was asked for, rather than answer "0 replayed" without saying why.
    if !asked.is_empty() && asked.iter().all(|d| d.endpoint_deleted_at.is_some()) {
        return Err(match &endpoint_id {
            Some(id) => endpoint_deleted(id),
            None => endpoint_deleted_all(&event_id),
        });
    }
    if let (Some(id), false, [only]) = (&endpoint_id, include_sent, asked.as_slice()) {
        if only.status == DeliveryStatus::Sent {
            return Err(delivery_sent(&event_id, id));
        }
    }
    Ok(ReplayFilter {
        event_id: Some(event_id),
        endpoint_id,
        include_sent,
        subscriber_id: event.subscriber_id,
        ..ReplayFilter::default()
    })
}

pub(crate) async fn replay(
    state: &AppState,
    request: ReplayRequest,
) -> Result<(StatusCode, Json<Replayed>), ApiError> {
    let record = state.store.replay(&request).await?;
    if record.count > 0 {
        state.dispatch_wake.wake();
    }
    tracing::info!(replay_id = record.id, actor = %record.actor,
        via = record.via.as_deref().unwrap_or("-"), reason = %record.reason,
        replayed = record.count, filter = %record.filter, "deliveries replayed");
    Ok((
        StatusCode::ACCEPTED,
        Json(Replayed {
            replayed: record.count,
            replay_id: record.id,
        }),
    ))
}

/// Replays one event's deliveries that did not succeed (`dead_letter`), or its delivery to one
/// endpoint; with `include_sent`, its `sent` deliveries too.
#[utoipa::path(post, path = "/v1/events/{event_id}/replay", operation_id = "replay_event", tag = "replays", request_body = ReplayEvent,
    params(("event_id" = String, Path, description = "Event id")),
    responses((status = 202, description = "Replayed", body = Replayed),
              (status = 400, description = "A field is invalid", body = ErrorBody),
              (status = 404, description = "No such event, or no delivery of it to that endpoint", body = ErrorBody),
              (status = 409, description = "The deliveries asked for belong to a deleted endpoint (`endpoint_deleted`), or the one asked for was sent and `include_sent` is not set (`delivery_sent`)", body = ErrorBody)))]
pub async fn replay_event(
    State(state): State<AppState>,
    Extension(actor): Extension<Actor>,
    ApiPath(event_id): ApiPath<String>,
    ApiJson(body): ApiJson<ReplayEvent>,
) -> Result<(StatusCode, Json<Replayed>), ApiError> {
    let reason = reason(body.reason)?;
    let filter = event_filter(
        &state,
        &actor,
        event_id,
        body.endpoint_id,
        body.include_sent,
    )
    .await?;
    replay(
        &state,
        ReplayRequest {
            filter,
            actor: actor.name,
            via: actor.via,
            reason,
        },
    )
    .await
}

/// Replays every delivery matching a filter.
#[utoipa::path(post, path = "/v1/replays", operation_id = "replay_deliveries", tag = "replays", request_body = BulkReplay,
    responses((status = 202, description = "Replayed", body = Replayed),
              (status = 400, description = "A field is invalid", body = ErrorBody),
              (status = 404, description = "No such endpoint", body = ErrorBody),
              (status = 409, description = "The endpoint was deleted (`endpoint_deleted`)", body = ErrorBody)))]
pub async fn replay_bulk(
    State(state): State<AppState>,
    Extension(actor): Extension<Actor>,
    ApiJson(body): ApiJson<BulkReplay>,
) -> Result<(StatusCode, Json<Replayed>), ApiError> {
    let reason = reason(body.reason)?;
    let filter = ReplayQuery {
        status: body.status,
        endpoint_id: body.endpoint_id,
        event_type: body.event_type,
        since: body.since,
        until: body.until,
        subscriber_id: body.subscriber_id,
    }
    .filter(&state, &actor)
    .await?;
    replay(
        &state,
        ReplayRequest {
            filter,
            actor: actor.name,
            via: actor.via,
            reason,
        },
    )
    .await
}

/// Which deliveries a bulk replay takes: the filter of `POST /v1/replays` and the query of
/// `GET /v1/replays/preview`.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ReplayQuery {
    /// `dead_letter` (the default) or `sent`; other statuses match nothing to replay.
    #[param(pattern = "^(pending|processing|sent|retrying|failed|dead_letter|cancelled)$")]
    pub status: Option<String>,
    /// Only this endpoint's deliveries.
    pub endpoint_id: Option<String>,
    /// Only events of this type.
    #[param(pattern = "^[a-z0-9_-]+(\\.[a-z0-9_-]+)*$", max_length = 255)]
    pub event_type: Option<String>,
    /// Deliveries created at or after (RFC 3339).
    pub since: Option<DateTime<Utc>>,
    /// Deliveries created before (RFC 3339).
    pub until: Option<DateTime<Utc>>,
    /// Only deliveries of events addressed to this subscriber. A subscriber token's replay is
    /// always confined to its own.
    pub subscriber_id: Option<String>,
}

impl ReplayQuery {
    /// The checked filter; an endpoint that does not exist is a 404.
    pub async fn filter(self, state: &AppState, actor: &Actor) -> Result<ReplayFilter, ApiError> {
        let status = parse_status(self.status.as_deref())?.unwrap_or(DeliveryStatus::DeadLetter);
        check_window(self.since, self.until)?;
        if let Some(t) = &self.event_type {
            EventType::parse(t).map_err(|e| ApiError::field("event_type", e.to_string()))?;
        }
        // Another subscriber is answered as one that does not exist.
        if let Some(id) = &self.subscriber_id {
            if !actor.reaches(Some(id)) {
                return Err(unknown_subscriber(id));
            }
            addressable(state, Some(id)).await?;
        }
        if let Some(id) = &self.endpoint_id {
            let eid = endpoint_id(id)?;
            let found = state.store.get_endpoint(&eid).await?;
            if !found.is_some_and(|e| actor.reaches(e.subscriber_id.as_deref())) {
                // Whether an endpoint was deleted is said only to who reaches every endpoint:
                // to a subscriber token another's tombstone is a missing id like any other.
                let unscoped = actor.subscriber().is_none();
                if unscoped && state.store.endpoint_deleted_at(&eid).await?.is_some() {
                    return Err(endpoint_deleted(id));
                }
                return Err(not_found(id));
            }
        }
        Ok(ReplayFilter {
            event_id: None,
            status: Some(status),
            endpoint_id: self.endpoint_id,
            event_type: self.event_type,
            since: self.since,
            until: self.until,
            include_sent: false,
            subscriber_id: actor.subscriber().map(str::to_owned).or(self.subscriber_id),
        })
    }
}

/// Answer of a replay's dry run.
#[derive(Debug, Serialize, ToSchema)]
pub struct ReplayPreview {
    /// How many deliveries the replay with the same filter would move back to `pending` now.
    pub matching: i64,
    /// The first 100 of them, oldest delivery first.
    pub deliveries: Vec<ReplayCandidateView>,
}

/// A delivery a replay would move back to `pending`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ReplayCandidateView {
    /// The delivery's id.
    pub delivery_id: i64,
    /// Its endpoint.
    pub endpoint_id: String,
    /// The endpoint's URL.
    pub endpoint_url: String,
    /// Its status now: `dead_letter`, or `sent` when sent deliveries are included.
    pub status: String,
}

impl From<ReplayCandidate> for ReplayCandidateView {
    fn from(c: ReplayCandidate) -> Self {
        Self {
            delivery_id: c.delivery_id,
            endpoint_id: c.endpoint_id,
            endpoint_url: c.endpoint_url,
            status: c.status.name().to_owned(),
        }
    }
}

/// The dry run of a replay with `filter`: the count and the first deliveries.
pub(crate) async fn dry_run(
    state: &AppState,
    filter: &ReplayFilter,
) -> Result<ReplayPreview, ApiError> {
    let matching = state.store.count_replayable(filter).await?;
    let deliveries = state
        .store
        .replay_candidates(filter, PREVIEW_DELIVERIES)
        .await?;
    Ok(ReplayPreview {
        matching,
        deliveries: deliveries.into_iter().map(Into::into).collect(),
    })
}

/// Counts what a bulk replay with this filter would replay, and names the first 100, without
/// replaying anything.
#[utoipa::path(get, path = "/v1/replays/preview", tag = "replays", operation_id = "preview_replay",
    params(ReplayQuery),
    responses((status = 200, description = "The dry run's count", body = ReplayPreview),
              (status = 400, description = "A parameter is invalid", body = ErrorBody),
              (status = 404, description = "No such endpoint", body = ErrorBody),
              (status = 409, description = "The endpoint was deleted (`endpoint_deleted`)", body = ErrorBody)))]
pub async fn preview(
    State(state): State<AppState>,
    Extension(actor): Extension<Actor>,
    ApiQuery(q): ApiQuery<ReplayQuery>,
) -> Result<Json<ReplayPreview>, ApiError> {
    let filter = q.filter(&state, &actor).await?;
    Ok(Json(dry_run(&state, &filter).await?))
}

/// Query of `GET /v1/events/{event_id}/replay/preview`: what `POST /v1/events/{event_id}/replay`
/// would take.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct EventReplayQuery {
    /// Only the delivery to this endpoint.
    pub endpoint_id: Option<String>,
    /// Count the `sent` deliveries too (default `false`).
    pub include_sent: Option<bool>,
}

/// Names the deliveries of one event that its replay would move back to `pending`, without
/// replaying anything; refused as the replay would be.
#[utoipa::path(get, path = "/v1/events/{event_id}/replay/preview", tag = "replays", operation_id = "preview_event_replay",
    params(("event_id" = String, Path, description = "Event id"), EventReplayQuery),
    responses((status = 200, description = "The dry run: the count and the deliveries", body = ReplayPreview),
              (status = 400, description = "A parameter is invalid", body = ErrorBody),
              (status = 404, description = "No such event, or no delivery of it to that endpoint", body = ErrorBody),
              (status = 409, description = "As the replay: `endpoint_deleted` or `delivery_sent`", body = ErrorBody)))]
pub async fn preview_event(
    State(state): State<AppState>,
    Extension(actor): Extension<Actor>,
    ApiPath(event_id): ApiPath<String>,
    ApiQuery(q): ApiQuery<EventReplayQuery>,
) -> Result<Json<ReplayPreview>, ApiError> {
    let include_sent = q.include_sent.unwrap_or(false);
    let filter = event_filter(&state, &actor, event_id, q.endpoint_id, include_sent).await?;
    Ok(Json(dry_run(&state, &filter).await?))
}

/// Query of `GET /v1/replays`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListReplays {
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
    /// Rows per page, 1 to 200 (default 50).
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<u32>,
    /// Only the replays confined to this subscriber (by its token, by its `subscriber_id`, or
    /// of its events). A subscriber token always sees only its own.
    pub subscriber_id: Option<String>,
}

/// Lists the replay audit, newest first.
#[utoipa::path(get, path = "/v1/replays", operation_id = "list_replays", tag = "replays", params(ListReplays),
    responses((status = 200, description = "A page of the audit", body = Page<ReplayView>),
              (status = 400, description = "A parameter is invalid", body = ErrorBody)))]
pub async fn list(
    State(state): State<AppState>,
    Extension(actor): Extension<Actor>,
    ApiQuery(q): ApiQuery<ListReplays>,
) -> Result<Json<Page<ReplayView>>, ApiError> {
    let page = PageRequest::new("replays", q.cursor.as_deref(), q.limit)?;
    let subscriber = match actor.listing(q.subscriber_id.as_deref()) {
        Listing::Nothing => return Ok(Json(Page::empty())),
        Listing::Everyone => None,
        Listing::Subscriber(s) => Some(s),
    };
    let rows = state
        .store
        .list_subscriber_replays(page.past, page.fetch(), subscriber.as_deref())
        .await?;
    Ok(Json(page.page(rows, |r| r.id, ReplayView::from)))
}

/// The routes of this resource.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/events/{event_id}/replay", post(replay_event))
        .route("/events/{event_id}/replay/preview", get(preview_event))
        .route("/replays", post(replay_bulk).get(list))
        .route("/replays/preview", get(preview))
}
