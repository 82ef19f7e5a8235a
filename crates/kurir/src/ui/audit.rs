//! The audit: who replayed what, why, and how many deliveries, newest first; and who retried
//! which inbox event (the inbox's own kind of replay), on a page of its own.

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
use crate::store::inbox_history::AuditedInboxRetry;

/// Inbox retries on one page of their audit.
const RETRIES_PER_PAGE: i64 = 50;

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

#[derive(Template)]
#[template(path = "audit_inbox.html")]
struct InboxRetriesPage {
    chrome: Chrome,
    rows: Vec<AuditedInboxRetry>,
    next: Option<String>,
}

#[derive(Deserialize)]
struct InboxRetriesQuery {
    /// The id of the last row of the page before (older rows have smaller ids).
    before: Option<String>,
}

/// Every source's inbox retries, newest first: who retried which event, from where and when.
async fn inbox_retries(
    session: Session,
    State(state): State<AppState>,
    Query(q): Query<InboxRetriesQuery>,
) -> Result<Response, UiError> {
    let before = match view::given(&q.before) {
        None => None,
        Some(b) => Some(b.parse::<i64>().map_err(|_| {
            UiError::Api(crate::api::error::ApiError::InvalidRequest(format!(
                "before must be a row id (a whole number), not {b:?}"
            )))
        })?),
    };
    let mut rows = state
        .store
        .recent_inbox_retries(before, RETRIES_PER_PAGE + 1)
        .await?;
    let next = (rows.len() > RETRIES_PER_PAGE as usize).then(|| {
        rows.truncate(RETRIES_PER_PAGE as usize);
        format!("/ui/audit/inbox?before={}", rows[rows.len() - 1].id)
    });
    super::render(&InboxRetriesPage {
        chrome: Chrome::new(&session, "audit", "Inbox retries"),
        rows,
        next,
    })
}

/// The audit pages' routes.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/ui/audit", get(audit))
        .route("/ui/audit/inbox", get(inbox_retries))
}
