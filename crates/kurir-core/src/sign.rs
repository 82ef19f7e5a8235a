//! The sender side of the wire contract: the signature headers kurir puts on every delivery attempt.
//!
//! Every attempt carries two signatures of the same body: the seed `kurir` scheme
//! (`X-Webhook-Signature`, current secret only) and Standard Webhooks (`webhook-signature`, one entry per
//! valid secret so subscribers keep verifying during a rotation). Checking signatures is `verify`'s job.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use chrono::{DateTime, SecondsFormat, SubsecRound, Utc};

use crate::mac::hmac_sha256;
use crate::secret::Secret;

/// Header names kurir sends, lowercase as HTTP/2 requires and `http::HeaderName` stores them.
pub mod headers {
    /// Seed scheme: the event type, e.g. `order.paid`.
    pub const WEBHOOK_EVENT: &str = "x-webhook-event";
    /// Seed scheme: the event id.
    pub const WEBHOOK_EVENT_ID: &str = "x-webhook-event-id";
    /// Seed scheme: RFC 3339 UTC time of this attempt, signed verbatim.
    pub const WEBHOOK_TIMESTAMP: &str = "x-webhook-timestamp";
    /// Seed scheme: lowercase hex HMAC-SHA256 of `timestamp + "." + body`.
    pub const WEBHOOK_SIGNATURE: &str = "x-webhook-signature";
    /// Standard Webhooks: the message id (kurir sends the event id).
    pub const WEBHOOK_ID: &str = "webhook-id";
    /// Standard Webhooks: unix seconds of this attempt.
    pub const WEBHOOK_TIMESTAMP_STD: &str = "webhook-timestamp";
    /// Standard Webhooks: space-separated `v1,<base64>` signatures.
    pub const WEBHOOK_SIGNATURE_STD: &str = "webhook-signature";
}

/// `hex(HMAC-SHA256(key = secret string UTF-8, msg = timestamp_header + "." + body))`, lowercase.
pub fn sign_kurir(secret: &Secret, timestamp_header: &str, body: &[u8]) -> String {
    let tag = hmac_sha256(
        secret.hmac_key_verbatim(),
        &[timestamp_header.as_bytes(), b".", body],
    );
    hex::encode(tag)
}

/// `v1,<base64 HMAC-SHA256(key = secret.hmac_key_standard(), msg = id + "." + ts + "." + body)>` for one
/// secret.
pub fn sign_standard(secret: &Secret, msg_id: &str, timestamp_unix: i64, body: &[u8]) -> String {
    let timestamp = timestamp_unix.to_string();
    let tag = hmac_sha256(
        &secret.hmac_key_standard(),
        &[msg_id.as_bytes(), b".", timestamp.as_bytes(), b".", body],
    );
    format!("v1,{}", STANDARD.encode(tag))
}

/// All signature headers of one attempt, in this order: `x-webhook-event`, `x-webhook-event-id`,
/// `x-webhook-timestamp`, `x-webhook-signature` (signed with `secrets[0]`, the current one),
/// `webhook-id`, `webhook-timestamp`, `webhook-signature` (one `v1,` entry per secret, joined by
/// exactly one space).
///
/// `at` is truncated to whole seconds so both timestamps name the same instant
/// (`2026-06-11T08:15:31Z` and `1781165731`).
///
/// # Panics
///
/// If `secrets` is empty: an endpoint always has a current secret.
pub fn signature_headers(
    event_id: &str,
    event_type: &str,
    secrets: &[&Secret],
    at: DateTime<Utc>,
    body: &[u8],
) -> Vec<(&'static str, String)> {
    let current = secrets
        .first()
        .expect("an endpoint has at least one secret");
    let at = at.trunc_subsecs(0);
    let timestamp = at.to_rfc3339_opts(SecondsFormat::Secs, true);
    let timestamp_unix = at.timestamp();
    let standard_signatures: Vec<String> = secrets
        .iter()
        .map(|secret| sign_standard(secret, event_id, timestamp_unix, body))
        .collect();
    let kurir_signature = sign_kurir(current, &timestamp, body);
    vec![
        (headers::WEBHOOK_EVENT, event_type.to_owned()),
        (headers::WEBHOOK_EVENT_ID, event_id.to_owned()),
        (headers::WEBHOOK_TIMESTAMP, timestamp),
        (headers::WEBHOOK_SIGNATURE, kurir_signature),
        (headers::WEBHOOK_ID, event_id.to_owned()),
        (headers::WEBHOOK_TIMESTAMP_STD, timestamp_unix.to_string()),
        (
            headers::WEBHOOK_SIGNATURE_STD,
            standard_signatures.join(" "),
        ),
    ]
}
