//! The receiver side: checking an incoming webhook's signature under one [`Scheme`], on the raw body,
//! in constant time, with a timestamp tolerance where the scheme has a timestamp.
//!
//! This file owns the [`Verifier`] and the checks all schemes share (headers, timestamp window, "does
//! any secret match"). `scheme` names the schemes, `outcome` holds what verification reports
//! ([`Verified`], [`VerifyError`]), and each scheme's header format lives in its own submodule,
//! whose `read` turns a request into a [`Signed`] for the checks here.
//! Storing events and answering HTTP is `kurir-receiver`'s job.

mod github;
mod hmac_body;
mod kurir;
mod outcome;
mod scheme;
mod shopify;
mod slack;
mod standard;
mod stripe;

use std::time::Duration;

use chrono::{DateTime, Utc};
use http::HeaderMap;
use serde_json::Value;

pub use outcome::{EventIdSource, Verified, VerifyError};
pub use scheme::{Scheme, UnknownScheme};

use crate::mac::{hmac_sha256, tags_equal};
use crate::secret::Secret;
use crate::sign::headers::{WEBHOOK_EVENT_ID, WEBHOOK_ID};

/// How far a signed timestamp may be from `now`, either way, unless configured otherwise.
pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(5 * 60);

/// Checks requests signed under one scheme with any of one or more secrets.
#[derive(Debug, Clone)]
pub struct Verifier {
    scheme: Scheme,
    secrets: Vec<Secret>,
    tolerance: Duration,
}

/// What a scheme reads from a request, before anything is checked: the message it signs, with
/// which key, the signatures sent, and what the request says of itself. Every scheme's is checked
/// the same way ([`Verifier::check`]), so none can skip the timestamp window.
struct Signed<'r> {
    key: KeyKind,
    /// The signed message in parts, HMACed as one.
    message: Vec<&'r [u8]>,
    /// The decoded signatures; any one matching suffices.
    signatures: Vec<Vec<u8>>,
    /// Returned once the checks pass. Its `timestamp`, where the scheme signs one, must be within
    /// the tolerance.
    claims: Verified,
}

/// Which key a scheme derives from a secret.
#[derive(Debug, Clone, Copy)]
enum KeyKind {
    /// The secret string's UTF-8 bytes.
    Verbatim,
    /// [`Secret::hmac_key_standard`].
    Standard,
}

impl Verifier {
    /// A verifier with the default tolerance of 5 minutes. Any of `secrets` may have signed a request,
    /// which is how rotations work; with none, every request fails with [`VerifyError::NoSecrets`].
    pub fn new(scheme: Scheme, secrets: Vec<Secret>) -> Verifier {
        Verifier {
            scheme,
            secrets,
            tolerance: DEFAULT_TOLERANCE,
        }
    }

    /// Sets how far a signed timestamp may be from `now`, in the past or the future.
    pub fn with_tolerance(self, tolerance: Duration) -> Verifier {
        Verifier { tolerance, ..self }
    }

    /// The scheme this verifier checks.
    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    /// The timestamp tolerance in force.
    pub fn tolerance(&self) -> Duration {
        self.tolerance
    }

    /// Verifies `body` (the raw bytes, exactly as received) against `headers`, constant-time.
    /// `now` is injected so tests control the clock. Where the scheme signs the event id, a
    /// header naming another id is refused ([`VerifyError::EventIdMismatch`]).
    pub fn verify(
        &self,
        headers: &HeaderMap,
        body: &[u8],
        now: DateTime<Utc>,
    ) -> Result<Verified, VerifyError> {
        if self.secrets.is_empty() {
            return Err(VerifyError::NoSecrets);
        }
        let verified = self.verify_scheme(headers, body, now)?;
        if matches!(
            verified.event_id_source,
            EventIdSource::SignedHeader | EventIdSource::SignedBody
        ) {
            check_id_headers(headers, verified.event_id.as_deref())?;
        }
        Ok(verified)
    }

    fn verify_scheme(
        &self,
        headers: &HeaderMap,
        body: &[u8],
        now: DateTime<Utc>,
    ) -> Result<Verified, VerifyError> {
        let signed = match self.scheme {
            Scheme::Kurir => kurir::read(headers, body),
            Scheme::StandardWebhooks => standard::read(headers, body),
            Scheme::Stripe => stripe::read(headers, body),
            Scheme::Github => github::read(headers, body),
            Scheme::Shopify => shopify::read(headers, body),
            Scheme::Slack => slack::read(headers, body),
            Scheme::HmacBody => hmac_body::read(headers, body),
        }?;
        self.check(signed, now)
    }

    /// The timestamp window first (where the scheme signs a timestamp), then the signature.
    fn check(&self, signed: Signed<'_>, now: DateTime<Utc>) -> Result<Verified, VerifyError> {
        if let Some(timestamp) = signed.claims.timestamp {
            self.check_timestamp(timestamp, now)?;
        }
        self.check_signature(signed.key, &signed.message, &signed.signatures)?;
        Ok(signed.claims)
    }

    /// Fails unless `timestamp` is within the tolerance of `now`, either way.
    fn check_timestamp(
        &self,
        timestamp: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<(), VerifyError> {
        let tolerance = self.tolerance;
        let age = now.signed_duration_since(timestamp);
        match (age.to_std(), (-age).to_std()) {
            (Ok(age), _) if age > tolerance => Err(VerifyError::TimestampTooOld { age, tolerance }),
            (_, Ok(ahead)) if ahead > tolerance => {
                Err(VerifyError::TimestampTooNew { ahead, tolerance })
            }
            _ => Ok(()),
        }
    }

    /// Succeeds if any candidate equals the HMAC of `message` under any secret's key.
    fn check_signature(
        &self,
        key: KeyKind,
        message: &[&[u8]],
        candidates: &[Vec<u8>],
    ) -> Result<(), VerifyError> {
        let signed_by = |secret: &Secret| {
            let tag = match key {
                KeyKind::Verbatim => hmac_sha256(secret.hmac_key_verbatim(), message),
                KeyKind::Standard => hmac_sha256(&secret.hmac_key_standard(), message),
            };
            candidates
                .iter()
                .any(|candidate| tags_equal(&tag, candidate))
        };
        if self.secrets.iter().any(signed_by) {
            Ok(())
        } else {
            Err(VerifyError::SignatureMismatch)
        }
    }
}

/// Headers that may name the event beside the id a scheme signs: kurir sends its own and the
/// Standard Webhooks headers together, and Svix sends `svix-id`.
const ID_HEADERS: [&str; 3] = [WEBHOOK_EVENT_ID, WEBHOOK_ID, "svix-id"];

/// Fails when one of [`ID_HEADERS`] disagrees with `signed_id`, the id the signature covers.
/// Events are stored once under the signed id, so such a request is either broken or a captured
/// one replayed under a new id; either way it must not pass as another event.
fn check_id_headers(headers: &HeaderMap, signed_id: Option<&str>) -> Result<(), VerifyError> {
    let Some(signed_id) = signed_id else {
        return Ok(());
    };
    match ID_HEADERS.into_iter().find(|name| {
        headers
            .get(*name)
            .is_some_and(|v| v.as_bytes() != signed_id.as_bytes())
    }) {
        Some(header) => Err(VerifyError::EventIdMismatch { header }),
        None => Ok(()),
    }
}

/// The value of a header the scheme cannot do without.
fn required_header<'h>(headers: &'h HeaderMap, name: &'static str) -> Result<&'h str, VerifyError> {
    let value = headers.get(name).ok_or(VerifyError::MissingHeader(name))?;
    value.to_str().map_err(|_| VerifyError::MalformedHeader {
        header: name,
        reason: "not visible ASCII",
    })
}

/// The value of an informational header; absent, empty or unreadable all mean `None`.
fn optional_header(headers: &HeaderMap, name: &str) -> Option<String> {
    let value = headers.get(name)?.to_str().ok()?.trim();
    (!value.is_empty()).then(|| value.to_owned())
}

/// Reads a header value holding unix seconds.
fn parse_unix_seconds(header: &'static str, value: &str) -> Result<DateTime<Utc>, VerifyError> {
    let seconds: i64 = value
        .trim()
        .parse()
        .map_err(|_| VerifyError::MalformedHeader {
            header,
            reason: "not an integer number of unix seconds",
        })?;
    DateTime::from_timestamp(seconds, 0).ok_or(VerifyError::MalformedHeader {
        header,
        reason: "unix seconds out of range",
    })
}

/// Decodes a lowercase hex signature. Every hex scheme specifies lowercase; refusing uppercase keeps
/// exactly one accepted spelling of each signature.
fn decode_hex(header: &'static str, value: &str) -> Result<Vec<u8>, VerifyError> {
    let malformed = VerifyError::MalformedHeader {
        header,
        reason: "signature is not lowercase hex",
    };
    if value.bytes().any(|b| b.is_ascii_uppercase()) {
        return Err(malformed);
    }
    hex::decode(value).map_err(|_| malformed)
}

/// The body parsed as JSON, for schemes that carry the event id or type inside it.
fn body_json(body: &[u8]) -> Option<Value> {
    serde_json::from_slice(body).ok()
}

/// A non-empty string at `pointer` (RFC 6901, e.g. `/event/type`) in a JSON body.
fn json_string(json: Option<&Value>, pointer: &str) -> Option<String> {
    let value = json?.pointer(pointer)?.as_str()?;
    (!value.is_empty()).then(|| value.to_owned())
}
