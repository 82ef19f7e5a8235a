//! The gateway's two routes, outside the admin API's `/v1`:
//!
//! - `POST /inbox/{source}`: no admin token, the signature is the authentication. Verified,
//!   stored once and answered exactly as kurir-receiver's own route answers (`202` first receipt,
//!   `200 already_processed`, `401`, `400`, `413`), and counted in `kurir_inbox_events_total`;
//!   the runner is woken to forward it.
//! - `GET /inbox/{source}/events/{event_id}`: the event's status, for a holder of the admin token
//!   or of the source's read token.

use axum::extract::{Request, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use kurir_core::EventId;
use kurir_receiver::{EventStatus, Receiver, WebhookSource};

use crate::api::auth::bearer_token;
use crate::api::error::{ApiError, ErrorBody};
use crate::api::extract::ApiPath;
use crate::api::state::AppState;

/// Receives one webhook for `source`.
#[utoipa::path(post, path = "/inbox/{source}", operation_id = "receive_webhook", tag = "inbox gateway", security(()),
    params(("source" = String, Path, description = "Source name")),
    request_body(content = String, content_type = "application/json",
        description = "The partner's webhook, verified on its raw bytes under the source's scheme"),
    responses(
        (status = 202, description = "First receipt, stored: `{\"status\":\"pending\",\"event_id\"}`; or a duplicate still pending, processing or failed"),
        (status = 200, description = "Duplicate of a forwarded event: `{\"status\":\"already_processed\",\"event_id\"}`"),
        (status = 400, description = "No event id where the scheme keeps it (`missing_event_id`), or an id header that disagrees with the signed id (`event_id_mismatch`)"),
        (status = 401, description = "Bad or missing signature, or a timestamp outside the tolerance; the code names the check"),
        (status = 404, description = "No such source"),
        (status = 413, description = "Body over 1 MiB"),
        (status = 503, description = "The database is unavailable: nothing was stored; the partner should retry, as partners do on 5xx", body = ErrorBody)))]
pub async fn receive(
    State(state): State<AppState>,
    ApiPath(name): ApiPath<String>,
    request: Request,
) -> Result<Response, ApiError> {
    let not_found = || ApiError::NotFound(format!("no inbox source named '{name}'"));
    if !WebhookSource::is_valid_name(&name) {
        return Err(not_found());
    }
    let source = state.store.get_source(&name).await?.ok_or_else(not_found)?;
    let webhook_source = source
        .webhook_source()
        .map_err(|e| ApiError::Internal(Box::new(e)))?
        .metrics_recorder(state.metrics.recorder())
        .clock(state.store.clock().clone());
    let event = match webhook_source.verify_request(request).await {
        Ok(event) => event,
        Err(rejection) => {
            // The failed check only: never the body, the signature or the secrets.
            tracing::warn!(source = %name, reason = %rejection, "webhook rejected");
            return Ok(rejection.into_response());
        }
    };
    // Another process may have created the source since this one last read the list.
    state.gateway.sources().insert(&name);
    let receiver = Receiver::new(webhook_source, state.store.inbox()).wake(state.gateway.waker());
    Ok(receiver.accept(event).await?.into_response())
}

/// Reports where one received event stands.
#[utoipa::path(get, path = "/inbox/{source}/events/{event_id}", operation_id = "get_inbox_event_status", tag = "inbox gateway",
    security(("bearer" = [])),
    params(("source" = String, Path, description = "Source name"),
           ("event_id" = String, Path, description = "The sender's event id")),
    responses(
        (status = 200, description = "`{\"event_id\",\"event_type\",\"status\",\"attempts\",\"last_attempt_at\",\"last_error\",\"next_attempt_at\"}`; status is pending, processing, completed or failed", content_type = "application/json"),
        (status = 401, description = "Neither the admin token, a named token nor the source's read token"),
        (status = 404, description = "No such event")))]
pub async fn status(
    State(state): State<AppState>,
    ApiPath((name, event_id)): ApiPath<(String, String)>,
    headers: HeaderMap,
) -> Result<Json<EventStatus>, ApiError> {
    let Some(token) = bearer_token(&headers) else {
        return Err(ApiError::ReadTokenRequired);
    };
    let valid_name = WebhookSource::is_valid_name(&name);
    let operator = crate::api::auth::authenticate(&state, token, crate::access::Via::Api).await?;
    if !operator.is_some_and(|actor| actor.may(crate::access::Action::Read)) {
        // An unknown source and a wrong token look alike, so source names do not leak.
        let source = if valid_name {
            state.store.get_source(&name).await?
        } else {
            None
        };
        if !source.is_some_and(|s| s.read_token_matches(token)) {
            return Err(ApiError::ReadTokenRequired);
        }
    }
    let not_found = || ApiError::NotFound(format!("source {name} has no event with this id"));
    if !valid_name || EventId::parse(&event_id).is_err() {
        return Err(not_found());
    }
    let record = state
        .store
        .inbox()
        .status(&name, &event_id)
        .await?
        .ok_or_else(not_found)?;
    Ok(Json(EventStatus::from(record)))
}

/// The gateway's routes.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/inbox/{source}", post(receive))
        .route("/inbox/{source}/events/{event_id}", get(status))
}
