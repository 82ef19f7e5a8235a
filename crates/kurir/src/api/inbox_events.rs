//! `/v1/inbox/sources/{name}/events`: what the inbox gateway received from one source, newest
//! first (filters, cursor paging); `…/{event_id}`, one event with every forward attempt and every
//! retry (its history, `store::inbox_history`); and `…/{event_id}/retry`, which gives a `failed`
//! event a fresh set of forward attempts once its cause is fixed, audited with who asked and from
//! where.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use chrono::{DateTime, Utc};
use kurir_receiver::{InboxStatus, RetryNow};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::auth::Actor;
use super::deliveries::check_window;
use super::error::{ApiError, ErrorBody};
use super::extract::{ApiPath, ApiQuery};
use super::page::{Page, PageRequest};
use crate::api::state::AppState;
use crate::store::inbox_history::{InboxAttempt, InboxRetry};
use crate::store::{InboxListItem, InboxQuery};
use kurir_receiver::WebhookSource;

/// One received event (never its body or headers).
#[derive(Debug, Serialize, ToSchema)]
pub struct InboxEventView {
    /// The sender's event id.
    pub event_id: String,
    /// Its type, when the scheme carries one.
    pub event_type: Option<String>,
    /// `pending`, `processing`, `completed` (forwarded) or `failed`.
    pub status: String,
    /// Forward attempts started so far.
    pub attempts: u32,
    /// When the next attempt is due (absent while processing, once completed, and after the
    /// last attempt failed).
    pub next_attempt_at: Option<DateTime<Utc>>,
    /// When the last attempt started.
    pub last_attempt_at: Option<DateTime<Utc>>,
    /// What the last failed attempt reported.
    pub last_error: Option<String>,
    /// When kurir received it.
    pub received_at: DateTime<Utc>,
}

impl From<InboxListItem> for InboxEventView {
    fn from(e: InboxListItem) -> Self {
        Self {
            event_id: e.event_id,
            event_type: e.event_type,
            status: e.status.as_str().to_owned(),
            attempts: e.attempts,
            next_attempt_at: e.next_attempt_at,
            last_attempt_at: e.last_attempt_at,
            last_error: e.last_error,
            received_at: e.created_at,
        }
    }
}

/// One forward attempt of an inbox event.
#[derive(Debug, Serialize, ToSchema)]
pub struct InboxAttemptView {
    /// Its number within its round: from 1, and from 1 again after each retry.
    pub attempt: u32,
    /// When it started.
    pub started_at: DateTime<Utc>,
    /// How long it took.
    pub duration_ms: i64,
    /// The forward URL's HTTP status; absent when there was no answer (a timeout, a refused
    /// connection).
    pub status_code: Option<u16>,
    /// What failed; absent when the forward succeeded.
    pub error: Option<String>,
}

impl From<InboxAttempt> for InboxAttemptView {
    fn from(a: InboxAttempt) -> Self {
        Self {
            attempt: a.attempt,
            started_at: a.started_at,
            duration_ms: a.duration_ms,
            status_code: a.status_code,
            error: a.error,
        }
    }
}

/// An operator's retry of an inbox event, from the audit.
#[derive(Debug, Serialize, ToSchema)]
pub struct InboxRetryView {
    /// Who: the token's name (`admin` for the environment's token).
    pub actor: String,
    /// Where from: `api`, `cli` or `dashboard`.
    pub via: String,
    /// When.
    pub created_at: DateTime<Utc>,
}

impl From<InboxRetry> for InboxRetryView {
    fn from(r: InboxRetry) -> Self {
        Self {
            actor: r.actor,
            via: r.via,
            created_at: r.created_at,
        }
    }
}

/// One received event with its history.
#[derive(Debug, Serialize, ToSchema)]
pub struct InboxEventDetail {
    /// The event as the listing shows it (`attempts` counts the current round only).
    #[serde(flatten)]
    pub event: InboxEventView,
    /// Every forward attempt, oldest first, across retries.
    pub history: Vec<InboxAttemptView>,
    /// Every operator's retry, oldest first.
    pub retries: Vec<InboxRetryView>,
}

/// Query of `GET /v1/inbox/sources/{name}/events`.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListInboxEvents {
    /// `pending`, `processing`, `completed` or `failed`.
    pub status: Option<String>,
    /// Only events of this type.
    pub event_type: Option<String>,
    /// Received at or after (RFC 3339).
    pub since: Option<DateTime<Utc>>,
    /// Received before (RFC 3339).
    pub until: Option<DateTime<Utc>>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
    /// Rows per page, 1 to 200 (default 50).
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<u32>,
}

/// Answer of a retry.
#[derive(Debug, Serialize, ToSchema)]
pub struct Retried {
    /// The event.
    pub event_id: String,
    /// `pending`: due now, with a fresh set of attempts.
    pub status: String,
}

fn source_not_found(name: &str) -> ApiError {
    ApiError::NotFound(format!("no inbox source named '{name}'"))
}

/// Parses a `status` filter of the inbox.
pub(crate) fn parse_inbox_status(s: Option<&str>) -> Result<Option<InboxStatus>, ApiError> {
    s.map(|s| {
        s.parse().map_err(|_| {
            ApiError::field(
                "status",
                format!("unknown inbox status '{s}' (expected pending, processing, completed or failed)"),
            )
        })
    })
    .transpose()
}

/// Lists one source's received events, newest first.
#[utoipa::path(get, path = "/v1/inbox/sources/{name}/events", tag = "inbox sources",
    operation_id = "list_inbox_events",
    params(("name" = String, Path, description = "Source name"), ListInboxEvents),
    responses((status = 200, description = "A page of events", body = Page<InboxEventView>),
              (status = 400, description = "A parameter is invalid", body = ErrorBody),
              (status = 404, description = "No such source", body = ErrorBody)))]
pub async fn list(
    State(state): State<AppState>,
    ApiPath(name): ApiPath<String>,
    ApiQuery(q): ApiQuery<ListInboxEvents>,
) -> Result<Json<Page<InboxEventView>>, ApiError> {
    let page = PageRequest::new("inbox", q.cursor.as_deref(), q.limit)?;
    check_window(q.since, q.until)?;
    let status = parse_inbox_status(q.status.as_deref())?;
    check_source(&state, &name).await?;
    let query = InboxQuery {
        source: name,
        status,
        event_type: q.event_type,
        since: q.since,
        until: q.until,
        before_id: page.past,
        limit: page.fetch(),
    };
    let rows = state.store.list_inbox_events(&query).await?;
    Ok(Json(page.page(rows, |r| r.id, InboxEventView::from)))
}

/// One received event with every forward attempt (across retries) and every retry.
#[utoipa::path(get, path = "/v1/inbox/sources/{name}/events/{event_id}",
    tag = "inbox sources", operation_id = "get_inbox_event",
    params(("name" = String, Path, description = "Source name"),
           ("event_id" = String, Path, description = "The sender's event id")),
    responses((status = 200, description = "The event and its history", body = InboxEventDetail),
              (status = 404, description = "No such source or event", body = ErrorBody)))]
pub async fn get_one(
    State(state): State<AppState>,
    ApiPath((name, event_id)): ApiPath<(String, String)>,
) -> Result<Json<InboxEventDetail>, ApiError> {
    check_source(&state, &name).await?;
    let event = match event_id.contains('\0') {
        true => None,
        false => state.store.get_inbox_event(&name, &event_id).await?,
    }
    .ok_or_else(|| event_not_found(&name, &event_id))?;
    let history = state.store.inbox_attempts(&name, &event_id).await?;
    let retries = state.store.inbox_retries(&name, &event_id).await?;
    Ok(Json(InboxEventDetail {
        event: event.into(),
        history: history.into_iter().map(Into::into).collect(),
        retries: retries.into_iter().map(Into::into).collect(),
    }))
}

/// Makes a `failed` event due now with a fresh set of forward attempts.
#[utoipa::path(post, path = "/v1/inbox/sources/{name}/events/{event_id}/retry",
    tag = "inbox sources", operation_id = "retry_inbox_event",
    params(("name" = String, Path, description = "Source name"),
           ("event_id" = String, Path, description = "The sender's event id")),
    responses((status = 202, description = "Due now", body = Retried),
              (status = 404, description = "No such source or event", body = ErrorBody),
              (status = 409, description = "The event is not failed", body = ErrorBody)))]
pub async fn retry(
    State(state): State<AppState>,
    Extension(actor): Extension<Actor>,
    ApiPath((name, event_id)): ApiPath<(String, String)>,
) -> Result<(StatusCode, Json<Retried>), ApiError> {
    retry_event(&state, &actor, &name, &event_id).await?;
    let retried = Retried {
        event_id,
        status: InboxStatus::Pending.as_str().to_owned(),
    };
    Ok((StatusCode::ACCEPTED, Json(retried)))
}

async fn check_source(state: &AppState, name: &str) -> Result<(), ApiError> {
    if !WebhookSource::is_valid_name(name) || state.store.get_source(name).await?.is_none() {
        return Err(source_not_found(name));
    }
    Ok(())
}

fn event_not_found(name: &str, event_id: &str) -> ApiError {
    ApiError::NotFound(format!("source {name} has no event with id '{event_id}'"))
}

/// Retries one failed inbox event, audits it with `actor`, and wakes the forwarding runner;
/// what the API and the dashboard both call. The audit row is written once the retry took:
/// the receiver's store reschedules on its own connection, so the two are not one
/// transaction, and a refused retry leaves no row.
pub(crate) async fn retry_event(
    state: &AppState,
    actor: &Actor,
    name: &str,
    event_id: &str,
) -> Result<(), ApiError> {
    check_source(state, name).await?;
    // An id no stored event could have (a NUL, say) is not looked up.
    if event_id.contains('\0') {
        return Err(event_not_found(name, event_id));
    }
    match state.store.inbox().retry_now(name, event_id).await? {
        RetryNow::Scheduled => {
            state.gateway.waker().wake();
            state
                .store
                .record_inbox_retry(name, event_id, actor)
                .await?;
            tracing::info!(source = %name, event_id = %event_id, actor = %actor.name,
                via = %actor.via, "inbox event retried");
            Ok(())
        }
        RetryNow::NotFound => Err(event_not_found(name, event_id)),
        RetryNow::NotFailed(status) => Err(ApiError::Conflict {
            code: "not_failed",
            message: format!("the event is {status}; only a failed event can be retried"),
        }),
    }
}

/// The routes of this resource.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/inbox/sources/{name}/events", get(list))
        .route("/inbox/sources/{name}/events/{event_id}", get(get_one))
        .route("/inbox/sources/{name}/events/{event_id}/retry", post(retry))
}
