//! The inbox gateway: its sources with their events per status, one source's events (by status,
//! newest first, paged), one event with its history (every forward attempt and every retry, in
//! the order they happened), and retrying a failed one.

use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use chrono::{DateTime, Utc};
use serde::Deserialize;

use super::error::internal;
use super::error::UiError;
use super::session::Session;
use super::view::{self, Chrome};
use crate::access::Action;
use crate::api::extract::{ApiPath, ApiQuery};
use crate::api::inbox_events::{
    self as api, InboxAttemptView, InboxEventDetail, InboxEventView, InboxRetryView,
    ListInboxEvents,
};
use crate::api::sources::SourceView;
use crate::api::state::AppState;
use crate::api::stats::{InboxCounts, InboxStats};

#[derive(Template)]
#[template(path = "inbox.html")]
struct SourcesPage {
    chrome: Chrome,
    sources: Vec<(SourceView, InboxCounts)>,
}

async fn sources(session: Session, State(state): State<AppState>) -> Result<Response, UiError> {
    let list = crate::api::sources::list(State(state.clone())).await?.0;
    let stats = InboxStats::new(state.store.inbox_counts().await?, state.store.clock().now());
    let sources = list
        .into_iter()
        .map(|s| {
            let counts = stats
                .sources
                .iter()
                .find(|c| c.source == s.name)
                .map(|c| c.counts.clone())
                .unwrap_or_default();
            (s, counts)
        })
        .collect();
    super::render(&SourcesPage {
        chrome: Chrome::new(&session, "inbox", "Inbox"),
        sources,
    })
}

#[derive(Default, Deserialize)]
struct EventsQuery {
    status: Option<String>,
    cursor: Option<String>,
}

#[derive(Template)]
#[template(path = "inbox_source.html")]
struct SourcePage {
    chrome: Chrome,
    name: String,
    status: String,
    rows: String,
}

#[derive(Template)]
#[template(path = "inbox_rows.html")]
struct Rows {
    name: String,
    csrf: String,
    /// Whether the session may retry (the buttons are shown only then).
    can_change: bool,
    events: Vec<InboxEventView>,
    next: Option<String>,
}

async fn source(
    session: Session,
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(name): Path<String>,
    Query(q): Query<EventsQuery>,
) -> Result<Response, UiError> {
    let status = view::given(&q.status);
    let query = ListInboxEvents {
        status: status.clone(),
        cursor: view::given(&q.cursor),
        ..ListInboxEvents::default()
    };
    let page = api::list(State(state), ApiPath(name.clone()), ApiQuery(query))
        .await?
        .0;
    let status = status.unwrap_or_default();
    let next = page.next_cursor.map(|c| {
        format!(
            "/ui/inbox/{}?status={}&cursor={}",
            view::enc(&name),
            view::enc(&status),
            view::enc(&c)
        )
    });
    let rows = Rows {
        name: name.clone(),
        csrf: session.csrf().to_owned(),
        can_change: session.may(Action::Change),
        events: page.data,
        next,
    };
    let page = SourcePage {
        chrome: Chrome::new(&session, "inbox", format!("Inbox: {name}")),
        name,
        status,
        rows: rows.render().map_err(internal)?,
    };
    super::page_or_rows(&headers, &page, &rows)
}

/// One line of an event's history: a forward attempt or an operator's retry.
struct HistoryLine {
    at: DateTime<Utc>,
    /// `Some` for an attempt.
    attempt: Option<InboxAttemptView>,
    /// `Some` for a retry: who and from where.
    retry: Option<InboxRetryView>,
    /// How many retries came before this line (a retry counts itself).
    round: usize,
}

/// Attempts and retries in the order they happened (a retry before an attempt of the same
/// millisecond: the retry is what let it start).
fn history(detail: &mut InboxEventDetail) -> Vec<HistoryLine> {
    let mut lines: Vec<HistoryLine> = detail
        .retries
        .drain(..)
        .map(|r| HistoryLine {
            at: r.created_at,
            attempt: None,
            retry: Some(r),
            round: 0,
        })
        .chain(detail.history.drain(..).map(|a| HistoryLine {
            at: a.started_at,
            attempt: Some(a),
            retry: None,
            round: 0,
        }))
        .collect();
    lines.sort_by_key(|l| (l.at, l.attempt.is_some()));
    let mut round = 0;
    for line in &mut lines {
        round += usize::from(line.retry.is_some());
        line.round = round;
    }
    lines
}

#[derive(Template)]
#[template(path = "inbox_event.html")]
struct EventPage {
    chrome: Chrome,
    name: String,
    event: InboxEventView,
    lines: Vec<HistoryLine>,
}

impl EventPage {
    /// Every forward attempt made, across retries: the truthful count.
    fn attempt_count(&self) -> usize {
        self.lines.iter().filter(|l| l.attempt.is_some()).count()
    }

    fn retry_count(&self) -> usize {
        self.lines.iter().filter(|l| l.retry.is_some()).count()
    }
}

async fn event(
    session: Session,
    State(state): State<AppState>,
    Path((name, event_id)): Path<(String, String)>,
) -> Result<Response, UiError> {
    let mut detail = api::get_one(State(state), ApiPath((name.clone(), event_id)))
        .await?
        .0;
    let lines = history(&mut detail);
    let event = detail.event;
    super::render(&EventPage {
        chrome: Chrome::new(&session, "inbox", format!("Inbox event {}", event.event_id)),
        name,
        event,
        lines,
    })
}

#[derive(Deserialize)]
struct CsrfForm {
    csrf: String,
}

/// Retries a failed event, then shows its page, whose history now names the retry.
async fn retry(
    session: Session,
    State(state): State<AppState>,
    Path((name, event_id)): Path<(String, String)>,
    Form(f): Form<CsrfForm>,
) -> Result<Response, UiError> {
    session.check_csrf(&f.csrf)?;
    api::retry_event(&state, session.actor(), &name, &event_id).await?;
    let to = format!(
        "/ui/inbox/{}/events/{}",
        view::seg(&name),
        view::seg(&event_id)
    );
    Ok(Redirect::to(&to).into_response())
}

/// The inbox pages' routes.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/ui/inbox", get(sources))
        .route("/ui/inbox/{name}", get(source))
        .route("/ui/inbox/{name}/events/{event_id}", get(event))
        .route("/ui/inbox/{name}/events/{event_id}/retry", post(retry))
}
