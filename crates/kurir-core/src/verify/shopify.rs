//! Shopify: `X-Shopify-Hmac-Sha256: <base64 HMAC-SHA256(secret string, body)>`. No timestamp. The
//! webhook id (`X-Shopify-Webhook-Id`) and topic (`X-Shopify-Topic`) are not signed.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use http::HeaderMap;

use super::{
    optional_header, required_header, EventIdSource, KeyKind, Signed, Verified, VerifyError,
};

const SIGNATURE: &str = "x-shopify-hmac-sha256";
const WEBHOOK_ID: &str = "x-shopify-webhook-id";
const TOPIC: &str = "x-shopify-topic";

pub(super) fn read<'r>(headers: &'r HeaderMap, body: &'r [u8]) -> Result<Signed<'r>, VerifyError> {
    let signature = STANDARD
        .decode(required_header(headers, SIGNATURE)?.trim())
        .map_err(|_| VerifyError::MalformedHeader {
            header: SIGNATURE,
            reason: "signature is not base64",
        })?;
    Ok(Signed {
        key: KeyKind::Verbatim,
        message: vec![body],
        signatures: vec![signature],
        claims: Verified {
            event_type: optional_header(headers, TOPIC),
            ..Verified::identified(
                optional_header(headers, WEBHOOK_ID),
                EventIdSource::UnsignedHeader,
            )
        },
    })
}
