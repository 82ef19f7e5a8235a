//! Each scheme's failure modes, each reported as the specific [`VerifyError`] variant.

use std::time::Duration;

use kurir_core::{Scheme, Secret, Verifier, VerifyError};

use crate::{at, has_timestamp, protected_headers, secret_for, sign_request, SignedRequest};

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const OTHER_SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
const SIGNED_AT: i64 = 1_700_000_000;
const BODY: &[u8] = br#"{"id":"evt_1","type":"invoice.paid","event_id":"evt_1"}"#;

fn verifier(scheme: Scheme, secrets: &[&str]) -> Verifier {
    let secrets = secrets.iter().map(|s| secret_for(scheme, s)).collect();
    Verifier::new(scheme, secrets)
}

fn request(scheme: Scheme) -> SignedRequest {
    sign_request(scheme, SECRET, "evt_1", SIGNED_AT, BODY)
}

#[test]
fn every_scheme_accepts_its_own_signature() {
    for scheme in Scheme::ALL {
        let result =
            verifier(scheme, &[SECRET]).verify(&request(scheme).header_map(), BODY, at(SIGNED_AT));
        assert!(result.is_ok(), "{scheme}: {result:?}");
    }
}

#[test]
fn tampered_body_is_a_signature_mismatch() {
    let tampered = br#"{"id":"evt_1","type":"invoice.paid","event_id":"Ev2"}"#;
    for scheme in Scheme::ALL {
        let result = verifier(scheme, &[SECRET]).verify(
            &request(scheme).header_map(),
            tampered,
            at(SIGNED_AT),
        );
        assert_eq!(result, Err(VerifyError::SignatureMismatch), "{scheme}");
    }
}

#[test]
fn wrong_secret_is_a_signature_mismatch() {
    for scheme in Scheme::ALL {
        let result = verifier(scheme, &[OTHER_SECRET]).verify(
            &request(scheme).header_map(),
            BODY,
            at(SIGNED_AT),
        );
        assert_eq!(result, Err(VerifyError::SignatureMismatch), "{scheme}");
    }
}

#[test]
fn any_configured_secret_may_match() {
    for scheme in Scheme::ALL {
        let result = verifier(scheme, &[OTHER_SECRET, SECRET]).verify(
            &request(scheme).header_map(),
            BODY,
            at(SIGNED_AT),
        );
        assert!(result.is_ok(), "{scheme}: {result:?}");
    }
}

#[test]
fn no_secrets_is_reported_before_anything_else() {
    for scheme in Scheme::ALL {
        let result =
            Verifier::new(scheme, Vec::new()).verify(&http::HeaderMap::new(), BODY, at(SIGNED_AT));
        assert_eq!(result, Err(VerifyError::NoSecrets), "{scheme}");
    }
}

#[test]
fn stale_timestamps_are_too_old() {
    for scheme in Scheme::ALL.into_iter().filter(|s| has_timestamp(*s)) {
        let now = at(SIGNED_AT + 301);
        let result = verifier(scheme, &[SECRET]).verify(&request(scheme).header_map(), BODY, now);
        assert_eq!(
            result,
            Err(VerifyError::TimestampTooOld {
                age: Duration::from_secs(301),
                tolerance: Duration::from_secs(300),
            }),
            "{scheme}"
        );
    }
}

#[test]
fn future_timestamps_are_too_new() {
    for scheme in Scheme::ALL.into_iter().filter(|s| has_timestamp(*s)) {
        let now = at(SIGNED_AT - 301);
        let result = verifier(scheme, &[SECRET]).verify(&request(scheme).header_map(), BODY, now);
        assert_eq!(
            result,
            Err(VerifyError::TimestampTooNew {
                ahead: Duration::from_secs(301),
                tolerance: Duration::from_secs(300),
            }),
            "{scheme}"
        );
    }
}

#[test]
fn timestamps_exactly_at_the_tolerance_are_accepted() {
    for scheme in Scheme::ALL.into_iter().filter(|s| has_timestamp(*s)) {
        for now in [SIGNED_AT - 300, SIGNED_AT + 300] {
            let result =
                verifier(scheme, &[SECRET]).verify(&request(scheme).header_map(), BODY, at(now));
            assert!(result.is_ok(), "{scheme} at {now}: {result:?}");
        }
    }
}

#[test]
fn tolerance_is_configurable() {
    for scheme in Scheme::ALL.into_iter().filter(|s| has_timestamp(*s)) {
        let verifier = verifier(scheme, &[SECRET]).with_tolerance(Duration::from_secs(3600));
        assert_eq!(verifier.tolerance(), Duration::from_secs(3600));
        let result = verifier.verify(&request(scheme).header_map(), BODY, at(SIGNED_AT + 3000));
        assert!(result.is_ok(), "{scheme}: {result:?}");
    }
}

#[test]
fn schemes_without_a_timestamp_ignore_the_clock() {
    for scheme in Scheme::ALL.into_iter().filter(|s| !has_timestamp(*s)) {
        let verified = verifier(scheme, &[SECRET])
            .verify(&request(scheme).header_map(), BODY, at(SIGNED_AT * 2))
            .unwrap();
        assert_eq!(verified.timestamp, None, "{scheme}");
    }
}

#[test]
fn each_missing_required_header_is_named() {
    for scheme in Scheme::ALL {
        for &header in protected_headers(scheme) {
            let result = verifier(scheme, &[SECRET]).verify(
                &request(scheme).without(header),
                BODY,
                at(SIGNED_AT),
            );
            assert_eq!(result, Err(VerifyError::MissingHeader(header)), "{scheme}");
        }
    }
}

#[test]
fn svix_headers_are_named_when_missing() {
    let svix = [("svix-id", "evt_1"), ("svix-timestamp", "1700000000")];
    let result = verifier(Scheme::StandardWebhooks, &[SECRET]).verify(
        &crate::header_map(&svix),
        BODY,
        at(SIGNED_AT),
    );
    assert_eq!(result, Err(VerifyError::MissingHeader("svix-signature")));
}

#[test]
fn the_kurir_scheme_reads_the_event_id_from_the_signed_body_never_the_header() {
    let signed = request(Scheme::Kurir);
    let kurir = verifier(Scheme::Kurir, &[SECRET]);
    let without_header = kurir
        .verify(&signed.without("x-webhook-event-id"), BODY, at(SIGNED_AT))
        .unwrap();
    assert_eq!(without_header.event_id.as_deref(), Some("evt_1"));
    assert_eq!(
        without_header.event_id_source,
        kurir_core::EventIdSource::SignedBody
    );
    let replayed = kurir.verify(
        &signed.with("x-webhook-event-id", "evt_replayed"),
        BODY,
        at(SIGNED_AT),
    );
    assert_eq!(
        replayed,
        Err(VerifyError::EventIdMismatch {
            header: "x-webhook-event-id"
        })
    );
    let body = br#"{"type":"invoice.paid"}"#;
    let no_id = sign_request(Scheme::Kurir, SECRET, "evt_1", SIGNED_AT, body);
    let verified = kurir
        .verify(&no_id.header_map(), body, at(SIGNED_AT))
        .unwrap();
    assert_eq!(verified.event_id, None, "an unsigned header names nothing");
}

#[test]
fn an_id_header_disagreeing_with_a_signed_id_is_refused() {
    for scheme in [Scheme::StandardWebhooks, Scheme::Stripe, Scheme::Slack] {
        for header in ["x-webhook-event-id", "webhook-id", "svix-id"] {
            let mut signed = request(scheme);
            if header == "webhook-id" && scheme == Scheme::StandardWebhooks {
                continue; // the signed id itself
            }
            signed
                .headers
                .push((header.to_owned(), "evt_other".to_owned()));
            let result =
                verifier(scheme, &[SECRET]).verify(&signed.header_map(), BODY, at(SIGNED_AT));
            assert_eq!(
                result,
                Err(VerifyError::EventIdMismatch { header }),
                "{scheme} with {header}"
            );
            signed.headers.last_mut().unwrap().1 = "evt_1".to_owned();
            let agreeing =
                verifier(scheme, &[SECRET]).verify(&signed.header_map(), BODY, at(SIGNED_AT));
            assert!(
                agreeing.is_ok(),
                "{scheme} with an agreeing {header}: {agreeing:?}"
            );
        }
    }
}

#[test]
fn unsigned_event_id_headers_are_optional() {
    let optional = [
        (Scheme::Github, "x-github-delivery"),
        (Scheme::Shopify, "x-shopify-webhook-id"),
        (Scheme::HmacBody, "x-event-id"),
    ];
    for (scheme, header) in optional {
        let verified = verifier(scheme, &[SECRET])
            .verify(&request(scheme).without(header), BODY, at(SIGNED_AT))
            .unwrap();
        assert_eq!(verified.event_id, None, "{scheme}");
        assert_eq!(
            verified.event_id_source,
            kurir_core::EventIdSource::None,
            "{scheme}"
        );
    }
}

/// `(scheme, header, bad value, reason reported)`.
const MALFORMED: &[(Scheme, &str, &str, &str)] = &[
    (
        Scheme::Kurir,
        "x-webhook-timestamp",
        "1700000000",
        "not an RFC 3339 date-time",
    ),
    (
        Scheme::Kurir,
        "x-webhook-signature",
        "zz",
        "signature is not lowercase hex",
    ),
    (
        Scheme::Kurir,
        "x-webhook-signature",
        "ABCD",
        "signature is not lowercase hex",
    ),
    (
        Scheme::StandardWebhooks,
        "webhook-timestamp",
        "2023-11-14T22:13:20Z",
        "not an integer number of unix seconds",
    ),
    (
        Scheme::StandardWebhooks,
        "webhook-timestamp",
        "99999999999999999",
        "unix seconds out of range",
    ),
    (
        Scheme::StandardWebhooks,
        "webhook-signature",
        " ",
        "no signatures",
    ),
    (
        Scheme::Stripe,
        "stripe-signature",
        "v1=abcd",
        "no t= element",
    ),
    (
        Scheme::Stripe,
        "stripe-signature",
        "t=1700000000,v1=xyz",
        "signature is not lowercase hex",
    ),
    (
        Scheme::Stripe,
        "stripe-signature",
        "t=soon,v1=abcd",
        "not an integer number of unix seconds",
    ),
    (
        Scheme::Github,
        "x-hub-signature-256",
        "sha1=abcd",
        "missing the sha256= prefix",
    ),
    (
        Scheme::Github,
        "x-hub-signature-256",
        "sha256=xyz",
        "signature is not lowercase hex",
    ),
    (
        Scheme::Shopify,
        "x-shopify-hmac-sha256",
        "not base64!",
        "signature is not base64",
    ),
    (
        Scheme::Slack,
        "x-slack-signature",
        "abcd",
        "missing the v0= prefix",
    ),
    (
        Scheme::Slack,
        "x-slack-request-timestamp",
        "later",
        "not an integer number of unix seconds",
    ),
    (
        Scheme::HmacBody,
        "x-signature",
        "sha256=xyz",
        "signature is not lowercase hex",
    ),
];

#[test]
fn malformed_headers_say_what_is_wrong() {
    for &(scheme, header, value, reason) in MALFORMED {
        let result = verifier(scheme, &[SECRET]).verify(
            &request(scheme).with(header, value),
            BODY,
            at(SIGNED_AT),
        );
        assert_eq!(
            result,
            Err(VerifyError::MalformedHeader { header, reason }),
            "{scheme} {header}: {value:?}"
        );
    }
}

#[test]
fn stripe_ignores_v0_and_matches_any_v1() {
    let signed = request(Scheme::Stripe);
    let v1 = signed.headers[0].1.split_once(",v1=").unwrap().1.to_owned();
    let zeros = "0".repeat(64);
    let header = format!("t={SIGNED_AT},v1={zeros},v0={v1},v1={v1}");
    let result = verifier(Scheme::Stripe, &[SECRET]).verify(
        &signed.with("stripe-signature", &header),
        BODY,
        at(SIGNED_AT),
    );
    assert!(result.is_ok(), "{result:?}");
    let only_v0 = format!("t={SIGNED_AT},v0={v1}");
    let result = verifier(Scheme::Stripe, &[SECRET]).verify(
        &signed.with("stripe-signature", &only_v0),
        BODY,
        at(SIGNED_AT),
    );
    assert_eq!(result, Err(VerifyError::SignatureMismatch));
}

#[test]
fn standard_webhooks_signature_entries_of_other_versions_never_match() {
    let signed = request(Scheme::StandardWebhooks);
    let good = signed.headers[2].1.clone();
    let as_v2 = good.replacen("v1,", "v2,", 1);
    let result = verifier(Scheme::StandardWebhooks, &[SECRET]).verify(
        &signed.with("webhook-signature", &as_v2),
        BODY,
        at(SIGNED_AT),
    );
    assert_eq!(result, Err(VerifyError::SignatureMismatch));
}

#[test]
fn standard_webhooks_verifier_rejects_a_kurir_scheme_request() {
    // A request that carries only the other scheme's headers names the first one it lacks.
    let kurir = request(Scheme::Kurir);
    let result = verifier(Scheme::StandardWebhooks, &[SECRET]).verify(
        &kurir.header_map(),
        BODY,
        at(SIGNED_AT),
    );
    assert_eq!(result, Err(VerifyError::MissingHeader("webhook-id")));
}

#[test]
fn scheme_names_round_trip_through_str_and_serde() {
    for scheme in Scheme::ALL {
        assert_eq!(scheme.to_string().parse::<Scheme>(), Ok(scheme));
        let json = serde_json::to_string(&scheme).unwrap();
        assert_eq!(json, format!("\"{scheme}\""));
        assert_eq!(serde_json::from_str::<Scheme>(&json).unwrap(), scheme);
    }
    assert_eq!("standard-webhooks".parse(), Ok(Scheme::StandardWebhooks));
    assert_eq!("hmac-body".parse(), Ok(Scheme::HmacBody));
    assert!("svix".parse::<Scheme>().is_err());
}

#[test]
fn scheme_parse_secret_accepts_stripe_style_secrets_only_outside_standard_webhooks() {
    let stripe_style = "whsec_test_secret_stripe";
    assert!(Scheme::Stripe.parse_secret(stripe_style).is_ok());
    assert!(Scheme::StandardWebhooks.parse_secret(stripe_style).is_err());
    assert_eq!(
        Scheme::StandardWebhooks.parse_secret(SECRET).unwrap(),
        Secret::parse(SECRET).unwrap()
    );
}
