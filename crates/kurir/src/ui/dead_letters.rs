//! Dead letters: filtered by endpoint (its id, typed or followed from the endpoint's page: a
//! drop-down of every endpoint would read them all, and one of the first page would hide the
//! rest), by subscriber (its id, likewise, or followed from the subscriber's page), type and
//! time, newest first; and the bulk replay, which
//! shows how many deliveries match (a dry run) and asks for a reason before replaying them.
//! The replay is recorded in the audit, whose page it then shows. Each row has its own replay,
//! with the same dry run and reason, taken by the event's replay (also audited).

use askama::Template;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::{Extension, Form, Router};
use serde::Deserialize;

use super::error::internal;
use super::error::UiError;
use super::session::Session;
use super::view::{self, Chrome};
use crate::access::Action;
use crate::api::deliveries::{self as api, DeliveryView, ListDeliveries};
use crate::api::extract::{ApiJson, ApiPath, ApiQuery};
use crate::api::replays::{
    preview_event, replay_bulk, BulkReplay, EventReplayQuery, ReplayPreview, ReplayQuery,
};
use crate::api::state::AppState;
use crate::endpoint::EndpointId;

#[derive(Clone, Default, Deserialize)]
struct Filters {
    endpoint_id: Option<String>,
    subscriber_id: Option<String>,
    event_type: Option<String>,
    since: Option<String>,
    until: Option<String>,
    cursor: Option<String>,
}

impl Filters {
    /// The filter as a query string (without the cursor).
    fn query(&self) -> String {
        [
            ("endpoint_id", &self.endpoint_id),
            ("subscriber_id", &self.subscriber_id),
            ("event_type", &self.event_type),
            ("since", &self.since),
            ("until", &self.until),
        ]
        .iter()
        .filter_map(|(k, v)| view::given(v).map(|v| format!("{k}={}", view::enc(&v))))
        .collect::<Vec<_>>()
        .join("&")
    }

    fn replay_query(&self) -> Result<ReplayQuery, UiError> {
        Ok(ReplayQuery {
            status: Some("dead_letter".into()),
            endpoint_id: view::given(&self.endpoint_id),
            event_type: view::given(&self.event_type),
            since: view::form_time("since", &self.since)?,
            until: view::form_time("until", &self.until)?,
            subscriber_id: view::given(&self.subscriber_id),
        })
    }
}

#[derive(Template)]
#[template(path = "dead_letters.html")]
struct ListPage {
    chrome: Chrome,
    q: Filters,
    rows: String,
}

/// The rows and what depends on their filter: the pager and the bulk replay's link, so that
/// an htmx swap of the rows never leaves a link to another filter beside them.
#[derive(Template)]
#[template(path = "dead_letters_rows.html")]
struct Rows {
    rows: Vec<(DeliveryView, String)>,
    next: Option<String>,
    filter_query: String,
    /// Whether the session may replay (the link is shown only then).
    can_change: bool,
    /// The subscriber filtered by, when kurir has none of that id (the rows are empty then).
    unknown_subscriber: Option<String>,
}

async fn list(
    session: Session,
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<Filters>,
) -> Result<Response, UiError> {
    let replay = q.replay_query()?;
    let query = ListDeliveries {
        status: Some("dead_letter".into()),
        endpoint_id: replay.endpoint_id,
        event_type: replay.event_type,
        since: replay.since,
        until: replay.until,
        cursor: view::given(&q.cursor),
        limit: None,
        subscriber_id: replay.subscriber_id,
    };
    let actor = Extension(session.actor().clone());
    let page = api::list(State(state.clone()), actor, ApiQuery(query))
        .await?
        .0;
    let unknown_subscriber =
        super::subscriber_filter::unknown(&state, &session, &q.subscriber_id, page.data.is_empty())
            .await?;
    let filter_query = q.query();
    let next = page
        .next_cursor
        .map(|c| format!("/ui/dead-letters?cursor={}&{filter_query}", view::enc(&c)));
    let rows = page
        .data
        .into_iter()
        .map(|d| {
            // The listing joins each delivery's endpoint: its url, and whether it was deleted.
            let url = match (&d.endpoint_url, d.endpoint_deleted_at) {
                (Some(url), Some(_)) => format!("{url} (deleted)"),
                (url, None) => url.clone().unwrap_or_default(),
                (None, Some(_)) => String::new(),
            };
            (d, url)
        })
        .collect();
    let rows = Rows {
        rows,
        next,
        filter_query,
        can_change: session.may(Action::Change),
        unknown_subscriber,
    };
    let page = ListPage {
        chrome: Chrome::new(&session, "dead-letters", "Dead letters"),
        q,
        rows: rows.render().map_err(internal)?,
    };
    super::page_or_rows(&headers, &page, &rows)
}

#[derive(Template)]
#[template(path = "replay_confirm.html")]
struct ConfirmPage {
    chrome: Chrome,
    q: Filters,
    endpoint: String,
    matching: i64,
    filter_query: String,
}

/// The dry run: how many dead letters the replay would take, and the form asking why.
async fn confirm(
    session: Session,
    State(state): State<AppState>,
    Query(q): Query<Filters>,
) -> Result<Response, UiError> {
    session.require(Action::Change)?;
    let filter = q.replay_query()?.filter(&state, session.actor()).await?;
    let matching = state.store.count_replayable(&filter).await?;
    // The filter checked that the endpoint exists; read it again for its url only.
    let endpoint = match filter.endpoint_id.as_deref().map(EndpointId::parse) {
        Some(Ok(id)) => match state.store.get_endpoint(&id).await? {
            Some(e) => e.url,
            None => id.to_string(),
        },
        Some(Err(_)) | None => "every endpoint".to_owned(),
    };
    let filter_query = q.query();
    super::render(&ConfirmPage {
        chrome: Chrome::new(&session, "dead-letters", "Replay dead letters"),
        q,
        endpoint,
        matching,
        filter_query,
    })
}

/// Which dead letter a row's replay takes.
#[derive(Deserialize)]
struct OneQuery {
    event_id: String,
    endpoint_id: String,
}

#[derive(Template)]
#[template(path = "replay_one_confirm.html")]
struct OneConfirmPage {
    chrome: Chrome,
    event_id: String,
    endpoint_id: String,
    preview: ReplayPreview,
}

/// One row's dry run: the delivery its replay would send again (the API's event preview,
/// limited to its endpoint), and the form asking why, which the event's replay takes.
async fn confirm_one(
    session: Session,
    State(state): State<AppState>,
    Query(q): Query<OneQuery>,
) -> Result<Response, UiError> {
    session.require(Action::Change)?;
    let query = EventReplayQuery {
        endpoint_id: Some(q.endpoint_id.clone()),
        include_sent: None,
    };
    let actor = Extension(session.actor().clone());
    let preview = preview_event(
        State(state),
        actor,
        ApiPath(q.event_id.clone()),
        ApiQuery(query),
    )
    .await?
    .0;
    super::render(&OneConfirmPage {
        chrome: Chrome::new(&session, "dead-letters", "Replay a dead letter"),
        event_id: q.event_id,
        endpoint_id: q.endpoint_id,
        preview,
    })
}

#[derive(Deserialize)]
struct ReplayForm {
    csrf: String,
    reason: String,
    #[serde(flatten)]
    filters: Filters,
}

async fn replay(
    session: Session,
    State(state): State<AppState>,
    Form(f): Form<ReplayForm>,
) -> Result<Response, UiError> {
    session.check_csrf(&f.csrf)?;
    let q = f.filters.replay_query()?;
    let body = BulkReplay {
        status: q.status,
        endpoint_id: q.endpoint_id,
        event_type: q.event_type,
        since: q.since,
        until: q.until,
        subscriber_id: q.subscriber_id,
        reason: f.reason,
    };
    let actor = Extension(session.actor().clone());
    let _ = replay_bulk(State(state), actor, ApiJson(body)).await?;
    Ok(Redirect::to("/ui/audit").into_response())
}

/// The dead-letter pages' routes.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/ui/dead-letters", get(list))
        .route("/ui/dead-letters/replay", get(confirm).post(replay))
        .route("/ui/dead-letters/replay-one", get(confirm_one))
}
