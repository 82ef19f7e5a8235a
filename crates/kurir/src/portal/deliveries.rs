//! The subscriber's deliveries (issue 31): the log of its events' deliveries, filtered by
//! status, event type, endpoint and time and paged newest first; one event's page with each
//! delivery's attempts (status code, duration, error and captured response body); and replay,
//! of one delivery or of every dead letter of one endpoint since a time, always after a dry
//! run's count and a confirmation.
//!
//! Every read and every replay is the admin API's own handler called as the visitor's actor
//! (`GET /v1/deliveries`, `GET /v1/events/{event_id}`, the replay dry runs and
//! `POST /v1/events/{event_id}/replay`, `POST /v1/replays`): another subscriber's event or
//! endpoint answers 404 exactly as a missing one, and the replay audit records the portal
//! (`Via::Portal`) and the subscriber. Replay pages, dry runs included, are refused (403) to a
//! read-only session, which is shown none of their controls.

use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, Method};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::{Extension, Form, Router};
use chrono::{DateTime, Utc};
use serde::Deserialize;

use super::error::PortalError;
use super::session::Visitor;
use super::view::Chrome;
use crate::api::deliveries::{self as deliveries_api, DeliveryView, ListDeliveries};
use crate::api::endpoints::{self as endpoints_api, EndpointView, ListEndpoints};
use crate::api::events::{self as events_api, DeliveryDetail, EventDetail};
use crate::api::extract::{ApiJson, ApiPath, ApiQuery};
use crate::api::replays::{
    self as replays_api, BulkReplay, EventReplayQuery, ReplayEvent, ReplayPreview, ReplayQuery,
};
use crate::api::state::AppState;
use crate::ui::view::{enc, form_time, given, input_time, seg};

/// Rows per page of the log.
const PAGE: u32 = 50;

/// The statuses the filter offers, with their words.
pub const STATUSES: [(&str, &str); 6] = [
    ("dead_letter", "Failed (dead letter)"),
    ("retrying", "Retrying"),
    ("sent", "Delivered"),
    ("pending", "Waiting"),
    ("processing", "Being sent"),
    ("cancelled", "Cancelled"),
];

/// The words of a delivery status.
pub fn status_words(status: &str) -> &'static str {
    match status {
        "failed" => "Retrying",
        s => STATUSES
            .iter()
            .find(|(name, _)| *name == s)
            .map_or("Unknown", |(_, words)| words),
    }
}

/// The log's filters, as the form sends them.
#[derive(Default, Deserialize)]
struct LogQuery {
    status: Option<String>,
    event_type: Option<String>,
    endpoint_id: Option<String>,
    since: Option<String>,
    until: Option<String>,
    cursor: Option<String>,
}

impl LogQuery {
    /// The query string of these filters (without the cursor).
    fn filters(&self) -> String {
        [
            ("status", &self.status),
            ("event_type", &self.event_type),
            ("endpoint_id", &self.endpoint_id),
            ("since", &self.since),
            ("until", &self.until),
        ]
        .into_iter()
        .filter_map(|(name, value)| given(value).map(|v| format!("{name}={}", enc(&v))))
        .collect::<Vec<_>>()
        .join("&")
    }
}

#[derive(Template)]
#[template(path = "portal/deliveries.html")]
struct LogPage {
    chrome: Chrome,
    status: String,
    event_type: String,
    endpoint_id: String,
    since: String,
    until: String,
    endpoints: Vec<EndpointView>,
    rows: String,
}

#[derive(Template)]
#[template(path = "portal/deliveries_rows.html")]
struct LogRows {
    rows: Vec<DeliveryView>,
    next: Option<String>,
    filtered: bool,
}

/// The subscriber's live endpoints, oldest first, through the API's listing as the visitor.
async fn endpoints(state: &AppState, visitor: &Visitor) -> Result<Vec<EndpointView>, PortalError> {
    let mut all = Vec::new();
    let mut cursor = None;
    loop {
        let query = ListEndpoints {
            cursor,
            limit: Some(200),
            subscriber_id: None,
        };
        let page = endpoints_api::list(
            State(state.clone()),
            Extension(visitor.actor().clone()),
            ApiQuery(query),
        )
        .await?
        .0;
        all.extend(page.data);
        cursor = page.next_cursor;
        if cursor.is_none() {
            return Ok(all);
        }
    }
}

/// The log: a page of the subscriber's deliveries, newest first (the rows alone for htmx).
async fn log(
    State(state): State<AppState>,
    visitor: Visitor,
    headers: HeaderMap,
    Query(q): Query<LogQuery>,
) -> Result<Response, PortalError> {
    let since = form_time("since", &q.since)?;
    let until = form_time("until", &q.until)?;
    let query = ListDeliveries {
        status: given(&q.status),
        endpoint_id: given(&q.endpoint_id),
        event_type: given(&q.event_type),
        since,
        until,
        cursor: given(&q.cursor),
        limit: Some(PAGE),
        subscriber_id: None,
    };
    let page = deliveries_api::list(
        State(state.clone()),
        Extension(visitor.actor().clone()),
        ApiQuery(query),
    )
    .await?
    .0;
    let filters = q.filters();
    let next = page.next_cursor.map(|c| match filters.is_empty() {
        true => format!("/portal/deliveries?cursor={}", enc(&c)),
        false => format!("/portal/deliveries?{filters}&cursor={}", enc(&c)),
    });
    let rows = LogRows {
        rows: page.data,
        next,
        filtered: !filters.is_empty(),
    };
    if super::is_htmx(&headers) {
        return super::render(&rows);
    }
    super::render(&LogPage {
        chrome: Chrome::new(&state, &visitor, "deliveries", "Deliveries").await?,
        status: given(&q.status).unwrap_or_default(),
        event_type: given(&q.event_type).unwrap_or_default(),
        endpoint_id: given(&q.endpoint_id).unwrap_or_default(),
        since: input_time(&since),
        until: input_time(&until),
        endpoints: endpoints(&state, &visitor).await?,
        rows: rows.render().map_err(internal)?,
    })
}

fn internal(e: askama::Error) -> PortalError {
    PortalError::Api(crate::api::error::ApiError::Internal(Box::new(e)))
}

/// What the event page says after a replay.
#[derive(Default, Deserialize)]
struct EventNotice {
    replayed: Option<i64>,
}

#[derive(Template)]
#[template(path = "portal/event.html")]
struct EventPage {
    chrome: Chrome,
    e: EventDetail,
    payload: String,
    replayed: Option<i64>,
}

impl EventPage {
    fn url_of<'a>(&self, d: &'a DeliveryView) -> &'a str {
        d.endpoint_url.as_deref().unwrap_or("(endpoint removed)")
    }

    /// Whether this delivery may be replayed from here: it failed for good, or was delivered
    /// (sent again only when asked), and its endpoint still exists.
    fn replayable(&self, d: &DeliveryDetail) -> bool {
        matches!(d.delivery.status.as_str(), "dead_letter" | "sent")
            && d.delivery.endpoint_deleted_at.is_none()
    }
}

/// One event: its payload, and each delivery with every attempt.
async fn event(
    State(state): State<AppState>,
    visitor: Visitor,
    Path(event_id): Path<String>,
    Query(notice): Query<EventNotice>,
) -> Result<Response, PortalError> {
    let e = events_api::show(
        State(state.clone()),
        Extension(visitor.actor().clone()),
        ApiPath(event_id),
    )
    .await?
    .0;
    let title = format!("Event {}", e.event.event_id);
    super::render(&EventPage {
        chrome: Chrome::new(&state, &visitor, "deliveries", title).await?,
        payload: crate::ui::view::pretty_json(e.event.data.get()),
        e,
        replayed: notice.replayed,
    })
}

/// The dry run of one event's replay, as the form asks it.
#[derive(Deserialize)]
struct OneReplayQuery {
    endpoint_id: Option<String>,
    include_sent: Option<bool>,
}

#[derive(Template)]
#[template(path = "portal/replay_confirm.html")]
struct ConfirmPage {
    chrome: Chrome,
    preview: ReplayPreview,
    /// What is replayed, in words.
    what: String,
    /// Where the confirmation posts.
    action: String,
    /// The form's hidden fields: the filter, as the dry run was asked.
    fields: Vec<(&'static str, String)>,
    /// Where "cancel" goes.
    back: String,
}

/// The dry run of one event's replay (one delivery of it, or all that failed): the count, then
/// the confirmation form.
async fn one_preview(
    State(state): State<AppState>,
    visitor: Visitor,
    Path(event_id): Path<String>,
    Query(q): Query<OneReplayQuery>,
) -> Result<Response, PortalError> {
    visitor.allow(&Method::POST, &format!("/events/{event_id}/replay"))?;
    let endpoint_id = given(&q.endpoint_id);
    let include_sent = q.include_sent.unwrap_or(false);
    let preview = replays_api::preview_event(
        State(state.clone()),
        Extension(visitor.actor().clone()),
        ApiPath(event_id.clone()),
        ApiQuery(EventReplayQuery {
            endpoint_id: endpoint_id.clone(),
            include_sent: Some(include_sent),
        }),
    )
    .await?
    .0;
    let mut fields = vec![("include_sent", include_sent.to_string())];
    fields.extend(endpoint_id.map(|id| ("endpoint_id", id)));
    let what = match include_sent {
        true => format!("the delivery of event {event_id}, sent again"),
        false => format!("the failed deliveries of event {event_id}"),
    };
    super::render(&ConfirmPage {
        chrome: Chrome::new(&state, &visitor, "deliveries", "Replay").await?,
        preview,
        what,
        action: format!("/portal/events/{}/replay", seg(&event_id)),
        fields,
        back: format!("/portal/events/{}", seg(&event_id)),
    })
}

#[derive(Deserialize)]
struct OneReplayForm {
    csrf: String,
    endpoint_id: Option<String>,
    include_sent: Option<bool>,
    reason: String,
}

/// Replays one event's deliveries (or one of them), as confirmed; back to the event's page.
async fn one_replay(
    State(state): State<AppState>,
    visitor: Visitor,
    Path(event_id): Path<String>,
    Form(f): Form<OneReplayForm>,
) -> Result<Response, PortalError> {
    visitor.check(
        &f.csrf,
        &Method::POST,
        &format!("/events/{event_id}/replay"),
    )?;
    let (_, done) = replays_api::replay_event(
        State(state),
        Extension(visitor.actor().clone()),
        ApiPath(event_id.clone()),
        ApiJson(ReplayEvent {
            endpoint_id: given(&f.endpoint_id),
            include_sent: f.include_sent.unwrap_or(false),
            reason: f.reason,
        }),
    )
    .await?;
    let to = format!(
        "/portal/events/{}?replayed={}",
        seg(&event_id),
        done.0.replayed
    );
    Ok(Redirect::to(&to).into_response())
}

/// The filter of "every failed delivery since a time to one endpoint".
#[derive(Deserialize)]
struct BulkQuery {
    endpoint_id: String,
    since: Option<String>,
}

impl BulkQuery {
    fn filter(&self) -> Result<ReplayQuery, PortalError> {
        Ok(ReplayQuery {
            status: Some("dead_letter".into()),
            endpoint_id: Some(self.endpoint_id.clone()),
            since: form_time("since", &self.since)?,
            ..ReplayQuery::default()
        })
    }
}

/// The dry run of a bulk replay: how many of the endpoint's dead letters since the time it
/// would send again, then the confirmation form.
async fn bulk_preview(
    State(state): State<AppState>,
    visitor: Visitor,
    Query(q): Query<BulkQuery>,
) -> Result<Response, PortalError> {
    visitor.allow(&Method::POST, "/replays")?;
    let filter = q.filter()?;
    let since = filter.since;
    let preview = replays_api::preview(
        State(state.clone()),
        Extension(visitor.actor().clone()),
        ApiQuery(filter),
    )
    .await?
    .0;
    let what = match since {
        Some(at) => format!(
            "every failed delivery to endpoint {} since {} UTC",
            q.endpoint_id,
            crate::ui::view::time(at)
        ),
        None => format!("every failed delivery to endpoint {}", q.endpoint_id),
    };
    let mut fields = vec![("endpoint_id", q.endpoint_id.clone())];
    fields.extend(since.map(|at| ("since", at.to_rfc3339())));
    super::render(&ConfirmPage {
        chrome: Chrome::new(&state, &visitor, "deliveries", "Replay").await?,
        preview,
        what,
        action: "/portal/replay".into(),
        fields,
        back: format!(
            "/portal/deliveries?status=dead_letter&endpoint_id={}",
            enc(&q.endpoint_id)
        ),
    })
}

#[derive(Deserialize)]
struct BulkForm {
    csrf: String,
    endpoint_id: String,
    since: Option<DateTime<Utc>>,
    reason: String,
}

/// Replays the endpoint's dead letters since the time, as confirmed; back to the log of that
/// endpoint.
async fn bulk_replay(
    State(state): State<AppState>,
    visitor: Visitor,
    Form(f): Form<BulkForm>,
) -> Result<Response, PortalError> {
    visitor.check(&f.csrf, &Method::POST, "/replays")?;
    let (_, done) = replays_api::replay_bulk(
        State(state),
        Extension(visitor.actor().clone()),
        ApiJson(BulkReplay {
            status: Some("dead_letter".into()),
            endpoint_id: Some(f.endpoint_id.clone()),
            event_type: None,
            since: f.since,
            until: None,
            subscriber_id: None,
            reason: f.reason,
        }),
    )
    .await?;
    let to = format!(
        "/portal/replayed?count={}&endpoint_id={}",
        done.0.replayed,
        enc(&f.endpoint_id)
    );
    Ok(Redirect::to(&to).into_response())
}

#[derive(Deserialize)]
struct ReplayedQuery {
    count: i64,
    endpoint_id: String,
}

#[derive(Template)]
#[template(path = "portal/replayed.html")]
struct ReplayedPage {
    chrome: Chrome,
    count: i64,
    endpoint_id: String,
}

/// What a bulk replay did.
async fn replayed(
    State(state): State<AppState>,
    visitor: Visitor,
    Query(q): Query<ReplayedQuery>,
) -> Result<Response, PortalError> {
    super::render(&ReplayedPage {
        chrome: Chrome::new(&state, &visitor, "deliveries", "Replayed").await?,
        count: q.count,
        endpoint_id: q.endpoint_id,
    })
}

/// The deliveries' routes.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/portal/deliveries", get(log))
        .route("/portal/events/{event_id}", get(event))
        .route(
            "/portal/events/{event_id}/replay",
            get(one_preview).post(one_replay),
        )
        .route("/portal/replay", get(bulk_preview).post(bulk_replay))
        .route("/portal/replayed", get(replayed))
}
