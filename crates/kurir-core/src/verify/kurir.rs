//! The seed `kurir` scheme, as kurir itself sends it: `X-Webhook-Signature` = lowercase hex
//! HMAC-SHA256(secret string, `X-Webhook-Timestamp` value + "." + body). The timestamp is RFC 3339 and
//! signed verbatim, whatever its exact form. The event id and type headers are not signed.

use chrono::{DateTime, Utc};
use http::HeaderMap;

use super::{
    decode_hex, optional_header, required_header, EventIdSource, KeyKind, Verified, Verifier,
    VerifyError,
};
use crate::sign::headers::{WEBHOOK_EVENT, WEBHOOK_EVENT_ID, WEBHOOK_SIGNATURE, WEBHOOK_TIMESTAMP};

pub(super) fn verify(
    verifier: &Verifier,
    headers: &HeaderMap,
    body: &[u8],
    now: DateTime<Utc>,
) -> Result<Verified, VerifyError> {
    let timestamp_header = required_header(headers, WEBHOOK_TIMESTAMP)?;
    let signature = decode_hex(
        WEBHOOK_SIGNATURE,
        required_header(headers, WEBHOOK_SIGNATURE)?,
    )?;
    let timestamp = DateTime::parse_from_rfc3339(timestamp_header)
        .map_err(|_| VerifyError::MalformedHeader {
            header: WEBHOOK_TIMESTAMP,
            reason: "not an RFC 3339 date-time",
        })?
        .to_utc();
    verifier.check_timestamp(timestamp, now)?;
    verifier.check_signature(
        KeyKind::Verbatim,
        &[timestamp_header.as_bytes(), b".", body],
        &[signature],
    )?;
    Ok(Verified {
        event_type: optional_header(headers, WEBHOOK_EVENT),
        timestamp: Some(timestamp),
        ..Verified::identified(
            optional_header(headers, WEBHOOK_EVENT_ID),
            EventIdSource::UnsignedHeader,
        )
    })
}
