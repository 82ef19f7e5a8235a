//! Stripe: `Stripe-Signature: t=<unix>,v1=<hex>[,v1=…][,v0=…]`, where each `v1` is hex
//! HMAC-SHA256(secret string, t + "." + body). `v0` and unknown elements are ignored. The event id and
//! type are the signed body's `id` and `type` fields.

use http::HeaderMap;

use super::{
    body_json, decode_hex, json_string, parse_unix_seconds, required_header, EventIdSource,
    KeyKind, Signed, Verified, VerifyError,
};

const SIGNATURE: &str = "stripe-signature";

pub(super) fn read<'r>(headers: &'r HeaderMap, body: &'r [u8]) -> Result<Signed<'r>, VerifyError> {
    let header = parse_header(required_header(headers, SIGNATURE)?)?;
    let timestamp = parse_unix_seconds(SIGNATURE, header.t)?;
    let json = body_json(body);
    Ok(Signed {
        key: KeyKind::Verbatim,
        message: vec![header.t.as_bytes(), b".", body],
        signatures: header.v1,
        claims: Verified {
            event_type: json_string(json.as_ref(), "/type"),
            timestamp: Some(timestamp),
            ..Verified::identified(json_string(json.as_ref(), "/id"), EventIdSource::SignedBody)
        },
    })
}

/// The parts of a `Stripe-Signature` value kurir uses.
struct StripeHeader<'a> {
    /// The timestamp exactly as sent, since it is signed as text.
    t: &'a str,
    v1: Vec<Vec<u8>>,
}

fn parse_header(value: &str) -> Result<StripeHeader<'_>, VerifyError> {
    let mut t = None;
    let mut v1 = Vec::new();
    for element in value.split(',') {
        match element.trim().split_once('=') {
            Some(("t", value)) if t.is_none() => t = Some(value),
            Some(("v1", value)) => v1.push(decode_hex(SIGNATURE, value)?),
            _ => {}
        }
    }
    let t = t.ok_or(VerifyError::MalformedHeader {
        header: SIGNATURE,
        reason: "no t= element",
    })?;
    Ok(StripeHeader { t, v1 })
}
