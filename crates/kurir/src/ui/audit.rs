//! The replay audit: who replayed what, why, and how many deliveries, newest first.

use askama::Template;
use axum::extract::{Query, State};
use axum::response::Response;
use axum::routing::get;
use axum::{Extension, Router};
use serde::Deserialize;

use super::error::UiError;
use super::session::Session;
use super::view::{self, Chrome};
use crate::api::extract::ApiQuery;
use crate::api::replays::{self as api, ListReplays, ReplayView};
use crate::api::state::AppState;

#[derive(Template)]
#[template(path = "audit.html")]
struct AuditPage {
    chrome: Chrome,
    rows: Vec<ReplayView>,
    next: Option<String>,
}

#[derive(Deserialize)]
struct AuditQuery {
    cursor: Option<String>,
}

async fn audit(
    session: Session,
    State(state): State<AppState>,
    Query(q): Query<AuditQuery>,
) -> Result<Response, UiError> {
    let query = ListReplays {
        cursor: view::given(&q.cursor),
        limit: None,
        subscriber_id: None,
    };
    let actor = Extension(session.actor().clone());
    let page = api::list(State(state), actor, ApiQuery(query)).await?.0;
    super::render(&AuditPage {
        chrome: Chrome::new(&session, "audit", "Replay audit"),
        next: page
            .next_cursor
            .map(|c| format!("/ui/audit?cursor={}", view::enc(&c))),
        rows: page.data,
    })
}

/// The audit page's route.
pub fn router() -> Router<AppState> {
    Router::new().route("/ui/audit", get(audit))
}
