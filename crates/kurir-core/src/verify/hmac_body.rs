//! The second seed scheme: `X-Signature` = lowercase hex HMAC-SHA256(secret string, body), optionally
//! prefixed `sha256=`. No timestamp. `X-Event-Id` and `X-Idempotency-Key` are not signed; the event
//! type is the body's `type` field when the body is JSON.

use http::HeaderMap;

use super::{
    body_json, decode_hex, json_string, optional_header, required_header, EventIdSource, KeyKind,
    Verified, Verifier, VerifyError,
};

const SIGNATURE: &str = "x-signature";
const EVENT_ID: &str = "x-event-id";
const IDEMPOTENCY_KEY: &str = "x-idempotency-key";

pub(super) fn verify(
    verifier: &Verifier,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Verified, VerifyError> {
    let value = required_header(headers, SIGNATURE)?;
    let hex = value.strip_prefix("sha256=").unwrap_or(value);
    verifier.check_signature(KeyKind::Verbatim, &[body], &[decode_hex(SIGNATURE, hex)?])?;
    Ok(Verified {
        event_type: json_string(body_json(body).as_ref(), "/type"),
        idempotency_key: optional_header(headers, IDEMPOTENCY_KEY),
        ..Verified::identified(
            optional_header(headers, EVENT_ID),
            EventIdSource::UnsignedHeader,
        )
    })
}
