//! Every published vector in `tests/fixtures/signatures.json` verifies, and where kurir signs the
//! scheme, kurir produces exactly the published signature.

use kurir_core::{
    sign_kurir, sign_standard, signature_headers, EventIdSource, Scheme, Secret, Verifier,
    VerifyError,
};

use crate::{at, fixture_i64, fixture_str, fixtures, header_map, secret_for};

fn standard_vectors() -> &'static [serde_json::Value] {
    fixtures()["standard_webhooks"].as_array().unwrap()
}

fn standard_verifier(secrets: &[&str]) -> Verifier {
    let secrets = secrets.iter().map(|s| Secret::parse(s).unwrap()).collect();
    Verifier::new(Scheme::StandardWebhooks, secrets)
}

#[test]
fn standard_webhooks_vectors_are_signed_exactly() {
    for v in standard_vectors() {
        let secret = Secret::parse(v["secret"].as_str().unwrap()).unwrap();
        let id = v["id"].as_str().unwrap();
        let body = v["body"].as_str().unwrap().as_bytes();
        let signature = sign_standard(&secret, id, v["timestamp"].as_i64().unwrap(), body);
        assert_eq!(
            signature,
            v["signature"].as_str().unwrap(),
            "vector {}",
            v["name"]
        );
    }
}

#[test]
fn standard_webhooks_vectors_verify_under_both_header_namings() {
    for v in standard_vectors() {
        let ts = v["timestamp"].as_i64().unwrap();
        let (id, sig) = (v["id"].as_str().unwrap(), v["signature"].as_str().unwrap());
        let body = v["body"].as_str().unwrap().as_bytes();
        let verifier = standard_verifier(&[v["secret"].as_str().unwrap()]);
        for prefix in ["webhook", "svix"] {
            let headers = header_map(&[
                (format!("{prefix}-id"), id.to_owned()),
                (format!("{prefix}-timestamp"), ts.to_string()),
                (format!("{prefix}-signature"), sig.to_owned()),
            ]);
            let verified = verifier.verify(&headers, body, at(ts)).unwrap();
            assert_eq!(
                verified.event_id.as_deref(),
                Some(id),
                "vector {}",
                v["name"]
            );
            assert_eq!(verified.event_id_source, EventIdSource::SignedHeader);
            assert_eq!(verified.timestamp, Some(at(ts)));
        }
    }
}

/// The body's `type` field is reported as the event type.
#[test]
fn standard_webhooks_reports_the_body_type() {
    let v = &standard_vectors()[2];
    let headers = header_map(&[
        ("webhook-id", v["id"].as_str().unwrap()),
        ("webhook-timestamp", "1700000000"),
        ("webhook-signature", v["signature"].as_str().unwrap()),
    ]);
    let verified = standard_verifier(&[v["secret"].as_str().unwrap()])
        .verify(
            &headers,
            v["body"].as_str().unwrap().as_bytes(),
            at(1_700_000_000),
        )
        .unwrap();
    assert_eq!(verified.event_type.as_deref(), Some("invoice.paid"));
}

#[test]
fn rotation_header_verifies_under_either_secret_and_is_what_kurir_sends() {
    let rotation = &standard_vectors()[3];
    let (new, old) = (
        fixture_str("/standard_webhooks/3/secret"),
        fixture_str("/standard_webhooks/2/secret"),
    );
    let id = rotation["id"].as_str().unwrap();
    let body = rotation["body"].as_str().unwrap().as_bytes();
    let header = rotation["rotation_header"].as_str().unwrap();
    let headers = header_map(&[
        ("webhook-id", id),
        ("webhook-timestamp", "1700000000"),
        ("webhook-signature", header),
    ]);
    for secrets in [&[new][..], &[old], &[new, old], &[old, new]] {
        assert!(standard_verifier(secrets)
            .verify(&headers, body, at(1_700_000_000))
            .is_ok());
    }
    let unrelated = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    assert_eq!(
        standard_verifier(&[unrelated]).verify(&headers, body, at(1_700_000_000)),
        Err(VerifyError::SignatureMismatch)
    );

    let (new, old) = (Secret::parse(new).unwrap(), Secret::parse(old).unwrap());
    let sent = signature_headers(id, "invoice.paid", &[&new, &old], at(1_700_000_000), body);
    let webhook_signature = sent
        .iter()
        .find(|(name, _)| *name == "webhook-signature")
        .unwrap();
    assert_eq!(webhook_signature.1, header);
}

#[test]
fn v1a_entries_are_skipped() {
    let v = &standard_vectors()[2];
    let v1a = fixture_str("/standard_webhooks_v1a_ed25519/signature");
    let good = v["signature"].as_str().unwrap();
    let verifier = standard_verifier(&[v["secret"].as_str().unwrap()]);
    let body = v["body"].as_str().unwrap().as_bytes();
    let request = |signature: &str| {
        header_map(&[
            ("webhook-id", v["id"].as_str().unwrap()),
            ("webhook-timestamp", "1700000000"),
            ("webhook-signature", signature),
        ])
    };
    assert_eq!(
        verifier.verify(&request(v1a), body, at(1_700_000_000)),
        Err(VerifyError::SignatureMismatch)
    );
    let mixed = format!("{v1a} {good}");
    assert!(verifier
        .verify(&request(&mixed), body, at(1_700_000_000))
        .is_ok());
}

#[test]
fn kurir_seed_cases_sign_and_verify_every_timestamp_form_verbatim() {
    let secret = secret_for(Scheme::Kurir, fixture_str("/kurir_seed_scheme/secret"));
    let body = fixture_str("/kurir_seed_scheme/body").as_bytes();
    let verifier = Verifier::new(Scheme::Kurir, vec![secret.clone()]);
    let now = at(1_700_000_000);
    for case in fixtures()["kurir_seed_scheme"]["cases"].as_array().unwrap() {
        let (ts, sig) = (
            case["timestamp"].as_str().unwrap(),
            case["signature"].as_str().unwrap(),
        );
        assert_eq!(sign_kurir(&secret, ts, body), sig, "timestamp form {ts}");
        let headers = header_map(&[
            ("x-webhook-timestamp", ts),
            ("x-webhook-signature", sig),
            ("x-webhook-event-id", "evt_1"),
            ("x-webhook-event", "invoice.paid"),
        ]);
        let verified = verifier.verify(&headers, body, now).unwrap();
        assert_eq!(verified.timestamp, Some(now));
        // The seed body carries no event_id, and the header is not signed: no id to trust.
        assert_eq!(verified.event_id, None);
        assert_eq!(verified.event_id_source, EventIdSource::None);
        assert_eq!(verified.event_type.as_deref(), Some("invoice.paid"));
    }
}

#[test]
fn hmac_body_vector_verifies_with_and_without_prefix() {
    let secret = secret_for(Scheme::HmacBody, fixture_str("/hmac_body_scheme/secret"));
    let body = fixture_str("/hmac_body_scheme/body").as_bytes();
    let sig = fixture_str("/hmac_body_scheme/signature");
    let verifier = Verifier::new(Scheme::HmacBody, vec![secret]);
    for value in [sig.to_owned(), format!("sha256={sig}")] {
        let headers = header_map(&[
            ("x-signature", value.as_str()),
            ("x-event-id", "evt_1"),
            ("x-idempotency-key", "idem_1"),
        ]);
        let verified = verifier.verify(&headers, body, at(0)).unwrap();
        assert_eq!(verified.event_id.as_deref(), Some("evt_1"));
        assert_eq!(verified.event_id_source, EventIdSource::UnsignedHeader);
        assert_eq!(verified.idempotency_key.as_deref(), Some("idem_1"));
        assert_eq!(verified.event_type.as_deref(), Some("invoice.paid"));
        assert_eq!(verified.timestamp, None);
    }
}

#[test]
fn stripe_vector_verifies_with_the_secret_string_as_key() {
    let secret = secret_for(Scheme::Stripe, fixture_str("/stripe/secret"));
    let headers = header_map(&[("stripe-signature", fixture_str("/stripe/header"))]);
    let body = fixture_str("/stripe/body").as_bytes();
    let t = fixture_i64("/stripe/t");
    let verified = Verifier::new(Scheme::Stripe, vec![secret])
        .verify(&headers, body, at(t))
        .unwrap();
    assert_eq!(verified.timestamp, Some(at(t)));
    assert_eq!(verified.event_type.as_deref(), Some("invoice.paid"));
    // The vector's body has no top-level `id`: nothing to deduplicate on.
    assert_eq!(verified.event_id, None);
    assert_eq!(verified.event_id_source, EventIdSource::None);
}

#[test]
fn stripe_event_id_comes_from_the_signed_body() {
    let secret = "whsec_test_secret_stripe";
    let body = br#"{"id":"evt_1NG8Du2eZvKYlo2CUI79vXWy","type":"charge.succeeded"}"#;
    let request = crate::sign_request(Scheme::Stripe, secret, "ignored", 1_700_000_000, body);
    let verified = Verifier::new(Scheme::Stripe, vec![secret_for(Scheme::Stripe, secret)])
        .verify(&request.header_map(), body, at(1_700_000_000))
        .unwrap();
    assert_eq!(
        verified.event_id.as_deref(),
        Some("evt_1NG8Du2eZvKYlo2CUI79vXWy")
    );
    assert_eq!(verified.event_id_source, EventIdSource::SignedBody);
    assert_eq!(verified.event_type.as_deref(), Some("charge.succeeded"));
}

#[test]
fn github_vectors_verify() {
    for v in fixtures()["github"].as_array().unwrap() {
        let secret = secret_for(Scheme::Github, v["secret"].as_str().unwrap());
        let headers = header_map(&[
            ("x-hub-signature-256", v["header"].as_str().unwrap()),
            ("x-github-delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958"),
            ("x-github-event", "push"),
        ]);
        let verified = Verifier::new(Scheme::Github, vec![secret])
            .verify(&headers, v["body"].as_str().unwrap().as_bytes(), at(0))
            .unwrap();
        assert_eq!(
            verified.event_id.as_deref(),
            Some("72d3162e-cc78-11e3-81ab-4c9367dc0958")
        );
        assert_eq!(verified.event_id_source, EventIdSource::UnsignedHeader);
        assert_eq!(verified.event_type.as_deref(), Some("push"));
    }
}

#[test]
fn shopify_vector_verifies() {
    let secret = secret_for(Scheme::Shopify, fixture_str("/shopify/secret"));
    let headers = header_map(&[
        ("x-shopify-hmac-sha256", fixture_str("/shopify/header")),
        (
            "x-shopify-webhook-id",
            "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043",
        ),
        ("x-shopify-topic", "orders/create"),
    ]);
    let verified = Verifier::new(Scheme::Shopify, vec![secret])
        .verify(&headers, fixture_str("/shopify/body").as_bytes(), at(0))
        .unwrap();
    assert_eq!(
        verified.event_id.as_deref(),
        Some("b54557e4-bdd9-4b37-8a5f-bf7d70bcd043")
    );
    assert_eq!(verified.event_id_source, EventIdSource::UnsignedHeader);
    assert_eq!(verified.event_type.as_deref(), Some("orders/create"));
}

#[test]
fn slack_vector_verifies_and_a_form_body_has_no_event_id() {
    let secret = secret_for(Scheme::Slack, fixture_str("/slack/secret"));
    let ts = fixture_i64("/slack/timestamp");
    let headers = header_map(&[
        ("x-slack-request-timestamp", ts.to_string().as_str()),
        ("x-slack-signature", fixture_str("/slack/header")),
    ]);
    let verified = Verifier::new(Scheme::Slack, vec![secret])
        .verify(&headers, fixture_str("/slack/body").as_bytes(), at(ts))
        .unwrap();
    assert_eq!(verified.timestamp, Some(at(ts)));
    assert_eq!(verified.event_id, None);
    assert_eq!(verified.event_id_source, EventIdSource::None);
}

#[test]
fn slack_events_api_body_carries_a_signed_event_id() {
    let secret = "8f742231b10e8888abcd99yyyzzz85a5";
    let body =
        br#"{"type":"event_callback","event_id":"Ev08MFMKH6","event":{"type":"app_mention"}}"#;
    let request = crate::sign_request(Scheme::Slack, secret, "ignored", 1_531_420_618, body);
    let verified = Verifier::new(Scheme::Slack, vec![secret_for(Scheme::Slack, secret)])
        .verify(&request.header_map(), body, at(1_531_420_618))
        .unwrap();
    assert_eq!(verified.event_id.as_deref(), Some("Ev08MFMKH6"));
    assert_eq!(verified.event_id_source, EventIdSource::SignedBody);
    assert_eq!(verified.event_type.as_deref(), Some("app_mention"));
}
