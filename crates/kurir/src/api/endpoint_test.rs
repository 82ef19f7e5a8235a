//! `POST /v1/endpoints/{id}/test`: sends a signed `kurir.test` event to the endpoint at once and
//! answers the attempt's result, so a mistyped URL or a wrong secret shows in seconds instead of
//! after every retry. The event is not stored (see [`crate::probe`]).

use axum::extract::State;
use axum::routing::post;
use axum::{Extension, Json, Router};

use super::auth::Actor;
use super::endpoints::reached;
use super::error::{ApiError, ErrorBody};
use super::extract::ApiPath;
use crate::api::state::AppState;
use crate::probe::TestResult;

/// Sends a test event to an endpoint now, whatever its event-type filter or state.
#[utoipa::path(post, path = "/v1/endpoints/{id}/test", tag = "endpoints",
    operation_id = "test_endpoint",
    params(("id" = String, Path, description = "Endpoint id")),
    responses((status = 200, description = "The attempt was made; `delivered` tells whether it was answered 2xx", body = TestResult),
              (status = 404, description = "No such endpoint", body = ErrorBody)))]
pub async fn test(
    State(state): State<AppState>,
    Extension(actor): Extension<Actor>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<TestResult>, ApiError> {
    let endpoint = reached(&state, &actor, &id).await?;
    Ok(Json(state.probe.send_test(endpoint).await))
}

/// The routes of this resource.
pub fn router() -> Router<AppState> {
    Router::new().route("/endpoints/{id}/test", post(test))
}
