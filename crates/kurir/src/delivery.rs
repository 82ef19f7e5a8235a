//! Deliveries: one per (event, endpoint), and the attempts made for each.
//!
//! This module owns the delivery vocabulary shared by the store and the dispatcher: statuses,
//! what a claim hands to the dispatcher, and what the dispatcher hands back to be recorded,
//! including [`WireText`], the only form in which text from the wire reaches the database.

use std::fmt;
use std::ops::Deref;
use std::str::FromStr;
use std::sync::Arc;

use chrono::{DateTime, Utc};

use crate::endpoint::Endpoint;

/// Where a delivery stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeliveryStatus {
    /// Waiting for its first attempt (or for a replay).
    Pending,
    /// Leased by a dispatcher that is making an attempt.
    Processing,
    /// A 2xx was received.
    Sent,
    /// The last attempt failed; another is scheduled at `available_at`. Stored as `failed`,
    /// shown as `retrying` (see [`DeliveryStatus::name`]).
    Failed,
    /// No more attempts will be made without a replay.
    DeadLetter,
    /// Never to be made: its endpoint was deleted before it was delivered. Final; not replayed.
    Cancelled,
}

impl DeliveryStatus {
    /// Every status, in lifecycle order.
    pub const ALL: [DeliveryStatus; 6] = [
        Self::Pending,
        Self::Processing,
        Self::Sent,
        Self::Failed,
        Self::DeadLetter,
        Self::Cancelled,
    ];

    /// The name shown to people and API clients: the stored one, except that a delivery whose
    /// retry is scheduled reads `retrying`, since `failed` read as given up (that is
    /// `dead_letter`). Filters accept `failed` too, for clients written before.
    pub fn name(self) -> &'static str {
        match self {
            Self::Failed => "retrying",
            other => other.as_str(),
        }
    }

    /// The name used in the database (and in the SQL contract's readers).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Processing => "processing",
            Self::Sent => "sent",
            Self::Failed => "failed",
            Self::DeadLetter => "dead_letter",
            Self::Cancelled => "cancelled",
        }
    }
}

impl fmt::Display for DeliveryStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A status name that is not one of [`DeliveryStatus::ALL`].
#[derive(Debug, thiserror::Error)]
#[error(
    "unknown delivery status '{0}' (expected pending, processing, sent, retrying, dead_letter or cancelled)"
)]
pub struct UnknownStatus(pub String);

impl FromStr for DeliveryStatus {
    type Err = UnknownStatus;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|st| st.as_str() == s || st.name() == s)
            .ok_or_else(|| UnknownStatus(s.into()))
    }
}

/// Text kurir keeps from the wire (a response body, an error message): storable on both
/// backends whatever arrived. Bytes that are not UTF-8 become U+FFFD, and so does NUL, which
/// PostgreSQL's `text` refuses; the text is cut to at most [`WireText::MAX_BYTES`] on a character
/// boundary. Every such value is built here, so no call site can forget it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WireText(String);

impl WireText {
    /// The most bytes kept.
    pub const MAX_BYTES: usize = 4096;

    /// Decodes `bytes` as UTF-8, replacing what is not, then makes it storable.
    pub fn from_bytes(bytes: &[u8]) -> Self {
        Self::from(String::from_utf8_lossy(bytes).as_ref())
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<&str> for WireText {
    fn from(text: &str) -> Self {
        let mut kept = if text.contains('\0') {
            text.replace('\0', "\u{FFFD}")
        } else {
            text.to_owned()
        };
        if kept.len() > Self::MAX_BYTES {
            let cut = (0..=Self::MAX_BYTES)
                .rev()
                .find(|&i| kept.is_char_boundary(i))
                .unwrap_or(0);
            kept.truncate(cut);
        }
        Self(kept)
    }
}

impl From<String> for WireText {
    fn from(text: String) -> Self {
        if text.len() <= Self::MAX_BYTES && !text.contains('\0') {
            return Self(text);
        }
        Self::from(text.as_str())
    }
}

impl Deref for WireText {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for WireText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Why an attempt was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// The normal schedule: first attempt or a retry.
    Scheduled,
    /// An operator replayed the delivery.
    Replay,
}

impl Trigger {
    /// The name used in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Scheduled => "scheduled",
            Self::Replay => "replay",
        }
    }

    pub(crate) fn from_db(s: &str) -> Self {
        if s == "replay" {
            Self::Replay
        } else {
            Self::Scheduled
        }
    }
}

/// The event as the dispatcher needs it to build the request body.
#[derive(Clone, Debug)]
pub struct EventSnapshot {
    /// The stable event id.
    pub event_id: String,
    /// Its type.
    pub event_type: String,
    /// Payload version.
    pub version: i32,
    /// When it happened.
    pub occurred_at: DateTime<Utc>,
    /// The aggregate id, for logs.
    pub aggregate_id: Option<String>,
    /// The stored payload, byte-for-byte.
    pub payload: String,
}

/// A delivery leased to this process for one attempt.
#[derive(Clone, Debug)]
pub struct ClaimedDelivery {
    /// The delivery row.
    pub delivery_id: i64,
    /// The number of this attempt (1-based); also the fence for recording it.
    pub attempt: u32,
    /// Why it is being attempted.
    pub trigger: Trigger,
    /// What to send.
    pub event: EventSnapshot,
    /// Where to send it.
    pub endpoint: Arc<Endpoint>,
    /// When the lease ends, by this process's clock: the instant the claim was sent plus the
    /// lease, so never later than the `lease_expires_at` the database stamped (its clock, when
    /// the statement ran) and the lease sweeps compare with.
    pub lease_deadline: tokio::time::Instant,
}

/// What should happen to a delivery after an attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NextState {
    /// Delivered.
    Sent,
    /// Try again at this time.
    Retry(DateTime<Utc>),
    /// Give up; the delivery waits for a replay.
    DeadLetter,
    /// The endpoint answered `410 Gone`: dead-letter and disable the endpoint.
    Gone,
}

/// The record of one HTTP attempt and the state it leads to.
#[derive(Clone, Debug)]
pub struct Completion {
    /// The delivery row.
    pub delivery_id: i64,
    /// The endpoint it went to (disabled on [`NextState::Gone`]).
    pub endpoint_id: crate::endpoint::EndpointId,
    /// The attempt number, used as the fence.
    pub attempt: u32,
    /// Why the attempt was made.
    pub trigger: Trigger,
    /// When the request started.
    pub started_at: DateTime<Utc>,
    /// How long it took.
    pub duration_ms: i64,
    /// The HTTP status, when a response arrived.
    pub status_code: Option<u16>,
    /// What went wrong, when something did.
    pub error: Option<WireText>,
    /// At most the first 4 KiB of the response body.
    pub response_body: Option<WireText>,
    /// What happens next.
    pub next: NextState,
}

/// A delivery as stored, for the API and for tests.
#[derive(Clone, Debug)]
pub struct DeliveryRecord {
    /// The delivery row.
    pub id: i64,
    /// The event.
    pub event_id: String,
    /// The endpoint.
    pub endpoint_id: String,
    /// Where it stands.
    pub status: DeliveryStatus,
    /// Attempts made so far.
    pub attempt_count: u32,
    /// When the next attempt is due (for pending and failed).
    pub available_at: DateTime<Utc>,
    /// The last HTTP status.
    pub last_status_code: Option<u16>,
    /// The last error.
    pub last_error: Option<String>,
    /// When a 2xx was received.
    pub sent_at: Option<DateTime<Utc>>,
    /// When the delivery was created.
    pub created_at: DateTime<Utc>,
    /// The endpoint's URL (`None` only when its row was deleted by hand).
    pub endpoint_url: Option<String>,
    /// When the endpoint was deleted (`None`: it still exists). Its row stays as a tombstone
    /// until retention has taken its last delivery.
    pub endpoint_deleted_at: Option<DateTime<Utc>>,
}

/// One recorded attempt.
#[derive(Clone, Debug)]
pub struct AttemptRecord {
    /// The delivery it belongs to.
    pub delivery_id: i64,
    /// Its number.
    pub attempt: u32,
    /// Why it was made.
    pub trigger: Trigger,
    /// When it started.
    pub started_at: DateTime<Utc>,
    /// How long it took.
    pub duration_ms: i64,
    /// The HTTP status, if any.
    pub status_code: Option<u16>,
    /// The error, if any.
    pub error: Option<String>,
    /// The first bytes of the response body.
    pub response_body: Option<String>,
}

/// How an attempt ended, for logs and metrics (the dispatcher decides it, the metrics count it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// 2xx.
    Sent,
    /// Failed; another attempt is scheduled.
    Retry,
    /// Failed for the last time (or 410), whatever the failure: the delivery is dead-lettered.
    DeadLetter,
    /// The SSRF guard refused the destination; another attempt is scheduled.
    Refused,
}

impl Outcome {
    /// Lower-case label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Sent => "sent",
            Self::Retry => "retry",
            Self::DeadLetter => "dead_letter",
            Self::Refused => "refused",
        }
    }
}

/// What came back from an attempt, coarsely, for metrics: a status class or why there was no
/// response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResponseClass {
    /// An HTTP response; the status code divided by 100 (1 to 5; anything else is 0).
    Status(u8),
    /// The response (or the connection) did not come in time.
    Timeout,
    /// The connection could not be made (refused, reset, DNS, TLS).
    ConnectError,
    /// The SSRF guard refused the destination; nothing was sent.
    Refused,
    /// Anything else: an invalid URL, a stored payload that is not JSON, a broken request.
    RequestError,
}

impl ResponseClass {
    /// The class of an HTTP status code.
    pub fn of_status(code: u16) -> Self {
        Self::Status(if (100..600).contains(&code) {
            (code / 100) as u8
        } else {
            0
        })
    }

    /// Lower-case label: `2xx`…`5xx`, `timeout`, `connect_error`, `refused`, `request_error`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Status(1) => "1xx",
            Self::Status(2) => "2xx",
            Self::Status(3) => "3xx",
            Self::Status(4) => "4xx",
            Self::Status(5) => "5xx",
            Self::Status(_) => "other",
            Self::Timeout => "timeout",
            Self::ConnectError => "connect_error",
            Self::Refused => "refused",
            Self::RequestError => "request_error",
        }
    }
}

/// One attempt, made: what to record, and how it ended for logs and metrics.
#[derive(Clone, Debug)]
pub struct Attempted {
    /// What the store records.
    pub completion: Completion,
    /// How the attempt ended.
    pub outcome: Outcome,
    /// What came back.
    pub class: ResponseClass,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_text_replaces_nul_and_bytes_that_are_not_utf8() {
        let text = WireText::from_bytes(b"\x00\x00bad\xff");
        assert_eq!(text.as_str(), "\u{FFFD}\u{FFFD}bad\u{FFFD}");
        assert_eq!(WireText::from("plain").as_str(), "plain");
    }

    #[test]
    fn wire_text_is_cut_on_a_char_boundary() {
        let long = WireText::from("é".repeat(WireText::MAX_BYTES));
        assert!(long.len() <= WireText::MAX_BYTES);
        assert!(long.len() > WireText::MAX_BYTES - 2);
        let nul = WireText::from_bytes(&[0; WireText::MAX_BYTES]);
        assert_eq!(nul.len(), WireText::MAX_BYTES / 3 * 3);
    }
}
