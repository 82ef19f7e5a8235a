//! What verification reports: [`Verified`] on success, [`VerifyError`] naming the failed check.

use std::time::Duration;

use chrono::{DateTime, Utc};

/// Where [`Verified::event_id`] came from, which says how far it can be trusted for deduplication.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventIdSource {
    /// A header covered by the signature (Standard Webhooks' `webhook-id`).
    SignedHeader,
    /// A field of the signed body (the kurir scheme's `event_id`, Stripe's `id`, Slack's
    /// `event_id`).
    SignedBody,
    /// A header the scheme does not sign: authentic only as far as the transport is.
    UnsignedHeader,
    /// The request carried no event id.
    None,
}

/// What a successful verification learned about the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The sender's id for this event, used to store it once.
    pub event_id: Option<String>,
    /// Where `event_id` came from.
    pub event_id_source: EventIdSource,
    /// The event's type, when the scheme carries one.
    pub event_type: Option<String>,
    /// The signed timestamp, for schemes that have one.
    pub timestamp: Option<DateTime<Utc>>,
    /// The sender's idempotency key (`hmac-body`'s `X-Idempotency-Key`).
    pub idempotency_key: Option<String>,
}

impl Verified {
    /// A result carrying `event_id`, attributed to `source` when present; other fields empty.
    pub(super) fn identified(event_id: Option<String>, source: EventIdSource) -> Verified {
        let event_id_source = match event_id {
            Some(_) => source,
            None => EventIdSource::None,
        };
        Verified {
            event_id,
            event_id_source,
            event_type: None,
            timestamp: None,
            idempotency_key: None,
        }
    }
}

/// Why a request was not accepted as authentic. Each variant names the check that failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    /// A header the scheme requires is absent.
    #[error("missing header {0}")]
    MissingHeader(&'static str),
    /// A header is present but cannot be read as the scheme defines it.
    #[error("malformed header {header}: {reason}")]
    MalformedHeader {
        /// The header's name.
        header: &'static str,
        /// What is wrong with its value.
        reason: &'static str,
    },
    /// The signed timestamp is further in the past than the tolerance.
    #[error("timestamp is {age:?} old, beyond the {tolerance:?} tolerance")]
    TimestampTooOld {
        /// How long before `now` the timestamp is.
        age: Duration,
        /// The configured tolerance.
        tolerance: Duration,
    },
    /// The signed timestamp is further in the future than the tolerance.
    #[error("timestamp is {ahead:?} in the future, beyond the {tolerance:?} tolerance")]
    TimestampTooNew {
        /// How long after `now` the timestamp is.
        ahead: Duration,
        /// The configured tolerance.
        tolerance: Duration,
    },
    /// No signature in the request matches the body under any configured secret.
    #[error("no signature matches the body under any configured secret")]
    SignatureMismatch,
    /// A header names another event than the id the signature covers: a broken sender, or a
    /// captured request replayed under a new id.
    #[error("header {header} disagrees with the event id the signature covers")]
    EventIdMismatch {
        /// The disagreeing header.
        header: &'static str,
    },
    /// The verifier has no secret to check with.
    #[error("no secrets configured")]
    NoSecrets,
}
