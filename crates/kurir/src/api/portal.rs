//! `/v1/subscribers/{id}/portal-links` and `/v1/subscribers/{id}/portal-sessions` (issue 31):
//! the sender's application makes a single-use link into one subscriber's portal
//! ([`crate::portal`]) for its signed-in customer, and can sign every session of a subscriber
//! out. Both need an operator or admin token ([`crate::access::Action::Change`]): a subscriber
//! token, like a portal session, never makes links.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{delete, post};
use axum::{Extension, Json, Router};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::auth::Actor;
use super::error::{ApiError, ErrorBody};
use super::extract::{whole, ApiJson, ApiPath};
use crate::api::state::AppState;
use crate::limits::PORTAL_LINK_EXPIRES_IN;
use crate::store::portal::NewPortalLink;
use crate::store::subscribers::valid_id;

/// How long a link waits to be opened unless told otherwise: 15 minutes.
pub const DEFAULT_EXPIRES_IN_SECONDS: u32 = 900;

/// Body of `POST /v1/subscribers/{id}/portal-links`; may be left out.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreatePortalLink {
    /// Seconds the link may wait to be opened, 60 to 604800 (default 900).
    #[serde(default, deserialize_with = "whole")]
    #[schema(minimum = 60, maximum = 604800)]
    pub expires_in: Option<u32>,
    /// Whether its session only looks: every control that changes something is hidden and
    /// refused (default false).
    #[serde(default)]
    pub read_only: bool,
    /// Where the portal's "Back" link goes: an http(s) URL (your settings page).
    #[schema(
        pattern = "^[hH][tT][tT][pP][sS]?://[A-Za-z0-9._~!$&'()*+,;=-]+(:[0-9]{1,4})?([/?#][^\\s\\x00-\\x1f\\x7f-\\x9f]*)?$",
        max_length = 2048,
        example = "https://app.example.com/settings/webhooks"
    )]
    pub return_url: Option<String>,
}

/// A portal link.
#[derive(Debug, Serialize, ToSchema)]
pub struct PortalLinkView {
    /// Open it once, before `expires_at`: it starts a session of the subscriber's portal.
    pub url: String,
    /// When it stops opening.
    pub expires_at: DateTime<Utc>,
}

fn no_subscriber(id: &str) -> ApiError {
    ApiError::NotFound(format!("no subscriber with id '{id}'"))
}

/// The return URL, checked as an endpoint's URL is ([`crate::endpoint::validate_url`]: the
/// document's pattern), under its own field name.
fn return_url(url: Option<String>) -> Result<Option<String>, ApiError> {
    let Some(url) = url else {
        return Ok(None);
    };
    crate::endpoint::validate_url(&url).map_err(|e| ApiError::field("return_url", e.message))?;
    Ok(Some(url))
}

/// Creates a single-use link into the subscriber's portal.
#[utoipa::path(post, path = "/v1/subscribers/{id}/portal-links", operation_id = "create_portal_link",
    tag = "subscribers",
    params(("id" = String, Path, description = "Your id for the subscriber")),
    request_body(content = Option<CreatePortalLink>, description = "May be left out: 15 minutes, not read-only, no return URL"),
    responses((status = 201, description = "Created: send your customer to `url`", body = PortalLinkView),
              (status = 400, description = "A field is invalid", body = ErrorBody),
              (status = 404, description = "No such subscriber, or it was deleted", body = ErrorBody),
              (status = 409, description = "The subscriber is disabled (`subscriber_disabled`)", body = ErrorBody)))]
pub async fn create_link(
    State(state): State<AppState>,
    Extension(actor): Extension<Actor>,
    ApiPath(id): ApiPath<String>,
    body: Option<ApiJson<CreatePortalLink>>,
) -> Result<(StatusCode, Json<PortalLinkView>), ApiError> {
    let body = body.map(|ApiJson(b)| b).unwrap_or_default();
    let expires_in = body.expires_in.unwrap_or(DEFAULT_EXPIRES_IN_SECONDS);
    if !PORTAL_LINK_EXPIRES_IN.contains(&expires_in) {
        return Err(ApiError::field(
            "expires_in",
            format!(
                "{expires_in} is out of range: from {} to {} seconds",
                PORTAL_LINK_EXPIRES_IN.start(),
                PORTAL_LINK_EXPIRES_IN.end()
            ),
        ));
    }
    let return_url = return_url(body.return_url)?;
    let subscriber = match valid_id(&id) {
        true => state.store.subscriber(&id).await?,
        false => None,
    };
    let subscriber = subscriber
        .filter(|s| s.deleted_at.is_none())
        .ok_or_else(|| no_subscriber(&id))?;
    if subscriber.disabled_at.is_some() {
        return Err(ApiError::Conflict {
            code: "subscriber_disabled",
            message: format!(
                "the subscriber '{id}' is disabled: enable it before making a portal link"
            ),
        });
    }
    let expires_at = state.store.clock().now() + chrono::Duration::seconds(expires_in.into());
    let link = state
        .store
        .create_portal_link(&NewPortalLink {
            subscriber_id: id.clone(),
            read_only: body.read_only,
            return_url,
            expires_at,
            created_by: actor.name.clone(),
            created_via: actor.via,
        })
        .await?;
    tracing::info!(link_id = %link.id, subscriber_id = %id, read_only = body.read_only,
        actor = %actor.name, via = %actor.via, "portal link created");
    let base = state
        .portal
        .public_url
        .as_deref()
        .unwrap_or("http://127.0.0.1:8080");
    let url = format!("{base}{}{}", crate::portal::ENTER_PATH, link.token.expose());
    Ok((
        StatusCode::CREATED,
        Json(PortalLinkView { url, expires_at }),
    ))
}

/// Signs out every portal session of the subscriber and withdraws its unused links, at once on
/// every process.
#[utoipa::path(delete, path = "/v1/subscribers/{id}/portal-sessions", operation_id = "revoke_portal_sessions",
    tag = "subscribers",
    params(("id" = String, Path, description = "Your id for the subscriber")),
    responses((status = 204, description = "Every session signed out, every unused link withdrawn"),
              (status = 404, description = "No such subscriber", body = ErrorBody)))]
pub async fn revoke_sessions(
    State(state): State<AppState>,
    Extension(actor): Extension<Actor>,
    ApiPath(id): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    let exists = valid_id(&id) && state.store.subscriber(&id).await?.is_some();
    if !exists {
        return Err(no_subscriber(&id));
    }
    let (sessions, links) = state.store.revoke_portal_access(&id).await?;
    tracing::info!(subscriber_id = %id, sessions, links, actor = %actor.name, via = %actor.via,
        "portal sessions revoked");
    Ok(StatusCode::NO_CONTENT)
}

/// The routes of this resource.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/subscribers/{id}/portal-links", post(create_link))
        .route("/subscribers/{id}/portal-sessions", delete(revoke_sessions))
}
