//! The second seed scheme: `X-Signature` = lowercase hex HMAC-SHA256(secret string, body), optionally
//! prefixed `sha256=`. No timestamp. `X-Event-Id` and `X-Idempotency-Key` are not signed; the event
//! type is the body's `type` field when the body is JSON.

use http::HeaderMap;

use super::{
    body_json, decode_hex, json_string, optional_header, required_header, EventIdSource, KeyKind,
    Signed, Verified, VerifyError,
};

const SIGNATURE: &str = "x-signature";
const EVENT_ID: &str = "x-event-id";
const IDEMPOTENCY_KEY: &str = "x-idempotency-key";

pub(super) fn read<'r>(headers: &'r HeaderMap, body: &'r [u8]) -> Result<Signed<'r>, VerifyError> {
    let value = required_header(headers, SIGNATURE)?;
    let hex = value.strip_prefix("sha256=").unwrap_or(value);
    Ok(Signed {
        key: KeyKind::Verbatim,
        message: vec![body],
        signatures: vec![decode_hex(SIGNATURE, hex)?],
        claims: Verified {
            event_type: json_string(body_json(body).as_ref(), "/type"),
            idempotency_key: optional_header(headers, IDEMPOTENCY_KEY),
            ..Verified::identified(
                optional_header(headers, EVENT_ID),
                EventIdSource::UnsignedHeader,
            )
        },
    })
}
