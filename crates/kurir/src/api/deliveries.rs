//! `/v1/deliveries`: the delivery listing (e.g. `status=dead_letter`, the reconciliation list of
//! undelivered events), and the delivery and attempt views the event resource shares.

use axum::extract::State;
use axum::routing::get;
use axum::{Extension, Json, Router};
use chrono::{DateTime, Utc};
use kurir_core::event::EventType;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::auth::Actor;
use super::error::{ApiError, ErrorBody};
use super::extract::ApiQuery;
use super::page::{Page, PageRequest};
use crate::access::Listing;
use crate::api::state::AppState;
use crate::delivery::{AttemptRecord, DeliveryRecord, DeliveryStatus, Trigger};
use crate::endpoint::EndpointId;
use crate::store::breaker::StoredCircuit;
use crate::store::DeliveryQuery;
use kurir_core::breaker::State as CircuitState;

/// A delivery: one event to one endpoint.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeliveryView {
    /// Its id.
    pub id: i64,
    /// The event.
    pub event_id: String,
    /// The event's type.
    pub event_type: String,
    /// The endpoint.
    pub endpoint_id: String,
    /// The endpoint's URL (absent only when its row was deleted by hand, in SQL).
    pub endpoint_url: Option<String>,
    /// When the endpoint was deleted (absent: it still exists). Its deliveries stay until
    /// retention takes them; those not yet made were cancelled.
    pub endpoint_deleted_at: Option<DateTime<Utc>>,
    /// `pending`, `processing`, `sent`, `retrying` (the last attempt failed, another is
    /// scheduled; called `failed` before, which the `status` filter still accepts),
    /// `dead_letter` or `cancelled` (its endpoint was deleted before it was delivered).
    pub status: String,
    /// Attempts made since it was created or last replayed.
    pub attempt_count: u32,
    /// When the next attempt is due (pending and failed deliveries only). While `held`, this
    /// is when it was scheduled: it waits for the circuit to close (see `next_probe_at`).
    pub next_attempt_at: Option<DateTime<Utc>>,
    /// The state of the endpoint's circuit breaker: `closed`, `open` or `half_open`.
    #[schema(example = "closed")]
    pub circuit_state: &'static str,
    /// Whether it waits (pending or failed) on a circuit that is not closed: nothing is sent
    /// to the endpoint but one probe until the circuit closes.
    pub held: bool,
    /// When the endpoint's circuit is open: when its next probe may be sent.
    pub next_probe_at: Option<DateTime<Utc>>,
    /// The last HTTP status received.
    pub last_status_code: Option<u16>,
    /// The last error.
    pub last_error: Option<String>,
    /// When a 2xx was received.
    pub sent_at: Option<DateTime<Utc>>,
    /// When the relay created it.
    pub created_at: DateTime<Utc>,
}

impl DeliveryView {
    /// The view of `d`, whose event has `event_type`, with its endpoint's circuit among
    /// `circuits` (none: closed).
    pub fn new(d: DeliveryRecord, event_type: String, circuits: &[StoredCircuit]) -> Self {
        let due = matches!(d.status, DeliveryStatus::Pending | DeliveryStatus::Failed);
        let circuit = circuits
            .iter()
            .find(|c| c.endpoint_id == d.endpoint_id)
            .map(|c| c.circuit);
        let state = circuit.map_or(CircuitState::Closed, |c| c.state);
        Self {
            circuit_state: state.as_str(),
            held: due && state != CircuitState::Closed,
            next_probe_at: circuit.and_then(|c| c.next_probe_at),
            id: d.id,
            event_id: d.event_id,
            event_type,
            endpoint_id: d.endpoint_id,
            endpoint_url: d.endpoint_url,
            endpoint_deleted_at: d.endpoint_deleted_at,
            status: d.status.name().to_owned(),
            attempt_count: d.attempt_count,
            next_attempt_at: due.then_some(d.available_at),
            last_status_code: d.last_status_code,
            last_error: d.last_error,
            sent_at: d.sent_at,
            created_at: d.created_at,
        }
    }
}

/// One HTTP attempt.
#[derive(Debug, Serialize, ToSchema)]
pub struct AttemptView {
    /// Its place in the delivery's whole history, from 1 (never restarts).
    pub number: u32,
    /// Which replay it belongs to: 0 for the attempts before any replay, then 1, 2, … for
    /// those of the first, second, … replay.
    pub replay: u32,
    /// Its number within its run: the attempt count, which restarts at 1 after a replay.
    pub attempt: u32,
    /// `scheduled` or `replay`.
    pub trigger: String,
    /// When the request started.
    pub started_at: DateTime<Utc>,
    /// How long it took.
    pub duration_ms: i64,
    /// The HTTP status, when a response arrived.
    pub status_code: Option<u16>,
    /// What went wrong, when something did.
    pub error: Option<String>,
    /// At most the first 4 KiB of the response body.
    pub response_body: Option<String>,
}

impl AttemptView {
    /// A delivery's attempts, oldest first, numbered: a replay's first attempt is the one its
    /// replay made (trigger `replay`), so each such attempt starts the next run.
    pub fn history(records: Vec<AttemptRecord>) -> Vec<AttemptView> {
        let mut replay = 0;
        (1..)
            .zip(records)
            .map(|(number, a)| {
                if a.trigger == Trigger::Replay {
                    replay += 1;
                }
                AttemptView::new(a, number, replay)
            })
            .collect()
    }

    fn new(a: AttemptRecord, number: u32, replay: u32) -> Self {
        Self {
            number,
            replay,
            attempt: a.attempt,
            trigger: match a.trigger {
                Trigger::Scheduled => "scheduled",
                Trigger::Replay => "replay",
            }
            .to_owned(),
            started_at: a.started_at,
            duration_ms: a.duration_ms,
            status_code: a.status_code,
            error: a.error,
            response_body: a.response_body,
        }
    }
}

/// Parses a `status` filter.
pub(super) fn parse_status(status: Option<&str>) -> Result<Option<DeliveryStatus>, ApiError> {
    status
        .map(|s| {
            s.parse().map_err(|e: crate::delivery::UnknownStatus| {
                ApiError::field("status", e.to_string())
            })
        })
        .transpose()
}

/// Checks an `event_type` filter: a type no event can have is a mistake worth saying.
pub(super) fn check_event_type(event_type: Option<&str>) -> Result<(), ApiError> {
    match event_type.map(EventType::parse) {
        Some(Err(e)) => Err(ApiError::field("event_type", e.to_string())),
        _ => Ok(()),
    }
}

/// Checks that `since` and `until` fall within the years 0001 to 9999, and `since` comes before
/// `until`.
pub(super) fn check_window(
    since: Option<DateTime<Utc>>,
    until: Option<DateTime<Utc>>,
) -> Result<(), ApiError> {
    for (field, at) in [("since", since), ("until", until)] {
        if at.is_some_and(|at| !crate::limits::time_in_range(&at)) {
            return Err(ApiError::field(
                field,
                "must be within the years 0001 to 9999",
            ));
        }
    }
    match (since, until) {
        (Some(s), Some(u)) if s >= u => Err(ApiError::field("until", "must be later than since")),
        _ => Ok(()),
    }
}

/// Query of `GET /v1/deliveries`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListDeliveries {
    /// `pending`, `processing`, `sent`, `retrying`, `dead_letter` or `cancelled`; `failed`
    /// is the older name of `retrying`, still accepted.
    #[param(pattern = "^(pending|processing|sent|retrying|failed|dead_letter|cancelled)$")]
    pub status: Option<String>,
    /// Only this endpoint's deliveries.
    pub endpoint_id: Option<String>,
    /// Only events of this type.
    #[param(pattern = "^[a-z0-9_-]+(\\.[a-z0-9_-]+)*$", max_length = 255)]
    pub event_type: Option<String>,
    /// Created at or after (RFC 3339).
    pub since: Option<DateTime<Utc>>,
    /// Created before (RFC 3339).
    pub until: Option<DateTime<Utc>>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
    /// Rows per page, 1 to 200 (default 50).
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<u32>,
    /// Only deliveries to this subscriber's endpoints. A subscriber token always sees only its
    /// own.
    pub subscriber_id: Option<String>,
}

/// Lists deliveries, newest first.
#[utoipa::path(get, path = "/v1/deliveries", operation_id = "list_deliveries", tag = "deliveries", params(ListDeliveries),
    responses((status = 200, description = "A page of deliveries", body = Page<DeliveryView>),
              (status = 400, description = "A parameter is invalid", body = ErrorBody)))]
pub async fn list(
    State(state): State<AppState>,
    Extension(actor): Extension<Actor>,
    ApiQuery(q): ApiQuery<ListDeliveries>,
) -> Result<Json<Page<DeliveryView>>, ApiError> {
    let page = PageRequest::new("deliveries", q.cursor.as_deref(), q.limit)?;
    check_window(q.since, q.until)?;
    check_event_type(q.event_type.as_deref())?;
    if let Some(id) = &q.endpoint_id {
        EndpointId::parse(id).map_err(|e| ApiError::field("endpoint_id", e.message))?;
    }
    let query = DeliveryQuery {
        status: parse_status(q.status.as_deref())?,
        endpoint_id: q.endpoint_id,
        event_type: q.event_type,
        since: q.since,
        until: q.until,
        before_id: page.past,
        limit: page.fetch(),
        subscriber_id: match actor.listing(q.subscriber_id.as_deref()) {
            Listing::Nothing => return Ok(Json(Page::empty())),
            Listing::Everyone => None,
            Listing::Subscriber(s) => Some(s),
        },
    };
    let rows = state.store.list_deliveries(&query).await?;
    // The whole circuits table: one small row per endpoint that has failed.
    let circuits = state.store.circuits().await?;
    Ok(Json(page.page(
        rows,
        |r| r.delivery.id,
        |r| DeliveryView::new(r.delivery, r.event_type, &circuits),
    )))
}

/// The routes of this resource.
pub fn router() -> Router<AppState> {
    Router::new().route("/deliveries", get(list))
}
