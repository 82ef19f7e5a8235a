//! `POST /v1/events/recheck`: checks the events the event catalog refused against the catalog
//! as it is now, and delivers those that now pass, with their original `event_id` (see
//! `store::refusals`).

use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use serde::Deserialize;
use utoipa::ToSchema;

use super::deliveries::check_event_type;
use super::error::{ApiError, ErrorBody};
use super::extract::ApiJson;
use crate::api::state::AppState;
use crate::store::Rechecked;

/// Body of `POST /v1/events/recheck` (may be empty: `{}`).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RecheckRequest {
    /// Only refused events of this type.
    #[schema(pattern = "^[a-z0-9_-]+(\\.[a-z0-9_-]+)*$", max_length = 255)]
    pub event_type: Option<String>,
}

/// Checks refused events again; those that now pass are fanned out and delivered.
#[utoipa::path(post, path = "/v1/events/recheck", operation_id = "recheck_refused_events", tag = "events",
    request_body(content = Option<RecheckRequest>, description = "May be left out: every refused event"),
    responses((status = 200, description = "What the recheck did", body = Rechecked),
              (status = 400, description = "A field is invalid", body = ErrorBody)))]
pub async fn recheck(
    State(state): State<AppState>,
    body: Option<ApiJson<RecheckRequest>>,
) -> Result<Json<Rechecked>, ApiError> {
    let body = body.map(|ApiJson(b)| b).unwrap_or_default();
    check_event_type(body.event_type.as_deref())?;
    let done = state
        .store
        .recheck_refused(body.event_type.as_deref())
        .await?;
    if done.deliveries > 0 {
        state.dispatch_wake.wake();
    }
    tracing::info!(
        checked = done.checked,
        delivered = done.delivered,
        still_refused = done.still_refused,
        "refused events checked again"
    );
    Ok(Json(done))
}

/// The routes of this resource.
pub fn router() -> Router<AppState> {
    Router::new().route("/events/recheck", post(recheck))
}
