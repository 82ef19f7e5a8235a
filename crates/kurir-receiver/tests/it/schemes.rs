//! Every scheme over real HTTP: the reference vectors are accepted; a tampered body, a wrong
//! secret, a stale or a future timestamp are refused with `401` and store nothing. Time is the
//! source's injected clock, set relative to each vector's own timestamp.

use std::time::Duration;

use chrono::{DateTime, Utc};
use http::StatusCode;
use kurir_receiver::{Clock, Scheme, WebhookSource};

use crate::client::Reply;
use crate::db::TestDb;
use crate::signing::{body_with_id, fixture, reference, sign, Headers};
use crate::support::TestApp;

const TOLERANCE: Duration = Duration::from_secs(300);

/// Schemes whose signature covers a timestamp.
const TIMESTAMPED: [Scheme; 4] = [
    Scheme::Kurir,
    Scheme::StandardWebhooks,
    Scheme::Stripe,
    Scheme::Slack,
];

/// A secret of the right shape for `scheme` that signed nothing here.
fn wrong_secret(scheme: Scheme) -> &'static str {
    match scheme {
        Scheme::StandardWebhooks => "whsec_d3Jvbmctc2VjcmV0LXdyb25nLXNlY3JldA==",
        _ => "wrong-secret-0123456789",
    }
}

/// A receiver named after `scheme`, verifying with `secrets`, its clock at `now` (system if `None`).
async fn receiver(
    db: &TestDb,
    name: &str,
    scheme: Scheme,
    secrets: &[&str],
    now: Option<DateTime<Utc>>,
) -> TestApp {
    let mut source = WebhookSource::new(name, scheme, secrets)
        .unwrap()
        .tolerance(TOLERANCE);
    if let Some(now) = now {
        source = source.clock(Clock::fixed(now));
    }
    TestApp::builder(db)
        .source(source)
        .manual_runner()
        .start()
        .await
}

fn assert_refused(reply: &Reply, code: &str, scheme: Scheme) {
    assert_eq!(
        reply.status,
        StatusCode::UNAUTHORIZED,
        "{scheme}: {}",
        reply.text
    );
    assert_eq!(reply.error_code(), code, "{scheme}: {}", reply.text);
}

both_backends! {
    async fn every_scheme_accepts_its_reference_vector(db) {
        for scheme in Scheme::ALL {
            let r = reference(scheme, "evt_reference");
            let app = receiver(&db, scheme.as_str(), scheme, &[r.secret], r.at).await;
            let reply = app.post(&r.headers, &r.body).await;
            match scheme {
                // Their reference bodies carry no signed event id: authentic, but not storable
                // once (the kurir vector's id header is not signed).
                Scheme::Kurir | Scheme::Stripe | Scheme::Slack => {
                    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{scheme}: {}", reply.text);
                    assert_eq!(reply.error_code(), "missing_event_id");
                }
                _ => {
                    assert_eq!(reply.status, StatusCode::ACCEPTED, "{scheme}: {}", reply.text);
                    let id = reply.json["event_id"].as_str().unwrap();
                    assert_eq!(db.count_rows(scheme.as_str(), id).await, 1, "{scheme}");
                }
            }
        }
    }
}

both_backends! {
    /// Signed like the reference vectors (the signers are checked against them), with an event id
    /// where each scheme keeps it; the id, type and idempotency key reach the handler.
    async fn every_scheme_accepts_a_signed_request_with_an_event_id(db) {
        for scheme in Scheme::ALL {
            let secret = reference(scheme, "unused").secret;
            let app = receiver(&db, scheme.as_str(), scheme, &[secret], None).await;
            let event_id = format!("evt_{}", scheme.as_str());
            let body = body_with_id(&event_id);
            let headers = sign(scheme, secret, &event_id, Utc::now(), &body);
            let reply = app.post(&headers, &body).await;
            assert_eq!(reply.status, StatusCode::ACCEPTED, "{scheme}: {}", reply.text);
            assert_eq!(reply.json["event_id"], event_id.as_str());

            let record = app.record(&event_id).await;
            let expected_key = (scheme == Scheme::HmacBody).then(|| format!("idem-{event_id}"));
            assert_eq!(record.idempotency_key, expected_key, "{scheme}");
            app.runner.step().await.unwrap();
            assert_eq!(app.calls.log(), [(event_id, 1)], "{scheme}");
        }
    }
}

both_backends! {
    async fn every_scheme_rejects_a_tampered_body(db) {
        for scheme in Scheme::ALL {
            let r = reference(scheme, "evt_tampered");
            let app = receiver(&db, scheme.as_str(), scheme, &[r.secret], r.at).await;
            let mut tampered = r.body.clone();
            *tampered.last_mut().unwrap() ^= 0x01;
            let reply = app.post(&r.headers, &tampered).await;
            assert_refused(&reply, "signature_mismatch", scheme);
            assert_no_secret_or_signature(&reply, r.secret, &r.headers);
        }
        assert_eq!(db.total_rows().await, 0);
    }
}

both_backends! {
    async fn every_scheme_rejects_a_missing_signature(db) {
        for scheme in Scheme::ALL {
            let r = reference(scheme, "evt_unsigned");
            let app = receiver(&db, scheme.as_str(), scheme, &[r.secret], r.at).await;
            let mut headers = r.headers.clone();
            headers.retain(|(name, _)| !(name.contains("signature") || name.contains("hmac")));
            assert_refused(&app.post(&headers, &r.body).await, "missing_header", scheme);
        }
        assert_eq!(db.total_rows().await, 0);
    }
}

both_backends! {
    async fn every_scheme_rejects_a_wrong_secret(db) {
        for scheme in Scheme::ALL {
            let r = reference(scheme, "evt_wrong_secret");
            let app = receiver(&db, scheme.as_str(), scheme, &[wrong_secret(scheme)], r.at).await;
            let reply = app.post(&r.headers, &r.body).await;
            assert_refused(&reply, "signature_mismatch", scheme);
        }
        assert_eq!(db.total_rows().await, 0);
    }
}

both_backends! {
    async fn timestamped_schemes_reject_stale_and_future_requests(db) {
        let beyond = chrono::Duration::from_std(TOLERANCE).unwrap() + chrono::Duration::seconds(1);
        for scheme in TIMESTAMPED {
            let r = reference(scheme, "evt_clock");
            let signed_at = r.at.unwrap();
            let late = receiver(&db, "late", scheme, &[r.secret], Some(signed_at + beyond)).await;
            assert_refused(&late.post(&r.headers, &r.body).await, "timestamp_too_old", scheme);
            let early = receiver(&db, "early", scheme, &[r.secret], Some(signed_at - beyond)).await;
            assert_refused(&early.post(&r.headers, &r.body).await, "timestamp_too_new", scheme);
        }
        assert_eq!(db.total_rows().await, 0);
    }
}

both_backends! {
    /// During a rotation the sender signs with the new secret, and the receiver lists both; a
    /// Standard Webhooks header with one signature per secret verifies under either.
    async fn rotation_accepts_either_secret(db) {
        let old = fixture("/standard_webhooks/2/secret");
        let new = fixture("/standard_webhooks/3/secret");
        let headers: Headers = vec![
            ("webhook-id".into(), fixture("/standard_webhooks/3/id").into()),
            ("webhook-timestamp".into(), "1700000000".into()),
            ("webhook-signature".into(), fixture("/standard_webhooks/3/rotation_header").into()),
        ];
        let body = fixture("/standard_webhooks/3/body").as_bytes();
        let at = crate::signing::at(1_700_000_000);
        for (name, secrets) in [("only-old", vec![old]), ("only-new", vec![new]), ("both", vec![new, old])] {
            let app = receiver(&db, name, Scheme::StandardWebhooks, &secrets, Some(at)).await;
            assert_eq!(app.post(&headers, body).await.status, StatusCode::ACCEPTED, "{name}");
        }

        let kurir = receiver(&db, "kurir-rotating", Scheme::Kurir, &["new-secret-123", "old-secret-456"], None).await;
        for (i, secret) in ["old-secret-456", "new-secret-123"].into_iter().enumerate() {
            let id = format!("evt_rotation_{i}");
            let body = body_with_id(&id);
            let reply = kurir.post(&sign(Scheme::Kurir, secret, &id, Utc::now(), &body), &body).await;
            assert_eq!(reply.status, StatusCode::ACCEPTED, "{secret}: {}", reply.text);
        }
    }
}

both_backends! {
    /// Interoperability: the Standard Webhooks reference crate signs, we verify, under both the
    /// `webhook-*` and Svix's `svix-*` header names.
    async fn request_signed_by_the_standardwebhooks_crate_is_accepted(db) {
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let app = receiver(&db, "std", Scheme::StandardWebhooks, &[secret], None).await;
        let webhook = standardwebhooks::Webhook::new(secret).unwrap();
        for prefix in ["webhook", "svix"] {
            let id = format!("msg_{prefix}_2Lh8N1");
            let body = body_with_id(&id);
            let timestamp = Utc::now().timestamp();
            let signature = webhook.sign(&id, timestamp, &body).unwrap();
            let headers: Headers = vec![
                (format!("{prefix}-id"), id.clone()),
                (format!("{prefix}-timestamp"), timestamp.to_string()),
                (format!("{prefix}-signature"), signature),
            ];
            let reply = app.post(&headers, &body).await;
            assert_eq!(reply.status, StatusCode::ACCEPTED, "{prefix}: {}", reply.text);
            assert_eq!(app.record(&id).await.event_id, id);
        }
    }
}

/// Error answers name the failed check and nothing else.
fn assert_no_secret_or_signature(reply: &Reply, secret: &str, headers: &Headers) {
    assert!(!reply.text.contains(secret), "{}", reply.text);
    for (name, value) in headers {
        if name.contains("signature") || name.contains("hmac") {
            assert!(!reply.text.contains(value.as_str()), "{}", reply.text);
        }
    }
}

both_backends! {
    /// The id an event is stored once under is the one the signature covers: the signed body's
    /// `event_id` under the kurir scheme, `webhook-id` under Standard Webhooks. A captured request
    /// replayed within the tolerance with another id header is refused, not stored as a new event.
    async fn an_id_header_that_disagrees_with_the_signed_id_is_refused(db) {
        for scheme in [Scheme::Kurir, Scheme::StandardWebhooks] {
            let secret = reference(scheme, "unused").secret;
            let app = receiver(&db, scheme.as_str(), scheme, &[secret], None).await;
            let body = body_with_id("evt_signed");
            let headers = sign(scheme, secret, "evt_signed", Utc::now(), &body);
            let first = app.post(&headers, &body).await;
            assert_eq!(first.status, StatusCode::ACCEPTED, "{scheme}: {}", first.text);
            for replay_id in ["evt_replay_1", "evt_replay_2", "evt_replay_3"] {
                let mut replay = headers.clone();
                replay.retain(|(name, _)| name != "x-webhook-event-id");
                replay.push(("x-webhook-event-id".into(), replay_id.into()));
                let reply = app.post(&replay, &body).await;
                assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{scheme}: {}", reply.text);
                assert_eq!(reply.error_code(), "event_id_mismatch", "{scheme}");
            }
            assert_eq!(db.count_rows(scheme.as_str(), "evt_signed").await, 1, "{scheme}");
        }
        assert_eq!(db.total_rows().await, 2, "only the two originals are stored");
    }
}

both_backends! {
    /// A signed body whose type cannot be stored (a NUL, a control character) is stored without
    /// a type, byte for byte: never a 5xx, which the sender would retry forever.
    async fn a_signed_type_that_cannot_be_stored_is_left_out_rather_than_failing(db) {
        for scheme in [Scheme::HmacBody, Scheme::StandardWebhooks, Scheme::Stripe] {
            let secret = reference(scheme, "unused").secret;
            let app = receiver(&db, scheme.as_str(), scheme, &[secret], None).await;
            let id = format!("evt_nul_{}", scheme.as_str());
            let body = serde_json::json!({
                "id": id, "event_id": id, "type": "invoice\u{0}paid", "data": {"note": "a\u{0}b"},
            })
            .to_string()
            .into_bytes();
            let headers = sign(scheme, secret, &id, Utc::now(), &body);
            let reply = app.post(&headers, &body).await;
            assert_eq!(reply.status, StatusCode::ACCEPTED, "{scheme}: {}", reply.text);
            assert_eq!(app.record(&id).await.event_type, None, "{scheme}");
        }
    }
}
