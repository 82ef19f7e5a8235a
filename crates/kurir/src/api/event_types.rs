//! `/v1/event-types`: the event catalog (issue 30). One entry per (event type, version): its
//! description, the JSON Schema of its `data`, examples, and whether it is deprecated.
//!
//! `PUT` writes an entry (created `201`, replaced `200`; the same content again changes
//! nothing), `GET` lists or reads them, `DELETE` removes one unless events of that version are
//! still to be delivered or another entry names it as its successor (`409`). A schema that is
//! not valid draft 2020-12, or an example failing its own schema, is a `400` naming the field.
//! `GET /v1/event-types/openapi.json` exports the catalog for subscribers (see
//! [`crate::catalog::openapi`]).

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;

use super::error::{ApiError, ErrorBody};
use super::extract::{ApiJson, ApiPath, ApiQuery};
use super::page::{CursorKey, Page, PageRequest};
use crate::api::state::AppState;
use crate::catalog::{openapi, CatalogMode, EntrySpec, EventTypeEntry, EventTypeRef};
use crate::store::PutOutcome;

impl CursorKey for EventTypeRef {
    fn to_text(&self) -> String {
        format!("{}@{}", self.event_type, self.version)
    }

    fn from_text(text: &str) -> Option<Self> {
        let (event_type, version) = text.rsplit_once('@')?;
        let key = EventTypeRef {
            event_type: event_type.to_owned(),
            version: version.parse().ok()?,
        };
        key.check().is_ok().then_some(key)
    }
}

/// The key a path names; a version that is not a whole number of 1 or more is a `400`.
fn key_of(event_type: String, version: &str) -> Result<EventTypeRef, ApiError> {
    let version = version
        .parse()
        .map_err(|_| ApiError::field("version", format!("'{version}' is not a whole number")))?;
    let key = EventTypeRef {
        event_type,
        version,
    };
    key.check()?;
    Ok(key)
}

/// Query of `GET /v1/event-types`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListEventTypes {
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
    /// Rows per page, 1 to 200 (default 50).
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<u32>,
}

/// Lists the catalog's entries in (type, version) order.
#[utoipa::path(get, path = "/v1/event-types", operation_id = "list_event_types", tag = "event types",
    params(ListEventTypes),
    responses((status = 200, description = "A page of entries", body = Page<EventTypeEntry>),
              (status = 400, description = "A parameter is invalid", body = ErrorBody)))]
pub async fn list(
    State(state): State<AppState>,
    ApiQuery(q): ApiQuery<ListEventTypes>,
) -> Result<Json<Page<EventTypeEntry>>, ApiError> {
    let page = PageRequest::<EventTypeRef>::new("event-types", q.cursor.as_deref(), q.limit)?;
    let rows = (state.store)
        .event_type_page(page.past.as_ref(), page.fetch())
        .await?;
    Ok(Json(page.page(rows, EventTypeEntry::key, |e| e)))
}

/// Reads one entry.
#[utoipa::path(get, path = "/v1/event-types/{event_type}/versions/{version}", operation_id = "get_event_type",
    tag = "event types",
    params(("event_type" = String, Path, pattern = "^[a-z0-9_-]+(\\.[a-z0-9_-]+)*$", max_length = 255, description = "Event type, e.g. order.paid"),
           ("version" = i32, Path, minimum = 1, maximum = 2147483647, description = "Payload version, 1 or more")),
    responses((status = 200, description = "The entry", body = EventTypeEntry),
              (status = 404, description = "No such entry", body = ErrorBody)))]
pub async fn show(
    State(state): State<AppState>,
    ApiPath((event_type, version)): ApiPath<(String, String)>,
) -> Result<Json<EventTypeEntry>, ApiError> {
    let key = key_of(event_type, &version)?;
    let entry = state.store.event_type(&key).await?;
    entry.map(Json).ok_or_else(|| not_found(&key))
}

fn not_found(key: &EventTypeRef) -> ApiError {
    ApiError::NotFound(format!("{key} is not in the event catalog"))
}

/// Writes an entry: created, or replaced as a whole. The schema must be valid JSON Schema
/// draft 2020-12, each example must pass it, and a successor must already be in the catalog.
#[utoipa::path(put, path = "/v1/event-types/{event_type}/versions/{version}", operation_id = "put_event_type",
    tag = "event types", request_body = EntrySpec,
    params(("event_type" = String, Path, pattern = "^[a-z0-9_-]+(\\.[a-z0-9_-]+)*$", max_length = 255, description = "Event type, e.g. order.paid"),
           ("version" = i32, Path, minimum = 1, maximum = 2147483647, description = "Payload version, 1 or more")),
    responses((status = 201, description = "Created", body = EventTypeEntry),
              (status = 200, description = "Replaced, or already so (nothing changed: updated_at stays)", body = EventTypeEntry),
              (status = 400, description = "The entry is invalid: the field is named (schema, examples[1], successor, …)", body = ErrorBody)))]
pub async fn put(
    State(state): State<AppState>,
    ApiPath((event_type, version)): ApiPath<(String, String)>,
    ApiJson(spec): ApiJson<EntrySpec>,
) -> Result<Response, ApiError> {
    let key = key_of(event_type, &version)?;
    spec.check(&key)?;
    if let Some(successor) = &spec.successor {
        if state.store.event_type(successor).await?.is_none() {
            return Err(ApiError::field(
                "successor",
                format!("{successor} is not in the event catalog: write it first"),
            ));
        }
    }
    let outcome = state.store.put_event_type(&key, &spec).await?;
    let status = match &outcome {
        PutOutcome::Created(_) => StatusCode::CREATED,
        PutOutcome::Updated(_) | PutOutcome::Unchanged(_) => StatusCode::OK,
    };
    if !matches!(outcome, PutOutcome::Unchanged(_)) {
        tracing::info!(event_type = %key.event_type, version = key.version, "event catalog entry written");
    }
    Ok((status, Json(outcome.entry().clone())).into_response())
}

/// Removes an entry, unless events of that version are not delivered yet or another entry
/// names it as its successor.
#[utoipa::path(delete, path = "/v1/event-types/{event_type}/versions/{version}", operation_id = "delete_event_type",
    tag = "event types",
    params(("event_type" = String, Path, pattern = "^[a-z0-9_-]+(\\.[a-z0-9_-]+)*$", max_length = 255, description = "Event type, e.g. order.paid"),
           ("version" = i32, Path, minimum = 1, maximum = 2147483647, description = "Payload version, 1 or more")),
    responses((status = 204, description = "Removed"),
              (status = 404, description = "No such entry", body = ErrorBody),
              (status = 409, description = "Events of this version are still to be delivered (to be fanned out, refused, or with deliveries not yet sent), or another entry names it as its successor", body = ErrorBody)))]
pub async fn delete(
    State(state): State<AppState>,
    ApiPath((event_type, version)): ApiPath<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let key = key_of(event_type, &version)?;
    if state.store.event_type(&key).await?.is_none() {
        return Err(not_found(&key));
    }
    let in_use = |message: String| ApiError::Conflict {
        code: "event_type_in_use",
        message,
    };
    if let Some(p) = state.store.predecessors(&key).await?.first() {
        return Err(in_use(format!(
            "{p} names {key} as its successor: change or remove {p} first"
        )));
    }
    let undelivered = state.store.undelivered_events(&key).await?;
    if undelivered > 0 {
        return Err(in_use(format!(
            "{undelivered} events of {key} are not delivered yet (still to be fanned out, \
             refused, or with a delivery not sent); delete the entry once they are"
        )));
    }
    if !state.store.delete_event_type(&key).await? {
        return Err(not_found(&key));
    }
    tracing::info!(event_type = %key.event_type, version = key.version, "event catalog entry deleted");
    Ok(StatusCode::NO_CONTENT)
}

/// The catalog as an OpenAPI 3.1 document for subscribers: one webhook per (type, version),
/// with its schema, examples and the headers kurir sends.
#[utoipa::path(get, path = "/v1/event-types/openapi.json", operation_id = "export_event_types",
    tag = "event types",
    responses((status = 200, description = "OpenAPI 3.1 document with one entry under webhooks per (type, version)", content_type = "application/json")))]
pub async fn export(State(state): State<AppState>) -> Result<Json<serde_json::Value>, ApiError> {
    let entries = state.store.all_event_types().await?;
    Ok(Json(openapi::document(&entries, "Webhooks")))
}

/// Checks an endpoint's filter against the catalog: the patterns that match no catalogued
/// type, as warnings; in `strict`, such a filter is a `400` naming them. Nothing is said while
/// the catalog is off, or empty and not strict (it is not in use).
pub(super) async fn check_filter(
    state: &AppState,
    filter: &crate::endpoint::EventFilter,
) -> Result<Vec<String>, ApiError> {
    let mode = state.store.catalog_mode();
    if mode == CatalogMode::Off || filter.patterns().is_empty() {
        return Ok(Vec::new());
    }
    let mut types: Vec<String> = (state.store.all_event_types().await?)
        .into_iter()
        .map(|e| e.event_type)
        .collect();
    types.dedup();
    if types.is_empty() && mode != CatalogMode::Strict {
        return Ok(Vec::new());
    }
    let unmatched = crate::catalog::unmatched_patterns(filter, &types);
    if unmatched.is_empty() {
        return Ok(Vec::new());
    }
    let list = unmatched.join("', '");
    if mode == CatalogMode::Strict {
        return Err(ApiError::field(
            "event_types",
            format!(
                "'{list}' matches no event type in the event catalog \
                 (KURIR_EVENT_CATALOG=strict refuses a filter that subscribes to nothing)"
            ),
        ));
    }
    Ok(vec![format!(
        "event_types: '{list}' matches no event type in the event catalog; \
         this endpoint receives nothing through it until such a type is catalogued"
    )])
}

/// The routes of this resource.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/event-types", get(list))
        .route("/event-types/openapi.json", get(export))
        .route(
            "/event-types/{event_type}/versions/{version}",
            get(show).put(put).delete(delete),
        )
}
