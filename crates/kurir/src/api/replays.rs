//! Replay: `POST /v1/events/{event_id}/replay` for one event, `POST /v1/replays` for every
//! delivery matching a filter, `GET /v1/replays` for the audit.
//!
//! A replay moves `sent` and `dead_letter` deliveries back to `pending` with the same event id
//! (other statuses are left alone and not counted) and records who, why, which filter and how
//! many in `kurir_replays`, in the same transaction.

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
use super::events::stored;
use super::extract::{ApiJson, ApiPath, ApiQuery};
use super::page::{Page, PageRequest};
use crate::api::state::AppState;
use crate::delivery::DeliveryStatus;
use crate::endpoint::EndpointId;
use crate::store::{ReplayFilter, ReplayRecord, ReplayRequest};

/// Longest reason accepted.
const MAX_REASON_LEN: usize = 1000;

/// Body of `POST /v1/events/{event_id}/replay`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplayEvent {
    /// Only the delivery to this endpoint (default: every delivery of the event).
    pub endpoint_id: Option<String>,
    /// Why, for the audit.
    pub reason: String,
}

/// Body of `POST /v1/replays`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BulkReplay {
    /// `dead_letter` (the default) or `sent`; other statuses match nothing to replay.
    pub status: Option<String>,
    /// Only this endpoint's deliveries.
    pub endpoint_id: Option<String>,
    /// Only events of this type.
    pub event_type: Option<String>,
    /// Deliveries created at or after (RFC 3339).
    pub since: Option<DateTime<Utc>>,
    /// Deliveries created before (RFC 3339).
    pub until: Option<DateTime<Utc>>,
    /// Why, for the audit.
    pub reason: String,
}

/// Answer of a replay.
#[derive(Debug, Serialize, ToSchema)]
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

pub(crate) async fn replay(
    state: &AppState,
    request: ReplayRequest,
) -> Result<(StatusCode, Json<Replayed>), ApiError> {
    let record = state.store.replay(&request).await?;
    if record.count > 0 {
        state.dispatch_wake.wake();
    }
    tracing::info!(replay_id = record.id, actor = %record.actor, reason = %record.reason,
        replayed = record.count, filter = %record.filter, "deliveries replayed");
    Ok((
        StatusCode::ACCEPTED,
        Json(Replayed {
            replayed: record.count,
            replay_id: record.id,
        }),
    ))
}

/// Replays one event's `sent` and `dead_letter` deliveries (or its delivery to one endpoint).
#[utoipa::path(post, path = "/v1/events/{event_id}/replay", operation_id = "replay_event", tag = "replays", request_body = ReplayEvent,
    params(("event_id" = String, Path, description = "Event id")),
    responses((status = 202, description = "Replayed", body = Replayed),
              (status = 400, description = "A field is invalid", body = ErrorBody),
              (status = 404, description = "No such event, or no delivery of it to that endpoint", body = ErrorBody),
              (status = 409, description = "The deliveries asked for belong to a deleted endpoint (`endpoint_deleted`)", body = ErrorBody)))]
pub async fn replay_event(
    State(state): State<AppState>,
    Extension(actor): Extension<Actor>,
    ApiPath(event_id): ApiPath<String>,
    ApiJson(body): ApiJson<ReplayEvent>,
) -> Result<(StatusCode, Json<Replayed>), ApiError> {
    let reason = reason(body.reason)?;
    stored(&state, &event_id).await?;
    let no_delivery = |id: &str| {
        ApiError::NotFound(format!(
            "event '{event_id}' has no delivery to endpoint '{id}'"
        ))
    };
    if let Some(id) = &body.endpoint_id {
        EndpointId::parse(id).map_err(|_| no_delivery(id))?;
    }
    let asked: Vec<_> = (state.store.deliveries_for_event(&event_id).await?)
        .into_iter()
        .filter(|d| {
            body.endpoint_id
                .as_ref()
                .is_none_or(|id| &d.endpoint_id == id)
        })
        .collect();
    if let (Some(id), true) = (&body.endpoint_id, asked.is_empty()) {
        return Err(no_delivery(id));
    }
    // Deliveries of a deleted endpoint are history: the replay skips them, and refuses when
    // they are all it was asked for, rather than answer "0 replayed" without saying why.
    if !asked.is_empty() && asked.iter().all(|d| d.endpoint_deleted_at.is_some()) {
        return Err(match &body.endpoint_id {
            Some(id) => endpoint_deleted(id),
            None => endpoint_deleted_all(&event_id),
        });
    }
    let filter = ReplayFilter {
        event_id: Some(event_id),
        endpoint_id: body.endpoint_id,
        ..ReplayFilter::default()
    };
    replay(
        &state,
        ReplayRequest {
            filter,
            actor: actor.0,
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
    }
    .filter(&state)
    .await?;
    replay(
        &state,
        ReplayRequest {
            filter,
            actor: actor.0,
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
    /// `dead_letter` (the default) or `sent`.
    pub status: Option<String>,
    /// Only this endpoint's deliveries.
    pub endpoint_id: Option<String>,
    /// Only events of this type.
    pub event_type: Option<String>,
    /// Deliveries created at or after (RFC 3339).
    pub since: Option<DateTime<Utc>>,
    /// Deliveries created before (RFC 3339).
    pub until: Option<DateTime<Utc>>,
}

impl ReplayQuery {
    /// The checked filter; an endpoint that does not exist is a 404.
    pub async fn filter(self, state: &AppState) -> Result<ReplayFilter, ApiError> {
        let status = parse_status(self.status.as_deref())?.unwrap_or(DeliveryStatus::DeadLetter);
        check_window(self.since, self.until)?;
        if let Some(t) = &self.event_type {
            EventType::parse(t).map_err(|e| ApiError::field("event_type", e.to_string()))?;
        }
        if let Some(id) = &self.endpoint_id {
            let eid = endpoint_id(id)?;
            if state.store.get_endpoint(&eid).await?.is_none() {
                if state.store.endpoint_deleted_at(&eid).await?.is_some() {
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
        })
    }
}

/// Answer of a replay preview.
#[derive(Debug, Serialize, ToSchema)]
pub struct ReplayPreview {
    /// How many deliveries `POST /v1/replays` with the same filter would replay now.
    pub matching: i64,
}

/// Counts what a bulk replay with this filter would replay, without replaying anything.
#[utoipa::path(get, path = "/v1/replays/preview", tag = "replays", operation_id = "preview_replay",
    params(ReplayQuery),
    responses((status = 200, description = "The dry run's count", body = ReplayPreview),
              (status = 400, description = "A parameter is invalid", body = ErrorBody),
              (status = 404, description = "No such endpoint", body = ErrorBody),
              (status = 409, description = "The endpoint was deleted (`endpoint_deleted`)", body = ErrorBody)))]
pub async fn preview(
    State(state): State<AppState>,
    ApiQuery(q): ApiQuery<ReplayQuery>,
) -> Result<Json<ReplayPreview>, ApiError> {
    let filter = q.filter(&state).await?;
    let matching = state.store.count_replayable(&filter).await?;
    Ok(Json(ReplayPreview { matching }))
}

/// Query of `GET /v1/replays`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListReplays {
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
    /// Rows per page, 1 to 200 (default 50).
    pub limit: Option<u32>,
}

/// Lists the replay audit, newest first.
#[utoipa::path(get, path = "/v1/replays", operation_id = "list_replays", tag = "replays", params(ListReplays),
    responses((status = 200, description = "A page of the audit", body = Page<ReplayView>),
              (status = 400, description = "A parameter is invalid", body = ErrorBody)))]
pub async fn list(
    State(state): State<AppState>,
    ApiQuery(q): ApiQuery<ListReplays>,
) -> Result<Json<Page<ReplayView>>, ApiError> {
    let page = PageRequest::new("replays", q.cursor.as_deref(), q.limit)?;
    let rows = state
        .store
        .list_replays(page.before_id, page.fetch())
        .await?;
    Ok(Json(page.page(rows, |r| r.id, ReplayView::from)))
}

/// The routes of this resource.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/events/{event_id}/replay", post(replay_event))
        .route("/replays", post(replay_bulk).get(list))
        .route("/replays/preview", get(preview))
}
