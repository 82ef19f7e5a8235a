//! The HTTP side a sender sees: `POST /` verifies and stores an event, `GET /events/{event_id}`
//! reports its status. [`Receiver::router`] gives both, to be nested wherever the application wants
//! them (`/webhooks/billing`, say).
//!
//! Answers: first receipt `202 {"status":"pending"}` once the row has committed; a duplicate of a
//! completed event `200 {"status":"already_processed"}`; a duplicate of one still pending,
//! processing or failed `202 {"status":"<status>"}`. With inline processing a first receipt is
//! answered after the handler ran: `200 {"status":"completed"}`, or `202 {"status":"failed"}` with
//! the retry left to the [`Runner`](crate::Runner). Rejections are the extractor's
//! ([`Rejection`](crate::Rejection)); a store failure is `500` (the sender retries, and the unique
//! key makes that safe).

use axum::extract::{FromRef, Path, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use http::StatusCode;
use serde::Serialize;

use crate::error::ApiError;
use crate::event::{EventRecord, InboxStatus, VerifiedEvent};
use crate::metrics;
use crate::process::{ProcessOutcome, Processor};
use crate::runner::Waker;
use crate::source::WebhookSource;
use crate::store::{Inbox, Receipt, StoreError};

/// One source's webhook endpoint: verification, the inbox, and optionally inline processing.
#[derive(Clone, Debug)]
pub struct Receiver {
    source: WebhookSource,
    inbox: Inbox,
    inline: Option<Processor>,
    waker: Option<Waker>,
}

/// What [`Receiver::accept`] did with a verified event; its `IntoResponse` is the answer to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Accepted {
    /// First receipt, stored `pending` for the runner.
    Stored {
        /// The event's id.
        event_id: String,
    },
    /// First receipt, processed inline before answering.
    Processed {
        /// The event's id.
        event_id: String,
        /// How the inline attempt ended.
        outcome: ProcessOutcome,
    },
    /// Already stored; not processed again.
    Duplicate {
        /// The event's id.
        event_id: String,
        /// Its current state.
        status: InboxStatus,
    },
}

impl Receiver {
    /// Receives `source`'s webhooks into `inbox`; a [`Runner`](crate::Runner) processes them.
    pub fn new(source: WebhookSource, inbox: Inbox) -> Receiver {
        Receiver {
            source,
            inbox,
            inline: None,
            waker: None,
        }
    }

    /// Wakes a runner in this process as soon as a new event is stored, instead of at its next poll.
    pub fn wake(mut self, waker: Waker) -> Receiver {
        self.waker = Some(waker);
        self
    }

    /// Runs `processor` on a new event before answering. The row is stored already leased to this
    /// request, so the runner cannot pick it up meanwhile; a failed attempt is retried by a runner
    /// like any other, so one must still be running.
    pub fn process_inline(mut self, processor: Processor) -> Receiver {
        self.inline = Some(processor);
        self
    }

    /// `POST /` and `GET /events/{event_id}`, for [`Router::nest`].
    ///
    /// The status route has no authentication of its own: add a `route_layer` if event ids or
    /// handler errors must not be public.
    pub fn router<S>(self) -> Router<S>
    where
        S: Clone + Send + Sync + 'static,
    {
        Router::new()
            .route("/", post(receive))
            .route("/events/{event_id}", get(status))
            .with_state(self)
    }

    /// Stores a verified event once and, when configured, processes it inline. For applications
    /// that use the [`VerifiedEvent`] extractor in a handler of their own. Counted in
    /// `kurir_inbox_events_total` as `accepted`, `duplicate` or `error`.
    pub async fn accept(&self, event: VerifiedEvent) -> Result<Accepted, StoreError> {
        let result = self.store(event).await;
        self.source.count(match &result {
            Ok(Accepted::Duplicate { .. }) => metrics::DUPLICATE,
            Ok(_) => metrics::ACCEPTED,
            Err(_) => metrics::ERROR,
        });
        result
    }

    async fn store(&self, event: VerifiedEvent) -> Result<Accepted, StoreError> {
        let event_id = event.event_id.as_str().to_owned();
        let accepted = match &self.inline {
            None => match self.inbox.receive(&event).await? {
                Receipt::New(_) => {
                    if let Some(waker) = &self.waker {
                        waker.wake();
                    }
                    Accepted::Stored { event_id }
                }
                Receipt::Duplicate(record) => duplicate(event_id, &record),
            },
            Some(processor) => {
                let owner = processor.owner();
                let lease = processor.lease_duration();
                match self.inbox.receive_claimed(&event, owner, lease).await? {
                    (_, Some(claimed)) => Accepted::Processed {
                        outcome: processor.process(&self.inbox, claimed).await?,
                        event_id,
                    },
                    (receipt, None) => duplicate(event_id, receipt.record()),
                }
            }
        };
        log_accepted(&event, &accepted);
        Ok(accepted)
    }
}

fn duplicate(event_id: String, record: &EventRecord) -> Accepted {
    Accepted::Duplicate {
        event_id,
        status: record.status,
    }
}

fn log_accepted(event: &VerifiedEvent, accepted: &Accepted) {
    let outcome = match accepted {
        Accepted::Stored { .. } => "stored",
        Accepted::Processed { .. } => "processed_inline",
        Accepted::Duplicate { .. } => "duplicate",
    };
    tracing::info!(
        source = %event.source,
        event_id = %event.event_id,
        event_type = event.event_type.as_deref().unwrap_or(""),
        outcome,
        "webhook accepted"
    );
}

impl FromRef<Receiver> for WebhookSource {
    fn from_ref(receiver: &Receiver) -> WebhookSource {
        receiver.source.clone()
    }
}

async fn receive(State(receiver): State<Receiver>, event: VerifiedEvent) -> Response {
    let source = event.source.clone();
    match receiver.accept(event).await {
        Ok(accepted) => accepted.into_response(),
        Err(error) => store_failure(&source, &error, "storing a webhook failed"),
    }
}

#[derive(Serialize)]
struct Answer<'a> {
    status: &'a str,
    event_id: &'a str,
}

impl IntoResponse for Accepted {
    fn into_response(self) -> Response {
        let (code, status, event_id) = match &self {
            Accepted::Stored { event_id } => (StatusCode::ACCEPTED, "pending", event_id),
            Accepted::Processed { event_id, outcome } => match outcome {
                ProcessOutcome::Completed => (StatusCode::OK, "completed", event_id),
                ProcessOutcome::Retrying(_) | ProcessOutcome::GaveUp => {
                    (StatusCode::ACCEPTED, "failed", event_id)
                }
                ProcessOutcome::LeaseLost | ProcessOutcome::Interrupted => {
                    (StatusCode::ACCEPTED, "processing", event_id)
                }
            },
            Accepted::Duplicate { event_id, status } => match status {
                InboxStatus::Completed => (StatusCode::OK, "already_processed", event_id),
                other => (StatusCode::ACCEPTED, other.as_str(), event_id),
            },
        };
        (code, Json(Answer { status, event_id })).into_response()
    }
}

/// The status route's body: what the inbox knows about one event, without its payload. Public so
/// that a status route of the application's own (kurir's gateway has one) answers the same shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EventStatus {
    /// The sender's event id.
    pub event_id: String,
    /// The event type, when the scheme carried one.
    pub event_type: Option<String>,
    /// Where processing stands.
    pub status: InboxStatus,
    /// Attempts started so far.
    pub attempts: u32,
    /// When the last attempt started.
    pub last_attempt_at: Option<DateTime<Utc>>,
    /// What the last failed attempt reported.
    pub last_error: Option<String>,
    /// When the runner will next try it, if it will.
    pub next_attempt_at: Option<DateTime<Utc>>,
}

impl From<EventRecord> for EventStatus {
    fn from(record: EventRecord) -> EventStatus {
        EventStatus {
            event_id: record.event_id,
            event_type: record.event_type,
            status: record.status,
            attempts: record.attempts,
            last_attempt_at: record.last_attempt_at,
            last_error: record.last_error,
            next_attempt_at: record.next_attempt_at,
        }
    }
}

async fn status(State(receiver): State<Receiver>, Path(event_id): Path<String>) -> Response {
    let source = receiver.source.name();
    match receiver.inbox.status(source, &event_id).await {
        Ok(Some(record)) => Json(EventStatus::from(record)).into_response(),
        Ok(None) => ApiError::new(
            StatusCode::NOT_FOUND,
            "event_not_found",
            format!("source {source} has no event with this id"),
        )
        .into_response(),
        Err(error) => store_failure(source, &error, "reading an inbox event's status failed"),
    }
}

/// The answer to a store failure: `503` with `Retry-After` when the database is away, else
/// `500`. Logged here, once.
fn store_failure(source: &str, error: &StoreError, what: &str) -> Response {
    if error.is_unavailable() {
        tracing::warn!(source, %error, "{what}: the database is unavailable");
        ApiError::unavailable().into_response()
    } else {
        tracing::error!(source, %error, "{what}");
        ApiError::internal().into_response()
    }
}
