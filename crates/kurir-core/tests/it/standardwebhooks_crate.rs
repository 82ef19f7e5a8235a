//! Cross-check with the reference `standardwebhooks` crate: what kurir signs it verifies, what it signs
//! kurir verifies. The crate reads the real clock, so these tests sign at the current time.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use chrono::{DateTime, Utc};
use kurir_core::{sign_standard, signature_headers, Scheme, Secret, Verifier};
use proptest::prelude::*;
use standardwebhooks::Webhook;

use crate::header_map;

/// Now, to whole seconds, as both sides sign it.
fn now() -> DateTime<Utc> {
    DateTime::from_timestamp(Utc::now().timestamp(), 0).unwrap()
}

const SECRETS: [&str; 3] = [
    "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD",
    "whsec_MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=",
    "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
];

#[test]
fn reference_crate_verifies_what_kurir_sends_even_during_rotation() {
    let body = br#"{"event_id":"evt_1","data":{"total":250000}}"#;
    let secrets: Vec<Secret> = SECRETS.iter().map(|s| Secret::parse(s).unwrap()).collect();
    let sent = signature_headers(
        "evt_1",
        "order.paid",
        &secrets.iter().collect::<Vec<_>>(),
        now(),
        body,
    );
    let headers = header_map(&sent);
    for secret in SECRETS {
        Webhook::new(secret)
            .unwrap()
            .verify(body, &headers)
            .unwrap();
    }
}

#[test]
fn kurir_verifies_what_the_reference_crate_signs() {
    let body = br#"{"type":"invoice.paid"}"#;
    let at = now();
    for secret in SECRETS {
        let signature = Webhook::new(secret)
            .unwrap()
            .sign("msg_1", at.timestamp(), body)
            .unwrap();
        let headers = header_map(&[
            ("webhook-id", "msg_1".to_owned()),
            ("webhook-timestamp", at.timestamp().to_string()),
            ("webhook-signature", signature),
        ]);
        let verifier = Verifier::new(
            Scheme::StandardWebhooks,
            vec![Secret::parse(secret).unwrap()],
        );
        assert!(verifier.verify(&headers, body, at).is_ok(), "{secret}");
    }
}

#[test]
fn a_generated_secret_works_with_the_reference_crate() {
    let secret = Secret::generate();
    let body = b"{}";
    let at = now();
    let ours = sign_standard(&secret, "msg_1", at.timestamp(), body);
    let theirs = Webhook::new(secret.expose())
        .unwrap()
        .sign("msg_1", at.timestamp(), body)
        .unwrap();
    assert_eq!(ours, theirs);
}

proptest! {
    #[test]
    fn kurir_and_the_reference_crate_sign_identically(
        key in proptest::collection::vec(any::<u8>(), 16..64),
        id in "[A-Za-z0-9_-]{1,40}",
        timestamp in 0i64..4_000_000_000,
        body in ".{0,256}",
    ) {
        let secret = format!("whsec_{}", STANDARD.encode(&key));
        let ours = sign_standard(&Secret::parse(&secret).unwrap(), &id, timestamp, body.as_bytes());
        let theirs = Webhook::new(&secret).unwrap().sign(&id, timestamp, body.as_bytes()).unwrap();
        prop_assert_eq!(ours, theirs);
    }
}
