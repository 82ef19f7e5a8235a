//! Properties over random inputs: what is signed verifies, and changing any signed byte (body, signed
//! id, timestamp, signature) makes verification fail, for every scheme.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use chrono::{DateTime, Utc};
use http::HeaderMap;
use kurir_core::{signature_headers, Scheme, Secret, Verifier};
use proptest::prelude::*;
use proptest::sample::Index;

use crate::{at, header_map, protected_headers, secret_for, sign_request};

fn any_scheme() -> impl Strategy<Value = Scheme> {
    proptest::sample::select(Scheme::ALL.to_vec())
}

/// A `whsec_` secret with a random key: valid for every scheme.
fn any_secret() -> impl Strategy<Value = String> {
    proptest::collection::vec(any::<u8>(), 16..48)
        .prop_map(|key| format!("whsec_{}", STANDARD.encode(key)))
}

fn any_body() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 1..512)
}

/// Unix seconds between 2001 and 2096.
fn any_unix() -> impl Strategy<Value = i64> {
    1_000_000_000i64..4_000_000_000
}

fn verify(scheme: Scheme, secret: &str, headers: &HeaderMap, body: &[u8], unix: i64) -> bool {
    Verifier::new(scheme, vec![secret_for(scheme, secret)])
        .verify(headers, body, at(unix))
        .is_ok()
}

/// `value` with the byte at `position` replaced by `replacement`, a different visible ASCII character.
fn replace_char(value: &str, position: Index, replacement: u8) -> Option<String> {
    let mut bytes = value.as_bytes().to_vec();
    let i = position.index(bytes.len());
    (bytes[i] != replacement).then(|| {
        bytes[i] = replacement;
        String::from_utf8(bytes).unwrap()
    })
}

proptest! {
    #[test]
    fn signed_requests_verify(
        scheme in any_scheme(), secret in any_secret(), id in "[A-Za-z0-9_-]{1,40}",
        body in any_body(), unix in any_unix(),
    ) {
        let request = sign_request(scheme, &secret, &id, unix, &body);
        prop_assert!(verify(scheme, &secret, &request.header_map(), &body, unix));
    }

    #[test]
    fn flipping_a_body_byte_is_rejected(
        scheme in any_scheme(), secret in any_secret(), body in any_body(), unix in any_unix(),
        position in any::<Index>(), flip in 1u8..=255,
    ) {
        let request = sign_request(scheme, &secret, "evt_1", unix, &body);
        let mut tampered = body.clone();
        tampered[position.index(body.len())] ^= flip;
        prop_assert!(!verify(scheme, &secret, &request.header_map(), &tampered, unix));
    }

    #[test]
    fn altering_a_signed_header_is_rejected(
        scheme in any_scheme(), secret in any_secret(), id in "[A-Za-z0-9_-]{1,40}",
        body in any_body(), unix in any_unix(),
        header in any::<Index>(), position in any::<Index>(), replacement in 0x21u8..=0x7e,
    ) {
        let request = sign_request(scheme, &secret, &id, unix, &body);
        let names = protected_headers(scheme);
        let name = names[header.index(names.len())];
        let value = &request.headers.iter().find(|(n, _)| n == name).unwrap().1;
        let altered = replace_char(value, position, replacement);
        prop_assume!(altered.is_some());
        let headers = request.with(name, &altered.unwrap());
        prop_assert!(!verify(scheme, &secret, &headers, &body, unix), "{} = {:?}", name, headers.get(name));
    }

    /// kurir's own signer, checked by kurir's own verifier under both schemes it sends.
    #[test]
    fn what_kurir_sends_verifies_under_both_its_schemes(
        secrets in proptest::collection::vec(any_secret(), 1..4), signer in any::<Index>(),
        id in "[A-Za-z0-9_-]{1,40}", body in any_body(), unix in any_unix(),
    ) {
        let secrets: Vec<Secret> = secrets.iter().map(|s| Secret::parse(s).unwrap()).collect();
        let sent = signature_headers(&id, "order.paid", &secrets.iter().collect::<Vec<_>>(), at(unix), &body);
        let headers = header_map(&sent);
        let any_one = secrets[signer.index(secrets.len())].clone();
        let standard = Verifier::new(Scheme::StandardWebhooks, vec![any_one]);
        prop_assert!(standard.verify(&headers, &body, at(unix)).is_ok());
        let kurir = Verifier::new(Scheme::Kurir, vec![secrets[0].clone()]);
        prop_assert!(kurir.verify(&headers, &body, at(unix)).is_ok());
    }
}

#[test]
fn signature_headers_come_in_the_documented_order_with_truncated_timestamps() {
    let secret = Secret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
    let at: DateTime<Utc> = "2026-06-11T08:15:31.750Z".parse().unwrap();
    let sent = signature_headers("evt_1", "order.paid", &[&secret], at, b"{}");
    let names: Vec<&str> = sent.iter().map(|(name, _)| *name).collect();
    assert_eq!(
        names,
        [
            "x-webhook-event",
            "x-webhook-event-id",
            "x-webhook-timestamp",
            "x-webhook-signature",
            "webhook-id",
            "webhook-timestamp",
            "webhook-signature",
        ]
    );
    assert_eq!(sent[0].1, "order.paid");
    assert_eq!(sent[1].1, "evt_1");
    assert_eq!(sent[2].1, "2026-06-11T08:15:31Z");
    assert_eq!(sent[4].1, "evt_1");
    assert_eq!(sent[5].1, "1781165731");
    assert!(
        sent[3].1.len() == 64
            && sent[3]
                .1
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    );
    assert!(sent[6].1.starts_with("v1,") && !sent[6].1.contains(' '));
}

#[test]
fn kurir_signature_uses_only_the_current_secret() {
    let current = Secret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
    let previous = Secret::parse("whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD").unwrap();
    let at = at(1_700_000_000);
    let sent = signature_headers("evt_1", "order.paid", &[&current, &previous], at, b"{}");
    let headers = header_map(&sent);
    assert!(Verifier::new(Scheme::Kurir, vec![current])
        .verify(&headers, b"{}", at)
        .is_ok());
    assert!(Verifier::new(Scheme::Kurir, vec![previous])
        .verify(&headers, b"{}", at)
        .is_err());
}
