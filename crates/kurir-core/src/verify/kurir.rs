//! The seed `kurir` scheme, as kurir itself sends it: `X-Webhook-Signature` = lowercase hex
//! HMAC-SHA256(secret string, `X-Webhook-Timestamp` value + "." + body). The timestamp is RFC 3339 and
//! signed verbatim, whatever its exact form.
//!
//! The event id and type headers are not signed, so the event id is the signed body's `event_id`
//! (kurir's envelope carries it), and the type its `event_type`, else the `X-Webhook-Event` header.
//! An `X-Webhook-Event-Id` that disagrees with the body is refused by [`Verifier::verify`].

use chrono::DateTime;
use http::HeaderMap;

use super::{
    body_json, decode_hex, json_string, optional_header, required_header, EventIdSource, KeyKind,
    Signed, Verified, VerifyError,
};
use crate::sign::headers::{WEBHOOK_EVENT, WEBHOOK_SIGNATURE, WEBHOOK_TIMESTAMP};

pub(super) fn read<'r>(headers: &'r HeaderMap, body: &'r [u8]) -> Result<Signed<'r>, VerifyError> {
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
    let json = body_json(body);
    Ok(Signed {
        key: KeyKind::Verbatim,
        message: vec![timestamp_header.as_bytes(), b".", body],
        signatures: vec![signature],
        claims: Verified {
            event_type: json_string(json.as_ref(), "/event_type")
                .or_else(|| optional_header(headers, WEBHOOK_EVENT)),
            timestamp: Some(timestamp),
            ..Verified::identified(
                json_string(json.as_ref(), "/event_id"),
                EventIdSource::SignedBody,
            )
        },
    })
}
