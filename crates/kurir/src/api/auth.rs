//! Bearer-token authentication of everything under `/v1`. A request without the admin token, or
//! with a wrong one, is answered 401 before any handler (or body parsing) runs; an accepted
//! request carries its [`Actor`] for handlers that record who did what.

use axum::extract::{Request, State};
use axum::http::header::AUTHORIZATION;
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::Response;

use super::error::ApiError;
use crate::api::state::AppState;

/// Who made an authenticated request: the name of the token used.
#[derive(Clone, Debug)]
pub struct Actor(pub String);

/// Middleware: checks `Authorization: Bearer <token>` in constant time.
pub async fn require_admin(
    State(state): State<AppState>,
    mut req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    match bearer_token(req.headers()) {
        Some(token) if state.admin.verify(token) => {
            req.extensions_mut()
                .insert(Actor(state.admin.name().to_owned()));
            Ok(next.run(req).await)
        }
        _ => Err(ApiError::Unauthorized),
    }
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
