//! The event catalog, read-only: every (type, version) with whether it has a schema, whether it
//! is deprecated, and how many events of it were written in the last 24 hours; one entry's page
//! with its description, schema and examples. The refused events' count per type, and the
//! recheck that delivers those that pass now (the API's `POST /v1/events/recheck`).

use std::collections::{BTreeMap, HashMap};

use askama::Template;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use serde::Deserialize;

use super::error::UiError;
use super::session::Session;
use super::view::{self, Chrome};
use crate::api::error::ApiError;
use crate::api::extract::ApiJson;
use crate::api::recheck::{recheck as api_recheck, RecheckRequest};
use crate::api::state::AppState;
use crate::catalog::{EventTypeEntry, EventTypeRef};

/// How far back the per-version counts look.
const COUNT_WINDOW: chrono::TimeDelta = chrono::TimeDelta::hours(24);

/// One row of the catalog page.
struct Row {
    entry: EventTypeEntry,
    recent: i64,
}

#[derive(Template)]
#[template(path = "catalog.html")]
struct CatalogPage {
    chrome: Chrome,
    mode: &'static str,
    rows: Vec<Row>,
    refused: BTreeMap<String, i64>,
    refused_total: i64,
    rechecked: Option<String>,
}

#[derive(Deserialize)]
struct CatalogQuery {
    rechecked: Option<String>,
}

async fn catalog(
    session: Session,
    State(state): State<AppState>,
    Query(q): Query<CatalogQuery>,
) -> Result<Response, UiError> {
    let entries = state
        .store
        .all_event_types()
        .await
        .map_err(ApiError::from)?;
    let recent = recent_counts(&state).await?;
    let refused = state
        .store
        .refused_by_type()
        .await
        .map_err(ApiError::from)?;
    let rows = entries
        .into_iter()
        .map(|entry| Row {
            recent: recent.get(&entry.key()).copied().unwrap_or(0),
            entry,
        })
        .collect();
    super::render(&CatalogPage {
        chrome: Chrome::new(&session, "catalog", "Event types"),
        mode: state.store.catalog_mode().as_str(),
        rows,
        refused_total: refused.values().sum(),
        refused,
        rechecked: view::given(&q.rechecked),
    })
}

async fn recent_counts(state: &AppState) -> Result<HashMap<EventTypeRef, i64>, UiError> {
    let since = state.store.clock().now() - COUNT_WINDOW;
    Ok(state
        .store
        .events_per_version(since)
        .await
        .map_err(ApiError::from)?)
}

#[derive(Template)]
#[template(path = "catalog_entry.html")]
struct EntryPage {
    chrome: Chrome,
    entry: EventTypeEntry,
    recent: i64,
    schema: Option<String>,
    examples: Vec<String>,
}

async fn entry(
    session: Session,
    State(state): State<AppState>,
    Path((event_type, version)): Path<(String, String)>,
) -> Result<Response, UiError> {
    let api = crate::api::event_types::show(
        State(state.clone()),
        crate::api::extract::ApiPath((event_type, version)),
    );
    let entry = api.await?.0;
    let recent = recent_counts(&state)
        .await?
        .get(&entry.key())
        .copied()
        .unwrap_or(0);
    let pretty = |v: &serde_json::Value| serde_json::to_string_pretty(v).unwrap_or_default();
    super::render(&EntryPage {
        chrome: Chrome::new(&session, "catalog", entry.key().to_string()),
        schema: entry.spec.schema.as_ref().map(pretty),
        examples: entry.spec.examples.iter().map(pretty).collect(),
        recent,
        entry,
    })
}

#[derive(Deserialize)]
struct RecheckForm {
    csrf: String,
    event_type: Option<String>,
}

async fn recheck(
    session: Session,
    State(state): State<AppState>,
    Form(f): Form<RecheckForm>,
) -> Result<Response, UiError> {
    session.check_csrf(&f.csrf)?;
    let body = RecheckRequest {
        event_type: view::given(&f.event_type),
    };
    let done = api_recheck(State(state), Some(ApiJson(body))).await?.0;
    let message = format!(
        "Checked {} refused events: {} now pass and were delivered, {} still refused.",
        done.checked, done.delivered, done.still_refused
    );
    Ok(Redirect::to(&format!(
        "/ui/event-types?rechecked={}",
        view::enc(&message)
    ))
    .into_response())
}

/// The catalog pages' routes.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/ui/event-types", get(catalog))
        .route("/ui/event-types/{event_type}/{version}", get(entry))
        .route("/ui/events/recheck", post(recheck))
}
