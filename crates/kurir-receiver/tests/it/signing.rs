//! Signing requests as each provider does, for the tests: kurir-core signs its own two schemes;
//! the others are a few lines of HMAC here, checked against the reference vectors in
//! `tests/fixtures/signatures.json` (copied from the project's shared vectors) before use.

use std::sync::OnceLock;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use chrono::{DateTime, SecondsFormat, Utc};
use hmac::{Hmac, Mac};
use kurir_core::{sign_kurir, sign_standard, Secret};
use kurir_receiver::Scheme;
use serde_json::Value;
use sha2::Sha256;

/// Request headers as (name, value) pairs.
pub type Headers = Vec<(String, String)>;

/// The reference vectors.
pub fn fixtures() -> &'static Value {
    static FIXTURES: OnceLock<Value> = OnceLock::new();
    FIXTURES
        .get_or_init(|| serde_json::from_str(include_str!("../fixtures/signatures.json")).unwrap())
}

/// A fixture string at a JSON pointer.
pub fn fixture(pointer: &str) -> &'static str {
    fixtures()
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("fixture {pointer} missing"))
}

/// Unix seconds as a time.
pub fn at(unix: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(unix, 0).unwrap()
}

/// A JSON body that carries `event_id` wherever a scheme may look for it (`id`, `event_id`).
pub fn body_with_id(event_id: &str) -> Vec<u8> {
    serde_json::json!({
        "id": event_id,
        "event_id": event_id,
        "type": "invoice.paid",
        "data": {"invoice": "inv_123", "amount": 4200}
    })
    .to_string()
    .into_bytes()
}

/// Headers signing `body` under `scheme` with `secret` at `at`; `event_id` goes into the scheme's
/// delivery header where it has one (Stripe and Slack read it from the body).
pub fn sign(
    scheme: Scheme,
    secret: &str,
    event_id: &str,
    at: DateTime<Utc>,
    body: &[u8],
) -> Headers {
    let unix = at.timestamp();
    let pairs: Vec<(&str, String)> = match scheme {
        Scheme::Kurir => {
            let timestamp = at.to_rfc3339_opts(SecondsFormat::Secs, true);
            let secret = Secret::parse_verbatim(secret).unwrap();
            vec![
                ("x-webhook-event", "invoice.paid".into()),
                ("x-webhook-event-id", event_id.into()),
                ("x-webhook-signature", sign_kurir(&secret, &timestamp, body)),
                ("x-webhook-timestamp", timestamp),
            ]
        }
        Scheme::StandardWebhooks => {
            let secret = Secret::parse(secret).unwrap();
            vec![
                ("webhook-id", event_id.into()),
                ("webhook-timestamp", unix.to_string()),
                (
                    "webhook-signature",
                    sign_standard(&secret, event_id, unix, body),
                ),
            ]
        }
        Scheme::Stripe => vec![("stripe-signature", stripe_header(secret, unix, body))],
        Scheme::Github => vec![
            ("x-github-delivery", event_id.into()),
            ("x-github-event", "push".into()),
            (
                "x-hub-signature-256",
                format!("sha256={}", hex::encode(mac(secret, &[body]))),
            ),
        ],
        Scheme::Shopify => vec![
            ("x-shopify-webhook-id", event_id.into()),
            ("x-shopify-topic", "orders/create".into()),
            (
                "x-shopify-hmac-sha256",
                STANDARD.encode(mac(secret, &[body])),
            ),
        ],
        Scheme::Slack => vec![
            ("x-slack-request-timestamp", unix.to_string()),
            ("x-slack-signature", slack_header(secret, unix, body)),
        ],
        Scheme::HmacBody => vec![
            ("x-event-id", event_id.into()),
            ("x-idempotency-key", format!("idem-{event_id}")),
            ("x-signature", hex::encode(mac(secret, &[body]))),
        ],
    };
    pairs
        .into_iter()
        .map(|(name, value)| (name.to_owned(), value))
        .collect()
}

/// `t=…,v1=hex(HMAC(secret, "t.body"))`.
pub fn stripe_header(secret: &str, unix: i64, body: &[u8]) -> String {
    let t = unix.to_string();
    let tag = mac(secret, &[t.as_bytes(), b".", body]);
    format!("t={t},v1={}", hex::encode(tag))
}

/// `v0=hex(HMAC(secret, "v0:ts:body"))`.
pub fn slack_header(secret: &str, unix: i64, body: &[u8]) -> String {
    let ts = unix.to_string();
    let tag = mac(secret, &[b"v0:", ts.as_bytes(), b":", body]);
    format!("v0={}", hex::encode(tag))
}

/// HMAC-SHA256 keyed on the secret string's bytes.
fn mac(secret: &str, parts: &[&[u8]]) -> Vec<u8> {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().to_vec()
}

/// A header value in `headers`.
pub fn header<'h>(headers: &'h Headers, name: &str) -> &'h str {
    headers
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
        .unwrap_or_else(|| panic!("no header {name}"))
}

/// A request built from a scheme's reference vector: secret, verification time, headers, body.
/// Where the scheme reads its event id from an unsigned header, `event_id` is added there; Stripe's
/// and Slack's reference bodies carry no event id.
pub struct Reference {
    pub secret: &'static str,
    pub at: Option<DateTime<Utc>>,
    pub headers: Headers,
    pub body: Vec<u8>,
}

pub fn reference(scheme: Scheme, event_id: &str) -> Reference {
    let own = |pairs: &[(&str, &str)]| -> Headers {
        pairs
            .iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
            .collect()
    };
    let unix = |pointer: &str| at(fixtures().pointer(pointer).and_then(Value::as_i64).unwrap());
    match scheme {
        Scheme::Kurir => {
            let timestamp = fixture("/kurir_seed_scheme/cases/0/timestamp");
            Reference {
                secret: fixture("/kurir_seed_scheme/secret"),
                at: Some(DateTime::parse_from_rfc3339(timestamp).unwrap().to_utc()),
                headers: own(&[
                    ("x-webhook-event-id", event_id),
                    ("x-webhook-timestamp", timestamp),
                    (
                        "x-webhook-signature",
                        fixture("/kurir_seed_scheme/cases/0/signature"),
                    ),
                ]),
                body: fixture("/kurir_seed_scheme/body").into(),
            }
        }
        Scheme::StandardWebhooks => Reference {
            secret: fixture("/standard_webhooks/2/secret"),
            at: Some(unix("/standard_webhooks/2/timestamp")),
            headers: own(&[
                ("webhook-id", fixture("/standard_webhooks/2/id")),
                ("webhook-timestamp", "1700000000"),
                (
                    "webhook-signature",
                    fixture("/standard_webhooks/2/signature"),
                ),
            ]),
            body: fixture("/standard_webhooks/2/body").into(),
        },
        Scheme::Stripe => Reference {
            secret: fixture("/stripe/secret"),
            at: Some(unix("/stripe/t")),
            headers: own(&[("stripe-signature", fixture("/stripe/header"))]),
            body: fixture("/stripe/body").into(),
        },
        Scheme::Github => Reference {
            secret: fixture("/github/1/secret"),
            at: None,
            headers: own(&[
                ("x-github-delivery", event_id),
                ("x-hub-signature-256", fixture("/github/1/header")),
            ]),
            body: fixture("/github/1/body").into(),
        },
        Scheme::Shopify => Reference {
            secret: fixture("/shopify/secret"),
            at: None,
            headers: own(&[
                ("x-shopify-webhook-id", event_id),
                ("x-shopify-hmac-sha256", fixture("/shopify/header")),
            ]),
            body: fixture("/shopify/body").into(),
        },
        Scheme::Slack => Reference {
            secret: fixture("/slack/secret"),
            at: Some(unix("/slack/timestamp")),
            headers: own(&[
                ("x-slack-request-timestamp", "1531420618"),
                ("x-slack-signature", fixture("/slack/header")),
            ]),
            body: fixture("/slack/body").into(),
        },
        Scheme::HmacBody => Reference {
            secret: fixture("/hmac_body_scheme/secret"),
            at: None,
            headers: own(&[
                ("x-event-id", event_id),
                ("x-signature", fixture("/hmac_body_scheme/signature")),
            ]),
            body: fixture("/hmac_body_scheme/body").into(),
        },
    }
}

/// The test signers reproduce every reference signature they are used in place of.
#[test]
fn test_signers_reproduce_the_reference_vectors() {
    for scheme in Scheme::ALL {
        let r = reference(scheme, "evt_vector");
        let when = r.at.unwrap_or_else(|| at(0));
        let ours = sign(scheme, r.secret, "evt_vector", when, &r.body);
        let signature_header = match scheme {
            Scheme::Kurir => "x-webhook-signature",
            Scheme::StandardWebhooks => "webhook-signature",
            Scheme::Stripe => "stripe-signature",
            Scheme::Github => "x-hub-signature-256",
            Scheme::Shopify => "x-shopify-hmac-sha256",
            Scheme::Slack => "x-slack-signature",
            Scheme::HmacBody => "x-signature",
        };
        if scheme == Scheme::StandardWebhooks {
            // Signed over the vector's own id, not ours.
            let secret = Secret::parse(r.secret).unwrap();
            let id = header(&r.headers, "webhook-id");
            assert_eq!(
                sign_standard(&secret, id, when.timestamp(), &r.body),
                header(&r.headers, signature_header)
            );
            continue;
        }
        assert_eq!(
            header(&ours, signature_header),
            header(&r.headers, signature_header),
            "{scheme}"
        );
    }
}
