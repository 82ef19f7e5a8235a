//! GitHub: `X-Hub-Signature-256: sha256=<hex HMAC-SHA256(secret string, body)>`. No timestamp, so no
//! replay window. The delivery id (`X-GitHub-Delivery`) and event (`X-GitHub-Event`) are not signed.

use http::HeaderMap;

use super::{
    decode_hex, optional_header, required_header, EventIdSource, KeyKind, Signed, Verified,
    VerifyError,
};

const SIGNATURE: &str = "x-hub-signature-256";
const DELIVERY: &str = "x-github-delivery";
const EVENT: &str = "x-github-event";

pub(super) fn read<'r>(headers: &'r HeaderMap, body: &'r [u8]) -> Result<Signed<'r>, VerifyError> {
    let hex = required_header(headers, SIGNATURE)?
        .strip_prefix("sha256=")
        .ok_or(VerifyError::MalformedHeader {
            header: SIGNATURE,
            reason: "missing the sha256= prefix",
        })?;
    Ok(Signed {
        key: KeyKind::Verbatim,
        message: vec![body],
        signatures: vec![decode_hex(SIGNATURE, hex)?],
        claims: Verified {
            event_type: optional_header(headers, EVENT),
            ..Verified::identified(
                optional_header(headers, DELIVERY),
                EventIdSource::UnsignedHeader,
            )
        },
    })
}
