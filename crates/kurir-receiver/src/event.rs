//! The vocabulary of the inbox: an event as verified at the door ([`VerifiedEvent`]), as handed to
//! the handler ([`InboxEvent`]), its processing state ([`InboxStatus`]) and what an operator or the
//! sender can see of it ([`EventRecord`]).
//!
//! None of these print their payload or header values in `Debug`: bodies and signatures stay out of
//! logs.

use std::fmt;
use std::str::FromStr;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use http::HeaderMap;
use kurir_core::{EventId, EventIdSource, Scheme};
use serde::Serialize;

/// Where an inbox row is in its life: `pending` → `processing` (leased) → `completed`, or
/// `failed` (retry scheduled, or given up after the last attempt) → … → `completed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum InboxStatus {
    /// Stored, not yet picked up.
    Pending,
    /// A worker holds a lease on it and is running the handler.
    Processing,
    /// The handler succeeded; it will never run again for this event.
    Completed,
    /// The handler failed; retried at `next_attempt_at` unless attempts are exhausted.
    Failed,
}

impl InboxStatus {
    /// The value stored in `kurir_inbox.status`.
    pub fn as_str(self) -> &'static str {
        match self {
            InboxStatus::Pending => "pending",
            InboxStatus::Processing => "processing",
            InboxStatus::Completed => "completed",
            InboxStatus::Failed => "failed",
        }
    }
}

impl fmt::Display for InboxStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A stored status that is none of the four (a hand-edited row).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown inbox status {0:?}")]
pub struct UnknownStatus(pub String);

impl FromStr for InboxStatus {
    type Err = UnknownStatus;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [
            InboxStatus::Pending,
            InboxStatus::Processing,
            InboxStatus::Completed,
            InboxStatus::Failed,
        ]
        .into_iter()
        .find(|status| status.as_str() == s)
        .ok_or_else(|| UnknownStatus(s.to_owned()))
    }
}

/// A request whose signature checked out, as the axum extractor hands it over.
///
/// Where `event_id` comes from depends on the scheme, see [`EventIdSource`]: a signed header
/// (`standard-webhooks`: `webhook-id`/`svix-id`), the signed body (`stripe`: `id`; `slack`:
/// `event_id`), or an unsigned delivery header (`kurir`: `X-Webhook-Event-Id`; `github`:
/// `X-GitHub-Delivery`; `shopify`: `X-Shopify-Webhook-Id`; `hmac-body`: `X-Event-Id`).
#[derive(Clone)]
pub struct VerifiedEvent {
    /// The configured source's name.
    pub source: String,
    /// The scheme the request was verified under.
    pub scheme: Scheme,
    /// The sender's id for the event: the inbox stores each `(source, event_id)` once.
    pub event_id: EventId,
    /// Where `event_id` was read from, which says whether the signature covers it.
    pub event_id_source: EventIdSource,
    /// The event type, when the scheme carries one.
    pub event_type: Option<String>,
    /// The raw body, exactly the bytes that were verified.
    pub payload: Bytes,
    /// The request headers.
    pub headers: HeaderMap,
    /// The sender's idempotency key (`hmac-body`'s `X-Idempotency-Key`).
    pub idempotency_key: Option<String>,
}

impl VerifiedEvent {
    /// The scheme's signature header value, stored in `kurir_inbox.signature` for audit.
    pub(crate) fn signature(&self) -> Option<&str> {
        let names: &[&str] = match self.scheme {
            Scheme::Kurir => &["x-webhook-signature"],
            Scheme::StandardWebhooks => &["webhook-signature", "svix-signature"],
            Scheme::Stripe => &["stripe-signature"],
            Scheme::Github => &["x-hub-signature-256"],
            Scheme::Shopify => &["x-shopify-hmac-sha256"],
            Scheme::Slack => &["x-slack-signature"],
            Scheme::HmacBody => &["x-signature"],
        };
        names
            .iter()
            .find_map(|name| self.headers.get(*name)?.to_str().ok())
    }
}

impl fmt::Debug for VerifiedEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VerifiedEvent")
            .field("source", &self.source)
            .field("scheme", &self.scheme)
            .field("event_id", &self.event_id.as_str())
            .field("event_id_source", &self.event_id_source)
            .field("event_type", &self.event_type)
            .field("payload_len", &self.payload.len())
            .field("headers", &HeaderNames(&self.headers))
            .field("idempotency_key", &self.idempotency_key)
            .finish()
    }
}

/// A stored event handed to the application's handler, by the runner or inline.
#[derive(Clone)]
pub struct InboxEvent {
    /// The source it came from.
    pub source: String,
    /// The sender's event id.
    pub event_id: String,
    /// The event type, when the scheme carried one.
    pub event_type: Option<String>,
    /// The raw body as received.
    pub payload: Bytes,
    /// The request headers as stored (credentials such as `Authorization` are not stored).
    pub headers: HeaderMap,
    /// The sender's idempotency key, if any.
    pub idempotency_key: Option<String>,
    /// The number of this attempt, from 1.
    pub attempt: u32,
    /// When the event was first stored.
    pub received_at: DateTime<Utc>,
}

impl fmt::Debug for InboxEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InboxEvent")
            .field("source", &self.source)
            .field("event_id", &self.event_id)
            .field("event_type", &self.event_type)
            .field("payload_len", &self.payload.len())
            .field("headers", &HeaderNames(&self.headers))
            .field("idempotency_key", &self.idempotency_key)
            .field("attempt", &self.attempt)
            .field("received_at", &self.received_at)
            .finish()
    }
}

/// What the inbox knows about one event, without its payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventRecord {
    /// The source it came from.
    pub source: String,
    /// The sender's event id.
    pub event_id: String,
    /// The event type, when the scheme carried one.
    pub event_type: Option<String>,
    /// The sender's idempotency key, if any.
    pub idempotency_key: Option<String>,
    /// Where processing stands.
    pub status: InboxStatus,
    /// Attempts started so far (the one in progress included).
    pub attempts: u32,
    /// When the runner will next try it; `None` while processing, once completed, and after the
    /// last attempt failed (the event then waits for [`Inbox::retry_now`](crate::Inbox::retry_now)).
    pub next_attempt_at: Option<DateTime<Utc>>,
    /// When the last attempt started.
    pub last_attempt_at: Option<DateTime<Utc>>,
    /// What the last failed attempt reported.
    pub last_error: Option<String>,
    /// When the event was first stored.
    pub created_at: DateTime<Utc>,
    /// When the row last changed.
    pub updated_at: DateTime<Utc>,
}

/// Prints header names only: values may be signatures.
struct HeaderNames<'a>(&'a HeaderMap);

impl fmt::Debug for HeaderNames<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.0.keys()).finish()
    }
}
