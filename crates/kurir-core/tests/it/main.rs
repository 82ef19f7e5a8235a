//! kurir-core's integration tests, one binary: published vectors, every scheme's failure modes,
//! property round-trips, a cross-check with the `standardwebhooks` crate, retry policy, envelope, secret.
//!
//! The helpers here sign requests for every scheme with code written independently of the crate's
//! own signer (straight `hmac`), so a round-trip test cannot pass by the signer and the verifier sharing
//! a mistake.

// A test reads best as one story from setup to assertions; the function length the workspace
// keeps to (clippy.toml) is for the product code.
#![allow(clippy::too_many_lines)]

mod breaker;
mod envelope;
mod rate;
mod retry;
mod roundtrip;
mod schemes;
mod secret;
mod standardwebhooks_crate;
mod vectors;

use std::sync::OnceLock;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use chrono::{DateTime, SecondsFormat, Utc};
use hmac::{Hmac, Mac};
use http::{HeaderMap, HeaderName, HeaderValue};
use kurir_core::{Scheme, Secret};
use serde_json::Value;
use sha2::Sha256;

/// The repository's copy of the shared signature vectors.
pub fn fixtures() -> &'static Value {
    static FIXTURES: OnceLock<Value> = OnceLock::new();
    FIXTURES.get_or_init(|| {
        serde_json::from_str(include_str!("../fixtures/signatures.json"))
            .expect("valid fixture JSON")
    })
}

/// The string at `pointer` in the fixtures.
pub fn fixture_str(pointer: &str) -> &'static str {
    fixtures()
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("fixture {pointer} is a string"))
}

/// The integer at `pointer` in the fixtures.
pub fn fixture_i64(pointer: &str) -> i64 {
    fixtures()
        .pointer(pointer)
        .and_then(Value::as_i64)
        .unwrap_or_else(|| panic!("fixture {pointer} is an integer"))
}

/// A header map from name/value pairs.
pub fn header_map<N: AsRef<str>, V: AsRef<str>>(pairs: &[(N, V)]) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for (name, value) in pairs {
        headers.append(
            HeaderName::from_bytes(name.as_ref().as_bytes()).expect("valid header name"),
            HeaderValue::from_str(value.as_ref()).expect("valid header value"),
        );
    }
    headers
}

/// Unix seconds as a UTC time.
pub fn at(unix: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(unix, 0).expect("in range")
}

/// A secret read the way a receiver configured for `scheme` reads it.
pub fn secret_for(scheme: Scheme, s: &str) -> Secret {
    scheme.parse_secret(s).expect("valid secret")
}

fn hmac_sha256(key: &[u8], message: &[u8]) -> Vec<u8> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).unwrap();
    mac.update(message);
    mac.finalize().into_bytes().to_vec()
}

/// A request as a sender of `scheme` would sign it: headers as owned pairs, so tests can alter them.
#[derive(Debug, Clone)]
pub struct SignedRequest {
    /// Header name/value pairs in sending order.
    pub headers: Vec<(String, String)>,
    /// The signed body.
    pub body: Vec<u8>,
}

impl SignedRequest {
    /// The headers as sent.
    pub fn header_map(&self) -> HeaderMap {
        header_map(&self.headers)
    }

    /// The headers without `name`.
    pub fn without(&self, name: &str) -> HeaderMap {
        let kept: Vec<_> = self
            .headers
            .iter()
            .filter(|(n, _)| n != name)
            .cloned()
            .collect();
        header_map(&kept)
    }

    /// The headers with `name`'s value replaced by `value`.
    pub fn with(&self, name: &str, value: &str) -> HeaderMap {
        let mut pairs = self.headers.clone();
        for pair in pairs.iter_mut().filter(|(n, _)| n == name) {
            pair.1 = value.to_owned();
        }
        header_map(&pairs)
    }
}

/// Signs `body` for `scheme` with `secret` (a `whsec_` string, valid for every scheme) at `unix`.
pub fn sign_request(
    scheme: Scheme,
    secret: &str,
    id: &str,
    unix: i64,
    body: &[u8],
) -> SignedRequest {
    let key = secret.as_bytes();
    let ts = unix.to_string();
    let cat = |parts: &[&[u8]]| parts.concat();
    let pairs: Vec<(&str, String)> = match scheme {
        Scheme::Kurir => {
            let stamp = at(unix).to_rfc3339_opts(SecondsFormat::Secs, true);
            let sig = hex::encode(hmac_sha256(key, &cat(&[stamp.as_bytes(), b".", body])));
            vec![
                ("x-webhook-event", "order.paid".into()),
                ("x-webhook-event-id", id.into()),
                ("x-webhook-timestamp", stamp),
                ("x-webhook-signature", sig),
            ]
        }
        Scheme::StandardWebhooks => {
            let std_key = STANDARD
                .decode(secret.strip_prefix("whsec_").unwrap())
                .unwrap();
            let msg = cat(&[id.as_bytes(), b".", ts.as_bytes(), b".", body]);
            let sig = format!("v1,{}", STANDARD.encode(hmac_sha256(&std_key, &msg)));
            vec![
                ("webhook-id", id.into()),
                ("webhook-timestamp", ts),
                ("webhook-signature", sig),
            ]
        }
        Scheme::Stripe => {
            let sig = hex::encode(hmac_sha256(key, &cat(&[ts.as_bytes(), b".", body])));
            vec![("stripe-signature", format!("t={ts},v1={sig}"))]
        }
        Scheme::Github => vec![
            (
                "x-hub-signature-256",
                format!("sha256={}", hex::encode(hmac_sha256(key, body))),
            ),
            ("x-github-delivery", id.into()),
            ("x-github-event", "push".into()),
        ],
        Scheme::Shopify => vec![
            (
                "x-shopify-hmac-sha256",
                STANDARD.encode(hmac_sha256(key, body)),
            ),
            ("x-shopify-webhook-id", id.into()),
            ("x-shopify-topic", "orders/create".into()),
        ],
        Scheme::Slack => {
            let sig = hex::encode(hmac_sha256(key, &cat(&[b"v0:", ts.as_bytes(), b":", body])));
            vec![
                ("x-slack-request-timestamp", ts),
                ("x-slack-signature", format!("v0={sig}")),
            ]
        }
        Scheme::HmacBody => vec![
            ("x-signature", hex::encode(hmac_sha256(key, body))),
            ("x-event-id", id.into()),
            ("x-idempotency-key", format!("idem-{id}")),
        ],
    };
    SignedRequest {
        headers: pairs.into_iter().map(|(n, v)| (n.to_owned(), v)).collect(),
        body: body.to_vec(),
    }
}

/// The headers whose values the scheme signs or checks: altering any must fail verification.
pub fn protected_headers(scheme: Scheme) -> &'static [&'static str] {
    match scheme {
        Scheme::Kurir => &["x-webhook-timestamp", "x-webhook-signature"],
        Scheme::StandardWebhooks => &["webhook-id", "webhook-timestamp", "webhook-signature"],
        Scheme::Stripe => &["stripe-signature"],
        Scheme::Github => &["x-hub-signature-256"],
        Scheme::Shopify => &["x-shopify-hmac-sha256"],
        Scheme::Slack => &["x-slack-request-timestamp", "x-slack-signature"],
        Scheme::HmacBody => &["x-signature"],
    }
}

/// Whether the scheme has a signed timestamp (and so a tolerance window).
pub fn has_timestamp(scheme: Scheme) -> bool {
    matches!(
        scheme,
        Scheme::Kurir | Scheme::StandardWebhooks | Scheme::Stripe | Scheme::Slack
    )
}
