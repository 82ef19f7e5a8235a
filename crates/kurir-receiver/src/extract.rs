//! The door: an axum extractor that reads the raw body (up to the source's limit), verifies it under
//! the source's scheme, and yields a [`VerifiedEvent`], or a [`Rejection`] naming the failed check.
//!
//! Owns nothing but that: storing the event is [`crate::Inbox`]'s job, answering the sender is
//! [`crate::Receiver`]'s. A rejected request has touched no database.
//!
//! [`Receiver::router`](crate::Receiver::router) uses the extractor for you. In a handler of your
//! own, the router state must yield the [`WebhookSource`]:
//!
//! ```
//! use axum::extract::{FromRef, State};
//! use axum::response::{IntoResponse, Response};
//! use kurir_receiver::{ApiError, Receiver, VerifiedEvent, WebhookSource};
//!
//! #[derive(Clone)]
//! struct AppState {
//!     billing: Receiver,
//!     source: WebhookSource,
//! }
//!
//! impl FromRef<AppState> for WebhookSource {
//!     fn from_ref(state: &AppState) -> WebhookSource {
//!         state.source.clone()
//!     }
//! }
//!
//! async fn billing_webhook(State(state): State<AppState>, event: VerifiedEvent) -> Response {
//!     // `event` is authentic; store it once (and answer) as the receiver's own route would.
//!     match state.billing.accept(event).await {
//!         Ok(accepted) => accepted.into_response(),
//!         Err(_) => ApiError::internal().into_response(),
//!     }
//! }
//!
//! let routes: axum::Router<AppState> =
//!     axum::Router::new().route("/webhooks/billing", axum::routing::post(billing_webhook));
//! ```

use axum::extract::{FromRef, FromRequest, Request};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::header::CONTENT_LENGTH;
use http::{HeaderMap, StatusCode};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use kurir_core::{EventId, InvalidEventId, VerifyError};

use crate::error::ApiError;
use crate::event::VerifiedEvent;
use crate::source::WebhookSource;

/// Why a request was not accepted. Each variant maps to one status and error code.
#[derive(Debug, thiserror::Error)]
pub enum Rejection {
    /// The body is larger than the source's limit: `413 payload_too_large`.
    #[error("body exceeds the {limit}-byte limit")]
    PayloadTooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// The body could not be read (the client went away): `400 body_unreadable`.
    #[error("the request body could not be read")]
    BodyUnreadable,
    /// Signature or timestamp check failed: `401`, code naming the check; or a header names
    /// another event than the signed id: `400 event_id_mismatch`.
    #[error("{0}")]
    Unverified(#[from] VerifyError),
    /// Authentic, but no event id where the scheme keeps it: `400 missing_event_id`.
    #[error("the request carries no event id, so it cannot be stored once")]
    MissingEventId,
    /// The event id is not usable as a key: `400 invalid_event_id`.
    #[error("invalid event id: {0}")]
    InvalidEventId(#[from] InvalidEventId),
}

impl Rejection {
    /// The answer to send: status, stable code, message.
    pub fn to_api_error(&self) -> ApiError {
        let status = match self {
            Rejection::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Rejection::BodyUnreadable
            | Rejection::MissingEventId
            | Rejection::InvalidEventId(_)
            | Rejection::Unverified(VerifyError::EventIdMismatch { .. }) => StatusCode::BAD_REQUEST,
            Rejection::Unverified(error) => match unverified_code(error) {
                Some(_) => StatusCode::UNAUTHORIZED,
                None => return ApiError::internal(),
            },
        };
        ApiError::new(status, self.code(), self.to_string())
    }

    /// The stable code of the answer, e.g. `signature_mismatch` (also the `outcome` it is
    /// counted under in `kurir_inbox_events_total`).
    pub fn code(&self) -> &'static str {
        match self {
            Rejection::PayloadTooLarge { .. } => "payload_too_large",
            Rejection::BodyUnreadable => "body_unreadable",
            Rejection::MissingEventId => "missing_event_id",
            Rejection::InvalidEventId(_) => "invalid_event_id",
            Rejection::Unverified(error) => unverified_code(error).unwrap_or("internal"),
        }
    }
}

/// The code naming the failed check; `None` for a fault of ours, not the sender's.
fn unverified_code(error: &VerifyError) -> Option<&'static str> {
    match error {
        VerifyError::MissingHeader(_) => Some("missing_header"),
        VerifyError::MalformedHeader { .. } => Some("malformed_header"),
        VerifyError::TimestampTooOld { .. } => Some("timestamp_too_old"),
        VerifyError::TimestampTooNew { .. } => Some("timestamp_too_new"),
        VerifyError::SignatureMismatch => Some("signature_mismatch"),
        VerifyError::EventIdMismatch { .. } => Some("event_id_mismatch"),
        // WebhookSource::new refuses a source without secrets, so this cannot happen.
        VerifyError::NoSecrets => None,
    }
}

impl IntoResponse for Rejection {
    fn into_response(self) -> Response {
        self.to_api_error().into_response()
    }
}

impl WebhookSource {
    /// Verifies a request already read into `headers` and `body` (for callers outside axum). A
    /// rejection is counted in `kurir_inbox_events_total`.
    pub fn verify(&self, headers: HeaderMap, body: Bytes) -> Result<VerifiedEvent, Rejection> {
        self.counted(self.check(headers, body))
    }

    /// Reads the body of `request` up to the limit, then verifies it like [`WebhookSource::verify`].
    /// A declared `Content-Length` over the limit is refused before reading anything.
    pub async fn verify_request(&self, request: Request) -> Result<VerifiedEvent, Rejection> {
        let result = match self.read_body(request).await {
            Ok((headers, body)) => self.check(headers, body),
            Err(rejection) => Err(rejection),
        };
        self.counted(result)
    }

    fn counted(
        &self,
        result: Result<VerifiedEvent, Rejection>,
    ) -> Result<VerifiedEvent, Rejection> {
        if let Err(rejection) = &result {
            self.count(rejection.code());
        }
        result
    }

    fn check(&self, headers: HeaderMap, body: Bytes) -> Result<VerifiedEvent, Rejection> {
        if body.len() > self.limit() {
            return Err(Rejection::PayloadTooLarge {
                limit: self.limit(),
            });
        }
        let verified = self.verifier().verify(&headers, &body, self.now())?;
        let event_id = verified.event_id.ok_or(Rejection::MissingEventId)?;
        Ok(VerifiedEvent {
            source: self.name().to_owned(),
            scheme: self.scheme(),
            event_id: EventId::parse(&event_id)?,
            event_id_source: verified.event_id_source,
            event_type: verified.event_type.filter(|t| storable_type(t)),
            payload: body,
            headers,
            idempotency_key: verified.idempotency_key,
        })
    }

    async fn read_body(&self, request: Request) -> Result<(HeaderMap, Bytes), Rejection> {
        let (parts, body) = request.into_parts();
        let too_large = Rejection::PayloadTooLarge {
            limit: self.limit(),
        };
        if declared_length(&parts.headers).is_some_and(|len| len > self.limit()) {
            return Err(too_large);
        }
        let body = match Limited::new(body, self.limit()).collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(error) if error.is::<LengthLimitError>() => return Err(too_large),
            Err(_) => return Err(Rejection::BodyUnreadable),
        };
        Ok((parts.headers, body))
    }
}

/// Whether an event type can be stored and forwarded as a header value: 1 to 255 printable ASCII
/// characters. A type that is not (a NUL, a control character, non-ASCII) is left out rather than
/// failing the request: the body keeps it, byte for byte, and a failure would only make the
/// sender retry the same request forever.
fn storable_type(event_type: &str) -> bool {
    (1..=255).contains(&event_type.len()) && event_type.bytes().all(|b| (b' '..=b'~').contains(&b))
}

fn declared_length(headers: &HeaderMap) -> Option<usize> {
    headers.get(CONTENT_LENGTH)?.to_str().ok()?.parse().ok()
}

/// Verifies the request under the [`WebhookSource`] in the router's state.
impl<S> FromRequest<S> for VerifiedEvent
where
    WebhookSource: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = Rejection;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let source = WebhookSource::from_ref(state);
        let result = source.verify_request(request).await;
        if let Err(rejection) = &result {
            // The failed check only: never the body, the signature or the secrets.
            tracing::warn!(source = source.name(), reason = %rejection, "webhook rejected");
        }
        result
    }
}
