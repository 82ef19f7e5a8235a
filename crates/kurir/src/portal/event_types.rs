//! The event types the subscriber may receive (issue 30's read-only surface in the portal): each
//! (type, version) with its description, whether it is deprecated and what replaces it, the JSON
//! Schema of its `data` and its examples, pretty-printed and escaped by the template.
//!
//! Which types a subscriber may receive is one rule, [`receivable`], which the endpoint forms'
//! event type choices read too (`super::endpoints`): the sender's catalog, through the same API
//! handler as `GET /v1/event-types`. Nothing else reaches the page: the types of events the
//! catalog does not document (another subscriber's, or the operator's own) are never read here.

use askama::Template;
use axum::extract::State;
use axum::response::Response;
use axum::routing::get;
use axum::Router;

use super::error::PortalError;
use super::session::Visitor;
use super::view::Chrome;
use crate::api::event_types::{self as catalog_api, ListEventTypes};
use crate::api::extract::ApiQuery;
use crate::api::state::AppState;
use crate::catalog::EventTypeEntry;

/// Every catalog entry a subscriber may receive, in (type, version) order: the whole catalog,
/// read a page at a time through `GET /v1/event-types`'s handler.
pub(super) async fn receivable(state: &AppState) -> Result<Vec<EventTypeEntry>, PortalError> {
    let mut entries = Vec::new();
    let mut cursor = None;
    loop {
        let query = ListEventTypes {
            cursor,
            limit: Some(200),
        };
        let page = catalog_api::list(State(state.clone()), ApiQuery(query))
            .await?
            .0;
        entries.extend(page.data);
        cursor = page.next_cursor;
        if cursor.is_none() {
            return Ok(entries);
        }
    }
}

/// One entry as the page shows it.
struct Shown {
    entry: EventTypeEntry,
    /// The entry's anchor on the page, which a predecessor's "replaced by" links to.
    anchor: String,
    /// Its successor's anchor, when it names one.
    successor_anchor: Option<String>,
    /// The schema of `data`, pretty-printed.
    schema: Option<String>,
    /// Each example, pretty-printed.
    examples: Vec<String>,
}

/// The page anchor of (`event_type`, `version`): types hold only `[a-z0-9_.-]`.
fn anchor(event_type: &str, version: i32) -> String {
    format!("type-{event_type}-v{version}")
}

impl Shown {
    fn of(entry: EventTypeEntry) -> Self {
        let pretty = |v: &serde_json::Value| serde_json::to_string_pretty(v).unwrap_or_default();
        Self {
            anchor: anchor(&entry.event_type, entry.version),
            successor_anchor: (entry.spec.successor.as_ref())
                .map(|s| anchor(&s.event_type, s.version)),
            schema: entry.spec.schema.as_ref().map(pretty),
            examples: entry.spec.examples.iter().map(pretty).collect(),
            entry,
        }
    }
}

#[derive(Template)]
#[template(path = "portal/event_types.html")]
struct EventTypesPage {
    chrome: Chrome,
    entries: Vec<Shown>,
}

async fn page(State(state): State<AppState>, visitor: Visitor) -> Result<Response, PortalError> {
    let entries = receivable(&state).await?;
    super::render(&EventTypesPage {
        chrome: Chrome::new(&state, &visitor, "event-types", "Event types").await?,
        entries: entries.into_iter().map(Shown::of).collect(),
    })
}

/// The event types page's route.
pub fn router() -> Router<AppState> {
    Router::new().route("/portal/event-types", get(page))
}
