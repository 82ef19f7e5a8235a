//! Standard Webhooks (and Svix, the same scheme under `svix-*` header names):
//! `webhook-signature` = space-separated `v1,<base64 HMAC-SHA256(key, id + "." + ts + "." + body)>`,
//! with the key decoded from the `whsec_` secret. Entries of other versions (the asymmetric `v1a`) are
//! skipped. The id is signed; the event type is read from the body's `type` field.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use http::HeaderMap;

use super::{
    body_json, json_string, parse_unix_seconds, required_header, EventIdSource, KeyKind, Signed,
    Verified, VerifyError,
};
use crate::sign::headers::{WEBHOOK_ID, WEBHOOK_SIGNATURE_STD, WEBHOOK_TIMESTAMP_STD};

/// The three headers under one naming.
struct HeaderNames {
    id: &'static str,
    timestamp: &'static str,
    signature: &'static str,
}

const UNBRANDED: HeaderNames = HeaderNames {
    id: WEBHOOK_ID,
    timestamp: WEBHOOK_TIMESTAMP_STD,
    signature: WEBHOOK_SIGNATURE_STD,
};

const SVIX: HeaderNames = HeaderNames {
    id: "svix-id",
    timestamp: "svix-timestamp",
    signature: "svix-signature",
};

pub(super) fn read<'r>(headers: &'r HeaderMap, body: &'r [u8]) -> Result<Signed<'r>, VerifyError> {
    let names = if !headers.contains_key(UNBRANDED.id) && headers.contains_key(SVIX.id) {
        SVIX
    } else {
        UNBRANDED
    };
    let id = required_header(headers, names.id)?;
    let timestamp_header = required_header(headers, names.timestamp)?;
    let signatures = v1_signatures(names.signature, required_header(headers, names.signature)?)?;
    let timestamp = parse_unix_seconds(names.timestamp, timestamp_header)?;
    Ok(Signed {
        key: KeyKind::Standard,
        message: vec![id.as_bytes(), b".", timestamp_header.as_bytes(), b".", body],
        signatures,
        claims: Verified {
            event_type: json_string(body_json(body).as_ref(), "/type"),
            timestamp: Some(timestamp),
            ..Verified::identified(Some(id.to_owned()), EventIdSource::SignedHeader)
        },
    })
}

/// The decoded `v1` signatures of a signature header. Other versions and undecodable entries are
/// skipped (they can never match); a header with no entries at all is malformed.
fn v1_signatures(header: &'static str, value: &str) -> Result<Vec<Vec<u8>>, VerifyError> {
    let mut entries = value
        .split(' ')
        .filter(|entry| !entry.is_empty())
        .peekable();
    if entries.peek().is_none() {
        return Err(VerifyError::MalformedHeader {
            header,
            reason: "no signatures",
        });
    }
    Ok(entries
        .filter_map(|entry| entry.split_once(','))
        .filter(|(version, _)| *version == "v1")
        .filter_map(|(_, signature)| STANDARD.decode(signature).ok())
        .collect())
}
