//! The operator dashboard, served by `kurir serve` under `/ui/` (`/` redirects there), and the
//! API reference at `/docs`.
//!
//! Pages are askama templates compiled into the binary (`templates/`), with kurir's stylesheet
//! and a vendored htmx embedded too ([`assets`]): no frontend build step, nothing fetched from
//! elsewhere. Charts are SVG drawn on the server ([`chart`]). A list handler answers the whole page,
//! or only its rows to an htmx request (`HX-Request`), so every URL can be bookmarked and
//! reloaded.
//!
//! Sign-in takes the admin token or a named token and gives a signed, stateless session cookie;
//! every form that changes state carries a CSRF token and is refused to a role that may not
//! change anything, whose pages show no such form ([`session`], [`crate::access`]); every answer carries a content security
//! policy that forbids framing ([`headers`]). Handlers call the admin API's own handlers
//! and store operations, so a page shows exactly what the API answers and validates input the
//! same way. Error pages are [`error`]'s.

pub mod assets;
pub mod chart;
pub mod docs;
pub mod error;
pub mod headers;
pub mod session;
pub mod view;

mod audit;
mod catalog;
mod dead_letters;
pub(crate) mod endpoints;
mod events;
mod inbox;
mod login;
mod overview;
mod subscriber_filter;
mod subscribers;

use axum::http::HeaderMap;
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::Router;

use crate::api::state::AppState;
use error::UiError;

/// The dashboard's routes, `/docs` and the redirect from `/`.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/", get(|| async { Redirect::to("/ui/") }))
        .route("/ui", get(|| async { Redirect::to("/ui/") }))
        .merge(assets::router())
        .merge(login::router())
        .merge(overview::router())
        .merge(endpoints::router())
        .merge(subscribers::router())
        .merge(events::router())
        .merge(catalog::router())
        .merge(dead_letters::router())
        .merge(audit::router())
        .merge(inbox::router())
        .merge(docs::router())
        .layer(axum::middleware::map_response(headers::secure))
        .with_state(state)
}

/// Renders a template into a response.
pub(crate) fn render(template: &impl askama::Template) -> Result<Response, UiError> {
    template
        .render()
        .map(|html| Html(html).into_response())
        .map_err(|e| UiError::Api(crate::api::error::ApiError::Internal(Box::new(e))))
}

/// One handler, two answers: the rows alone for htmx, the whole page otherwise.
pub(crate) fn page_or_rows(
    headers: &HeaderMap,
    page: &impl askama::Template,
    rows: &impl askama::Template,
) -> Result<Response, UiError> {
    if headers::is_htmx(headers) {
        render(rows)
    } else {
        render(page)
    }
}
