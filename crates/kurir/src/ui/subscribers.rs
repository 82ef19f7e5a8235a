//! Subscribers (issue 29): the list, by id and paged, searched by id or name; and one
//! subscriber's page with its endpoints and their health, its backlog and its recent failures,
//! and the controls that disable, enable or delete it. Every read and change goes through the
//! admin API's own handlers (the backlog through one store read of its endpoints' waiting
//! deliveries).
//!
//! A subscriber's id is the sender's own and may hold any visible ASCII character, so it is
//! percent-encoded in every link and form action ([`view::enc`], `urlencode_strict`).

use askama::Template;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Extension, Form, Router};
use chrono::Duration;
use serde::Deserialize;

use super::endpoints::Health;
use super::error::UiError;
use super::session::Session;
use super::view::{self, Chrome};
use crate::api::deliveries::{self as deliveries_api, DeliveryView, ListDeliveries};
use crate::api::endpoints::{self as endpoints_api, EndpointView, ListEndpoints};
use crate::api::extract::{ApiJson, ApiPath, ApiQuery};
use crate::api::state::AppState;
use crate::api::subscribers::{
    self as api, ListSubscribers, SubscriberActionView, SubscriberView, UpdateSubscriber,
};
use crate::store::subscribers::{valid_id, SubscriberBacklog};

/// How many of a subscriber's newest failed deliveries its page shows.
const RECENT_FAILURES: usize = 10;

/// How many of the newest audited actions on a subscriber its page shows.
const RECENT_ACTIONS: usize = 10;

#[derive(Default, Deserialize)]
struct ListQuery {
    /// An id, or a name: the subscriber with this id, and those of this name.
    q: Option<String>,
    cursor: Option<String>,
}

#[derive(Template)]
#[template(path = "subscribers.html")]
struct ListPage {
    chrome: Chrome,
    q: String,
    rows: Vec<SubscriberView>,
    next: Option<String>,
    first: bool,
}

/// The subscriber with the id `q` first (when there is one, and it is not deleted), then those
/// named `q`, a page at a time by id: both read through an index (the primary key, and the
/// `(name, id)` one).
async fn list(
    session: Session,
    State(state): State<AppState>,
    Query(q): Query<ListQuery>,
) -> Result<Response, UiError> {
    let search = view::given(&q.q);
    let cursor = view::given(&q.cursor);
    let query = ListSubscribers {
        name: search.clone(),
        cursor: cursor.clone(),
        limit: None,
    };
    let page = api::list(State(state.clone()), ApiQuery(query)).await?.0;
    let mut rows = page.data;
    if let (Some(id), None) = (&search, &cursor) {
        let by_id = match valid_id(id) {
            true => state.store.subscriber(id).await?,
            false => None,
        };
        if let Some(s) = by_id.filter(|s| s.deleted_at.is_none()) {
            if !rows.iter().any(|r| r.id == s.id) {
                rows.insert(0, s.into());
            }
        }
    }
    let next = page.next_cursor.map(|c| {
        let mut link = format!("/ui/subscribers?cursor={}", view::enc(&c));
        if let Some(s) = &search {
            link.push_str(&format!("&q={}", view::enc(s)));
        }
        link
    });
    super::render(&ListPage {
        chrome: Chrome::new(&session, "subscribers", "Subscribers"),
        q: search.unwrap_or_default(),
        rows,
        next,
        first: cursor.is_none(),
    })
}

/// One of the subscriber's endpoints with its health and backlog.
struct EndpointRow {
    e: EndpointView,
    health: Health,
    waiting: i64,
    retrying: i64,
}

#[derive(Template)]
#[template(path = "subscriber.html")]
struct SubscriberPage {
    chrome: Chrome,
    s: SubscriberView,
    /// Its id, percent-encoded for links and form actions.
    path_id: String,
    /// Its id, percent-encoded as a query's value: the links to the lists filtered by it.
    query_id: String,
    metadata: String,
    endpoints: Vec<EndpointRow>,
    /// Deliveries waiting for a first attempt or being made (`pending`, `processing`).
    waiting: i64,
    /// Deliveries to be retried.
    retrying: i64,
    failures: Vec<DeliveryView>,
    /// Who disabled, enabled or deleted it, newest first.
    history: Vec<SubscriberActionView>,
}

async fn show(
    session: Session,
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, UiError> {
    let actor = Extension(session.actor().clone());
    let s = api::show(State(state.clone()), actor.clone(), ApiPath(id.clone()))
        .await?
        .0;
    // Its endpoints, oldest first, through the API's listing: a query per page of them, not
    // one per endpoint.
    let mut endpoints = Vec::new();
    let mut cursor = None;
    loop {
        let query = ListEndpoints {
            cursor,
            limit: Some(200),
            subscriber_id: Some(id.clone()),
        };
        let page = endpoints_api::list(State(state.clone()), actor.clone(), ApiQuery(query))
            .await?
            .0;
        endpoints.extend(page.data);
        cursor = page.next_cursor;
        if cursor.is_none() {
            break;
        }
    }
    let health = state
        .store
        .endpoint_health(state.store.clock().now() - Duration::hours(1))
        .await?;
    let backlog = state.store.subscriber_backlog(&id).await?;
    let failures = recent_failures(&state, actor, &id).await?;
    let mut history = api::actions(State(state.clone()), ApiPath(id.clone()))
        .await?
        .0
        .data;
    history.truncate(RECENT_ACTIONS);
    let rows = endpoints
        .into_iter()
        .map(|e| EndpointRow {
            health: Health::of(health.iter().find(|h| h.endpoint_id == e.id)),
            waiting: waiting(&backlog, Some(&e.id)),
            retrying: backlog.count(Some(&e.id), "failed"),
            e,
        })
        .collect();
    super::render(&SubscriberPage {
        chrome: Chrome::new(&session, "subscribers", s.name.clone()),
        path_id: view::enc(&s.id),
        query_id: view::enc(&s.id),
        metadata: serde_json::to_string_pretty(&s.metadata).unwrap_or_default(),
        waiting: waiting(&backlog, None),
        retrying: backlog.count(None, "failed"),
        endpoints: rows,
        failures,
        history,
        s,
    })
}

fn waiting(backlog: &SubscriberBacklog, endpoint: Option<&str>) -> i64 {
    backlog.count(endpoint, "pending") + backlog.count(endpoint, "processing")
}

/// The subscriber's newest dead-lettered and retrying deliveries, newest first, through the
/// deliveries API's own listing filtered to the subscriber.
async fn recent_failures(
    state: &AppState,
    actor: Extension<crate::access::Actor>,
    subscriber: &str,
) -> Result<Vec<DeliveryView>, UiError> {
    let mut found = Vec::new();
    for status in ["dead_letter", "retrying"] {
        let query = ListDeliveries {
            status: Some(status.to_owned()),
            endpoint_id: None,
            subscriber_id: Some(subscriber.to_owned()),
            event_type: None,
            since: None,
            until: None,
            cursor: None,
            limit: Some(RECENT_FAILURES as u32),
        };
        let page =
            deliveries_api::list(State(state.clone()), actor.clone(), ApiQuery(query)).await?;
        found.extend(page.0.data);
    }
    found.sort_by_key(|d| std::cmp::Reverse((d.created_at, d.id)));
    found.truncate(RECENT_FAILURES);
    Ok(found)
}

#[derive(Deserialize)]
struct EnabledForm {
    csrf: String,
    enabled: String,
}

/// Disables or enables the subscriber, through the API's handler, which audits who did it.
async fn set_enabled(
    session: Session,
    State(state): State<AppState>,
    Path(id): Path<String>,
    Form(f): Form<EnabledForm>,
) -> Result<Response, UiError> {
    session.check_csrf(&f.csrf)?;
    let enabled = f.enabled == "true";
    let body = UpdateSubscriber {
        enabled: Some(enabled),
        ..UpdateSubscriber::default()
    };
    let actor = Extension(session.actor().clone());
    let _ = api::update(State(state), actor, ApiPath(id.clone()), ApiJson(body)).await?;
    Ok(Redirect::to(&format!("/ui/subscribers/{}", view::enc(&id))).into_response())
}

#[derive(Deserialize)]
struct DeleteForm {
    csrf: String,
    /// The subscriber's id typed again: deleting cannot be undone.
    confirm: Option<String>,
}

/// Deletes the subscriber once its id is typed again, through the API's handler, which audits
/// who did it.
async fn delete(
    session: Session,
    State(state): State<AppState>,
    Path(id): Path<String>,
    Form(f): Form<DeleteForm>,
) -> Result<Response, UiError> {
    session.check_csrf(&f.csrf)?;
    if f.confirm.as_deref().map(str::trim) != Some(id.as_str()) {
        return Err(crate::api::error::ApiError::field(
            "confirm",
            format!("type the subscriber's id, {id}, to delete it"),
        )
        .into());
    }
    let actor = Extension(session.actor().clone());
    let _ = api::delete(State(state), actor, ApiPath(id.clone())).await?;
    Ok(Redirect::to(&format!("/ui/subscribers/{}", view::enc(&id))).into_response())
}

/// The subscriber pages' routes.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/ui/subscribers", get(list))
        .route("/ui/subscribers/{id}", get(show))
        .route("/ui/subscribers/{id}/enabled", post(set_enabled))
        .route("/ui/subscribers/{id}/delete", post(delete))
}
