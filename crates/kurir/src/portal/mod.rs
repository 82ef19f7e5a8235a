//! The subscriber portal (issue 31), served under `/portal/`: each of the sender's customers
//! manages and debugs its own webhooks, from the same binary, with no token of its own.
//!
//! The sender's application asks `POST /v1/subscribers/{id}/portal-links` for a single-use link
//! (`crate::api::portal`) and sends its customer there, or frames it in its own settings page
//! (`KURIR_PORTAL_FRAME_ANCESTORS`). Opening the link starts a session ([`enter`], [`session`]):
//! a signed cookie naming a row that every request reads again. A session acts as an
//! [`crate::access::Actor`] scoped to its subscriber, through [`crate::access::Via::Portal`], and
//! every page calls the same scoped admin API handlers a subscriber token reaches, as that actor:
//! there is no second authorization path, and anything of another subscriber answers as a
//! missing id does. A read-only session is a viewer: the pages hide every control that changes
//! something, and the server refuses them (403).
//!
//! The stack is the dashboard's: askama templates (`templates/portal/`), htmx, kurir's
//! stylesheet with the portal's own few rules and the sender's accent colour ([`assets`]),
//! server-rendered, no frontend build. Headers (framing, no caching) are [`headers`]'s; error
//! pages [`error`]'s.
//!
//! Where the pages plug in: each section is a module with its own `router()` merged below, its
//! pages extending `templates/portal/base.html` with a [`view::Chrome`] and taking a
//! [`session::Visitor`] (which signs out a session no longer in force). [`endpoints`] is the
//! endpoints and their secrets; [`deliveries`] (the log, attempts, replay, test sends) and
//! [`verify`] (how to verify a signature) are the second half of the portal (issue 31's
//! deliveries, replay, test and "how to verify" pages) and start as placeholders. [`event_types`]
//! documents the catalog's types the subscriber may receive (issue 30). A form that
//! changes something carries `csrf` and is checked with [`session::Visitor::check`] against the
//! API route its handler calls.

pub mod assets;
pub mod error;
pub mod headers;
pub mod session;
pub mod view;

mod deliveries;
mod endpoints;
mod enter;
mod event_types;
mod test_send;
mod verify;

use axum::http::HeaderMap;
use axum::response::{Html, IntoResponse, Response};
use axum::Router;

use crate::api::state::AppState;
use error::PortalError;

pub use enter::ENTER_PATH;

/// The portal's routes, under `/portal/`, with its headers on every answer.
pub fn router(state: AppState) -> Router {
    Router::new()
        .merge(assets::router())
        .merge(enter::router())
        .merge(endpoints::router())
        .merge(deliveries::router())
        .merge(verify::router())
        .merge(event_types::router())
        .merge(test_send::router())
        .layer(axum::middleware::map_response_with_state(
            state.clone(),
            headers::secure,
        ))
        .with_state(state)
}

/// Whether the request came from htmx (which then gets a fragment, not the whole page).
pub(crate) fn is_htmx(headers: &HeaderMap) -> bool {
    crate::ui::headers::is_htmx(headers)
}

/// Renders a template into a response.
pub(crate) fn render(template: &impl askama::Template) -> Result<Response, PortalError> {
    template
        .render()
        .map(|html| Html(html).into_response())
        .map_err(|e| PortalError::Api(crate::api::error::ApiError::Internal(Box::new(e))))
}
