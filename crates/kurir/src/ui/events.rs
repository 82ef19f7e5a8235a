//! Events: search by event id, type, aggregate, subscriber and time (newest first, paged by cursor), and one
//! event's page: its payload, each delivery with the endpoint's URL, every attempt with its
//! status, timing, error and captured response body, and replay with a reason.

use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Extension, Form, Router};
use serde::Deserialize;

use super::error::{internal, UiError};
use super::session::Session;
use super::view::{self, Chrome};
use crate::api::events::{self as api, EventDetail, EventView, ListEvents};
use crate::api::extract::{ApiJson, ApiPath, ApiQuery};
use crate::api::replays::{replay_event, ReplayEvent};
use crate::api::state::AppState;

#[derive(Default, Deserialize)]
struct SearchForm {
    event_id: Option<String>,
    event_type: Option<String>,
    aggregate_id: Option<String>,
    subscriber_id: Option<String>,
    since: Option<String>,
    until: Option<String>,
    cursor: Option<String>,
}

#[derive(Template)]
#[template(path = "events.html")]
struct ListPage {
    chrome: Chrome,
    q: SearchForm,
    rows: String,
}

#[derive(Template)]
#[template(path = "events_rows.html")]
struct Rows {
    /// Each event with what became of its deliveries.
    events: Vec<(EventView, String)>,
    next: Option<String>,
    /// The subscriber searched by, when kurir has none of that id (no event then).
    unknown_subscriber: Option<String>,
}

/// The words of each delivery status in the outcome column, in the order they are listed.
const OUTCOME_WORDS: [(&str, &str, &str); 6] = [
    ("sent", "sent", "sent"),
    ("dead_letter", "dead letter", "dead letters"),
    ("failed", "retrying", "retrying"),
    ("pending", "pending", "pending"),
    ("processing", "sending", "sending"),
    ("cancelled", "cancelled", "cancelled"),
];

/// What became of an event's deliveries, e.g. "2 sent · 1 dead letter"; before fan-out, that
/// it waits for it; after, that no endpoint subscribed.
fn outcome(e: &EventView, counts: &[(String, String, i64)]) -> String {
    if e.refused_reason.is_some() {
        return "refused: never delivered".into();
    }
    if e.dispatched_at.is_none() {
        return "waiting to be sent out".into();
    }
    let parts: Vec<String> = OUTCOME_WORDS
        .iter()
        .filter_map(|(status, one, many)| {
            let n: i64 = counts
                .iter()
                .filter(|(id, s, _)| *id == e.event_id && s == status)
                .map(|(_, _, n)| n)
                .sum();
            (n > 0).then(|| format!("{n} {}", if n == 1 { one } else { many }))
        })
        .collect();
    if parts.is_empty() {
        "no endpoint subscribed".into()
    } else {
        parts.join(" · ")
    }
}

async fn list(
    session: Session,
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<SearchForm>,
) -> Result<Response, UiError> {
    if let Some(id) = view::given(&q.event_id) {
        return Ok(Redirect::to(&format!("/ui/events/{}", view::enc(&id))).into_response());
    }
    let query = ListEvents {
        event_type: view::given(&q.event_type),
        aggregate_id: view::given(&q.aggregate_id),
        since: view::form_time("since", &q.since)?,
        until: view::form_time("until", &q.until)?,
        cursor: view::given(&q.cursor),
        limit: None,
        subscriber_id: view::given(&q.subscriber_id),
    };
    let actor = Extension(session.actor().clone());
    let page = api::list(State(state.clone()), actor, ApiQuery(query))
        .await?
        .0;
    let unknown_subscriber =
        super::subscriber_filter::unknown(&state, &session, &q.subscriber_id, page.data.is_empty())
            .await?;
    let ids: Vec<String> = page.data.iter().map(|e| e.event_id.clone()).collect();
    let counts = state.store.delivery_outcomes(&ids).await?;
    let next = page.next_cursor.map(|c| {
        let keep = [
            ("event_type", &q.event_type),
            ("aggregate_id", &q.aggregate_id),
            ("subscriber_id", &q.subscriber_id),
            ("since", &q.since),
            ("until", &q.until),
        ];
        let mut link = format!("/ui/events?cursor={}", view::enc(&c));
        for (k, v) in keep {
            if let Some(v) = view::given(v) {
                link.push_str(&format!("&{k}={}", view::enc(&v)));
            }
        }
        link
    });
    let rows = Rows {
        events: page
            .data
            .into_iter()
            .map(|e| {
                let outcome = outcome(&e, &counts);
                (e, outcome)
            })
            .collect(),
        next,
        unknown_subscriber,
    };
    let page = ListPage {
        chrome: Chrome::new(&session, "events", "Events"),
        q,
        rows: rows.render().map_err(internal)?,
    };
    super::page_or_rows(&headers, &page, &rows)
}

#[derive(Template)]
#[template(path = "event.html")]
struct EventPage {
    chrome: Chrome,
    e: EventDetail,
    payload: String,
    /// The name of the subscriber it is addressed to (absent: none, or its row is gone).
    subscriber_name: Option<String>,
}

impl EventPage {
    /// Whether the event's replay form has anything to offer: a delivery of a live endpoint
    /// that did not succeed, or one that was sent (for the include-sent box).
    fn replayable(&self) -> bool {
        self.e.deliveries.iter().any(|d| {
            d.delivery.endpoint_deleted_at.is_none()
                && matches!(d.delivery.status.as_str(), "dead_letter" | "sent")
        })
    }

    /// One truthful count: every attempt recorded, and, after a replay, how many since.
    fn attempts_line(&self, d: &crate::api::events::DeliveryDetail) -> String {
        let total = d.attempts.len();
        let noun = if total == 1 { "attempt" } else { "attempts" };
        match d.attempts.last().map(|a| a.replay) {
            Some(replay) if replay > 0 => {
                let since = d.attempts.iter().filter(|a| a.replay == replay).count();
                format!("{total} {noun} in all, {since} since replay {replay}")
            }
            _ => format!("{total} {noun}"),
        }
    }

    fn url_of(&self, d: &crate::api::deliveries::DeliveryView) -> String {
        // The event's deliveries carry their endpoint's url (absent: its row deleted by hand).
        d.endpoint_url
            .clone()
            .unwrap_or_else(|| "(deleted endpoint)".to_owned())
    }
}

async fn show(
    session: Session,
    State(state): State<AppState>,
    Path(event_id): Path<String>,
) -> Result<Response, UiError> {
    let actor = Extension(session.actor().clone());
    let e = api::show(State(state.clone()), actor, ApiPath(event_id))
        .await?
        .0;
    let payload = view::pretty_json(e.event.data.get());
    let subscriber_name = match &e.event.subscriber_id {
        Some(id) => state.store.subscriber(id).await?.map(|s| s.name),
        None => None,
    };
    super::render(&EventPage {
        chrome: Chrome::new(&session, "events", e.event.event_id.clone()),
        e,
        payload,
        subscriber_name,
    })
}

/// The event page's replay forms: the whole event's (no endpoint, a checkbox for the sent
/// deliveries) and each delivery's (its endpoint; a sent one's form asks to re-send it).
#[derive(Deserialize)]
struct ReplayForm {
    csrf: String,
    endpoint_id: Option<String>,
    /// `true` from the checkbox or a sent delivery's form; absent when not ticked.
    include_sent: Option<String>,
    reason: String,
}

async fn replay(
    session: Session,
    State(state): State<AppState>,
    Path(event_id): Path<String>,
    Form(f): Form<ReplayForm>,
) -> Result<Response, UiError> {
    session.check_csrf(&f.csrf)?;
    let actor = Extension(session.actor().clone());
    let body = ReplayEvent {
        endpoint_id: view::given(&f.endpoint_id),
        include_sent: f.include_sent.as_deref() == Some("true"),
        reason: f.reason,
    };
    let _ = replay_event(
        State(state),
        actor,
        ApiPath(event_id.clone()),
        ApiJson(body),
    )
    .await?;
    Ok(Redirect::to(&format!("/ui/events/{}", view::enc(&event_id))).into_response())
}

/// The event pages' routes.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/ui/events", get(list))
        .route("/ui/events/{event_id}", get(show))
        .route("/ui/events/{event_id}/replay", post(replay))
}
