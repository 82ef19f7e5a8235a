//! One forward: POST an accepted inbox event to its source's `forward_url`, with the original
//! body, signed under the `kurir` scheme (and Standard Webhooks alongside) with the source's
//! forward secret. Only a 2xx answer completes the event. `410 Gone` fails it for good: the
//! application refuses it, and it is not forwarded again unless someone asks for a retry.
//! Anything else is a failed attempt that the runner retries with backoff, waiting at least what
//! a `429` or `503` asked for in `Retry-After`, as deliveries do.
//!
//! The source is read afresh for every attempt, so a changed forward URL applies to the next
//! retry. The HTTP mechanics (SSRF guard, timeouts, no redirects) are the dispatcher's client's.

use std::time::Duration;

use axum::http::header::CONTENT_TYPE;
use kurir_core::sign::{headers::WEBHOOK_EVENT, signature_headers};
use kurir_receiver::{Failure, InboxEvent};

use crate::delivery::WireText;
use crate::store::{Store, StoreError};
use crate::webhook_client::{PostError, Timeouts, WebhookClient};

/// The header naming the source a forward came through (not signed; informational).
pub const SOURCE_HEADER: &str = "x-kurir-source";

/// Why a forward attempt failed. Its `Display` is the inbox row's `last_error`: it names the
/// failure, never the body or a secret.
#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    /// The source was deleted after the event was accepted.
    #[error("source {0} no longer exists")]
    SourceGone(String),
    /// The source could not be read.
    #[error("reading the source failed: {0}")]
    Store(#[from] StoreError),
    /// No answer: refused by the SSRF guard, a connect error, a timeout.
    #[error("forward failed: {0}")]
    Post(#[from] PostError),
    /// An answer other than 2xx or 410; `429` and `503` may ask to wait (`Retry-After`).
    #[error("forward answered {answer}")]
    Status {
        /// The HTTP status.
        status: u16,
        /// The status and the start of the body, as a delivery's error reads.
        answer: WireText,
        /// The wait a `429` or `503` asked for.
        retry_after: Option<Duration>,
    },
    /// The forward URL answered `410 Gone`.
    #[error("forward answered HTTP 410 Gone: the event is not forwarded again")]
    Gone,
}

impl ForwardError {
    /// The HTTP status the forward URL answered, if it answered.
    pub fn status_code(&self) -> Option<u16> {
        match self {
            Self::Status { status, .. } => Some(*status),
            Self::Gone => Some(410),
            Self::SourceGone(_) | Self::Store(_) | Self::Post(_) => None,
        }
    }
}

impl From<ForwardError> for Failure {
    /// `410` gives up on the event; a `429` or `503` with `Retry-After` is not retried before
    /// that; anything else after the backoff.
    fn from(e: ForwardError) -> Failure {
        match e {
            ForwardError::Gone => Failure::new(e).give_up(),
            ForwardError::Status {
                status: 429 | 503,
                retry_after: Some(after),
                ..
            } => Failure::new(e).retry_after(after),
            e => Failure::new(e),
        }
    }
}

/// Sends forwards. One per process, shared by every attempt.
pub struct Forwarder {
    store: Store,
    http: WebhookClient,
    timeouts: Timeouts,
}

impl Forwarder {
    /// A forwarder reading sources from `store`, posting through `http` within `timeouts`.
    pub fn new(store: Store, http: WebhookClient, timeouts: Timeouts) -> Self {
        Self {
            store,
            http,
            timeouts,
        }
    }

    /// Makes one forward attempt of `event`; the 2xx status it was answered with.
    pub async fn forward(&self, event: &InboxEvent) -> Result<u16, ForwardError> {
        let source = self
            .store
            .get_source(&event.source)
            .await?
            .ok_or_else(|| ForwardError::SourceGone(event.source.clone()))?;
        let content_type = event
            .headers
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("application/json");
        let mut headers = vec![
            ("content-type", content_type.to_owned()),
            (SOURCE_HEADER, source.name.clone()),
        ];
        let event_type = event.event_type.as_deref().unwrap_or_default();
        headers.extend(
            signature_headers(
                &event.event_id,
                event_type,
                &[&source.forward_secret],
                self.store.clock().now(),
                &event.payload,
            )
            .into_iter()
            // A scheme without event types leaves the header out rather than empty.
            .filter(|(name, _)| *name != WEBHOOK_EVENT || !event_type.is_empty()),
        );
        let body = event.payload.to_vec();
        let response = (self.http)
            .post(&source.forward_url, &headers, body, self.timeouts)
            .await?;
        match response.status {
            200..=299 => Ok(response.status),
            410 => Err(ForwardError::Gone),
            status => Err(ForwardError::Status {
                status,
                answer: response.as_failure(),
                retry_after: response.retry_after,
            }),
        }
    }
}
