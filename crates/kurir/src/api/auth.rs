//! Bearer-token authentication of everything under `/v1`. A request without a token that
//! works, or with a wrong one, is answered 401 before any handler (or body parsing) runs; one
//! whose token's role or scope does not allow it ([`Actor::may`]) is answered 403. An accepted
//! request carries its [`Actor`] for handlers that record who did what, and that show a
//! subscriber token only its subscriber's rows ([`Actor::reaches`]).
//!
//! Two kinds of token work: the environment's (the bootstrap admin, checked in memory) and the
//! named ones of `kurir_tokens`, read on each request, so a revocation holds at once on every
//! process sharing the database.

use axum::extract::{Request, State};
use axum::http::header::AUTHORIZATION;
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::Response;

use super::error::ApiError;
use crate::api::state::AppState;
use crate::store::tokens::{token_hash, TOKEN_PREFIX};

pub use crate::access::Actor;
use crate::access::{Action, Via};

/// Middleware: authenticates `Authorization: Bearer <token>` and asks [`Actor::may`] whether the
/// token may do what the request's method and path ask ([`Action::of_api_request`]). Who it is
/// goes on the request's log span.
pub async fn require_token(
    State(state): State<AppState>,
    mut req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let via = Via::of_api_request(req.headers());
    let token = bearer_token(req.headers()).ok_or(ApiError::Unauthorized)?;
    let actor = authenticate(&state, token, via)
        .await?
        .ok_or(ApiError::Unauthorized)?;
    let span = tracing::Span::current();
    span.record("actor", actor.name.as_str());
    span.record("via", actor.via.as_str());
    // Below `/v1`: the router is nested there, so the path the handlers see is the one checked.
    let action = Action::of_api_request(req.method(), req.uri().path());
    if !actor.may(action) {
        return Err(ApiError::Forbidden(actor.refusal(action)));
    }
    req.extensions_mut().insert(actor);
    Ok(next.run(req).await)
}

/// Who `token` is, acting through `via`: the environment's token (compared in constant time),
/// or a named or subscriber token that is neither revoked nor expired (nor its subscriber
/// deleted). `None` for anything else.
pub async fn authenticate(
    state: &AppState,
    token: &str,
    via: Via,
) -> Result<Option<Actor>, ApiError> {
    if state.admin.verify(token) {
        return Ok(Some(Actor::bootstrap(state.admin.name(), via)));
    }
    // Only kurir's own tokens are looked up: anything else is refused without a query.
    if !token.starts_with(TOKEN_PREFIX) {
        return Ok(None);
    }
    let found = state.store.active_token(&token_hash(token)).await?;
    Ok(found.map(|t| t.actor(via)))
}

/// The token of an `Authorization: Bearer <token>` header, if there is one.
pub fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim())
}
