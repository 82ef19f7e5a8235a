//! Shopify: `X-Shopify-Hmac-Sha256: <base64 HMAC-SHA256(secret string, body)>`. No timestamp. The
//! webhook id (`X-Shopify-Webhook-Id`) and topic (`X-Shopify-Topic`) are not signed.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use http::HeaderMap;

use super::{
    optional_header, required_header, EventIdSource, KeyKind, Verified, Verifier, VerifyError,
};

const SIGNATURE: &str = "x-shopify-hmac-sha256";
const WEBHOOK_ID: &str = "x-shopify-webhook-id";
const TOPIC: &str = "x-shopify-topic";

pub(super) fn verify(
    verifier: &Verifier,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Verified, VerifyError> {
    let signature = STANDARD
        .decode(required_header(headers, SIGNATURE)?.trim())
        .map_err(|_| VerifyError::MalformedHeader {
            header: SIGNATURE,
            reason: "signature is not base64",
        })?;
    verifier.check_signature(KeyKind::Verbatim, &[body], &[signature])?;
    Ok(Verified {
        event_type: optional_header(headers, TOPIC),
        ..Verified::identified(
            optional_header(headers, WEBHOOK_ID),
            EventIdSource::UnsignedHeader,
        )
    })
}
