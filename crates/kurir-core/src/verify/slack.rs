//! Slack: `X-Slack-Signature: v0=<hex HMAC-SHA256(secret string, "v0:" + ts + ":" + body)>` with
//! `X-Slack-Request-Timestamp` in unix seconds. Events API bodies carry `event_id` and `event.type`;
//! slash commands and interactions (form-encoded) carry neither.

use http::HeaderMap;

use super::{
    body_json, decode_hex, json_string, parse_unix_seconds, required_header, EventIdSource,
    KeyKind, Signed, Verified, VerifyError,
};

const SIGNATURE: &str = "x-slack-signature";
const TIMESTAMP: &str = "x-slack-request-timestamp";

pub(super) fn read<'r>(headers: &'r HeaderMap, body: &'r [u8]) -> Result<Signed<'r>, VerifyError> {
    let timestamp_header = required_header(headers, TIMESTAMP)?;
    let hex = required_header(headers, SIGNATURE)?
        .strip_prefix("v0=")
        .ok_or(VerifyError::MalformedHeader {
            header: SIGNATURE,
            reason: "missing the v0= prefix",
        })?;
    let signature = decode_hex(SIGNATURE, hex)?;
    let timestamp = parse_unix_seconds(TIMESTAMP, timestamp_header)?;
    let json = body_json(body);
    let event_type =
        json_string(json.as_ref(), "/event/type").or_else(|| json_string(json.as_ref(), "/type"));
    Ok(Signed {
        key: KeyKind::Verbatim,
        message: vec![b"v0:", timestamp_header.as_bytes(), b":", body],
        signatures: vec![signature],
        claims: Verified {
            event_type,
            timestamp: Some(timestamp),
            ..Verified::identified(
                json_string(json.as_ref(), "/event_id"),
                EventIdSource::SignedBody,
            )
        },
    })
}
