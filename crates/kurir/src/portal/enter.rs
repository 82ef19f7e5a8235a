//! Getting in and out: opening a portal link (`GET /portal/enter/{token}`) starts a session and
//! sends the browser on to the portal without the token in its address; signing out ends the
//! session. A link that does not open says why in plain words ([`PortalError::Link`]).

use askama::Template;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use serde::Deserialize;

use super::error::PortalError;
use super::session::{self, Visitor};
use crate::api::state::AppState;
use crate::store::portal::{Opened, LINK_TOKEN_PREFIX};
use crate::store::tokens::token_hash;

/// The path a link's URL has, before its token.
pub const ENTER_PATH: &str = "/portal/enter/";

/// Where a new session lands.
pub const HOME: &str = "/portal/endpoints";

/// Opens a link: a session cookie and a redirect to the portal, or the page saying why not.
async fn enter(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(token): Path<String>,
) -> Result<Response, PortalError> {
    // Only kurir's own tokens are looked up: anything else is refused without a query.
    if !token.starts_with(LINK_TOKEN_PREFIX) {
        return Err(PortalError::Link(Opened::Unknown));
    }
    let ttl = chrono::Duration::from_std(state.portal.session_ttl)
        .unwrap_or_else(|_| chrono::Duration::hours(8));
    let now = state.store.clock().now();
    let opened = state
        .store
        .open_portal_link(&token_hash(&token), now + ttl)
        .await?;
    let Opened::Session(s) = opened else {
        tracing::info!(outcome = ?opened, "portal link refused");
        return Err(PortalError::Link(opened));
    };
    tracing::info!(subscriber_id = %s.subscriber_id, read_only = s.read_only, via = "portal",
        "portal session started");
    let max_age = (s.expires_at - now).num_seconds().max(0);
    let cookie = session::cookie_value(&state, &s.id);
    // 303: the page that follows is a GET, and the token is not in its address.
    Ok((
        [session::set_cookie(&headers, Some(&cookie), max_age)],
        Redirect::to(HOME),
    )
        .into_response())
}

#[derive(Deserialize)]
struct CsrfOnly {
    csrf: String,
}

#[derive(Template)]
#[template(path = "portal/signed_out.html")]
struct SignedOutPage {
    brand: String,
    return_url: Option<String>,
}

/// Ends the session, on every process at once (its row is revoked), and clears the cookie.
async fn sign_out(
    State(state): State<AppState>,
    visitor: Visitor,
    headers: HeaderMap,
    Form(form): Form<CsrfOnly>,
) -> Result<Response, PortalError> {
    visitor.check_csrf(&form.csrf)?;
    state
        .store
        .end_portal_session(&visitor.session().id)
        .await?;
    tracing::info!(subscriber_id = %visitor.subscriber_id(), via = "portal", "portal session ended by its user");
    let page = super::render(&SignedOutPage {
        brand: state.portal.title.clone(),
        return_url: visitor.session().return_url.clone(),
    })?;
    Ok(([session::set_cookie(&headers, None, 0)], page).into_response())
}

/// The routes of getting in and out, and the portal's front door.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/portal", get(|| async { Redirect::to(HOME) }))
        .route("/portal/", get(|| async { Redirect::to(HOME) }))
        .route("/portal/enter/{token}", get(enter))
        .route("/portal/logout", post(sign_out))
}
