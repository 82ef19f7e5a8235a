//! Secret rotation: during the grace period every request carries a `v1,` signature per valid
//! secret; after it, only the new secret's. The grace period passes on a clock the test moves.

use std::time::Duration;

use chrono::{DateTime, Utc};
use kurir::delivery::DeliveryStatus;
use kurir_core::{Scheme, Secret, Verifier};
use reqwest::StatusCode;
use serde_json::json;

use super::support::{on_both_backends, Receiver, TestApp, TestDb};
use crate::support::clock::MovableClock;
use crate::support::eventually;

on_both_backends!(rotation_signs_with_both_secrets_during_the_grace_period_and_the_new_one_after);

/// The rotation's grace period.
const GRACE: Duration = Duration::from_secs(60);

fn verifies(secret: &Secret, r: &super::support::Received, at: DateTime<Utc>) -> bool {
    Verifier::new(Scheme::StandardWebhooks, vec![secret.clone()])
        .verify(&r.headers, &r.body, at)
        .is_ok()
}

async fn rotation_signs_with_both_secrets_during_the_grace_period_and_the_new_one_after(
    db: TestDb,
) {
    let clock = MovableClock::default();
    let app = TestApp::spawn_with_clock(&db, clock.clock()).await;
    let receiver = Receiver::start().await;
    let endpoint = app.create_endpoint(&receiver.url, json!({})).await;
    let id = endpoint["id"].as_str().unwrap();
    let old = Secret::parse(endpoint["secret"].as_str().unwrap()).unwrap();

    let (status, rotated) = app
        .post(
            &format!("/v1/endpoints/{id}/rotate-secret"),
            json!({"grace_period_seconds": GRACE.as_secs()}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{rotated}");
    let new = Secret::parse(rotated["secret"].as_str().unwrap()).unwrap();
    assert_ne!(new.expose(), old.expose());
    let expires: DateTime<Utc> = rotated["previous_secrets_expire_at"][0]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();

    app.publish("order.paid", json!({"during": "grace"})).await;
    let during = receiver.wait_for(1).await.remove(0);
    assert!(clock.now() < expires, "the clock has not moved yet");
    let entries: Vec<&str> = during.header("webhook-signature").split(' ').collect();
    assert_eq!(entries.len(), 2, "{entries:?}");
    assert!(entries.iter().all(|e| e.starts_with("v1,")));
    assert!(verifies(&new, &during, clock.now()) && verifies(&old, &during, clock.now()));

    // Recorded first: no lease is held when the clock jumps (on SQLite, leases expire by it).
    eventually("the first delivery to be recorded sent", || async {
        let counts = app.store.count_deliveries_by_status().await.ok()?;
        let sent = DeliveryStatus::Sent.as_str();
        counts
            .iter()
            .any(|(s, n)| s == sent && *n == 1)
            .then_some(())
    })
    .await;
    clock.advance(GRACE + Duration::from_secs(1));
    assert!(clock.now() > expires);
    app.publish("order.paid", json!({"after": "grace"})).await;
    let after = receiver.wait_for(2).await.remove(1);
    assert_eq!(after.header("webhook-signature").split(' ').count(), 1);
    assert!(verifies(&new, &after, clock.now()));
    assert!(!verifies(&old, &after, clock.now()));
    let (_, shown) = app.get(&format!("/v1/endpoints/{id}")).await;
    assert_eq!(shown["previous_secrets_expire_at"], json!([]));

    let (status, body) = app
        .post(
            &format!("/v1/endpoints/{id}/rotate-secret"),
            json!({"grace_period_seconds": 99999999}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"]["field"], "grace_period_seconds");
    let (status, default) = app
        .send(app.request(
            reqwest::Method::POST,
            &format!("/v1/endpoints/{id}/rotate-secret"),
        ))
        .await;
    assert_eq!(
        status,
        StatusCode::OK,
        "an empty body means the defaults: {default}"
    );
    let expires: DateTime<Utc> = default["previous_secrets_expire_at"][0]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let grace = expires - clock.now();
    assert!(grace > chrono::Duration::hours(23) && grace <= chrono::Duration::hours(24));
    app.stopper().stop().await;
}
