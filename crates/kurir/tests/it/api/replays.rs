//! Replay of one event and by filter: back to `pending` with the same event id, attempts kept,
//! every replay audited.

use reqwest::StatusCode;
use serde_json::json;

use super::support::{on_both_backends, Receiver, TestApp};

on_both_backends!(
    replaying_an_event_redelivers_it_with_the_same_id_and_is_audited,
    bulk_replay_requeues_matching_dead_letters_and_records_the_filter,
);

async fn replaying_an_event_redelivers_it_with_the_same_id_and_is_audited(app: TestApp) {
    let receiver = Receiver::start().await;
    receiver.respond_with(500);
    let endpoint = app
        .create_endpoint(&receiver.url, json!({"retry_max_attempts": 1}))
        .await;
    let event_id = app.publish("invoice.issued", json!({"invoice": 7})).await;
    app.wait_for_deliveries(&event_id, "dead_letter").await;

    receiver.respond_with(200);
    let (status, replayed) = app
        .post(
            &format!("/v1/events/{event_id}/replay"),
            json!({"reason": "partner fixed their TLS"}),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{replayed}");
    assert_eq!(replayed["replayed"], 1);
    let event = app.wait_for_deliveries(&event_id, "sent").await;
    let attempts = event["deliveries"][0]["attempts"].as_array().unwrap();
    let summary: Vec<(u64, &str, u64)> = attempts
        .iter()
        .map(|a| {
            (
                a["attempt"].as_u64().unwrap(),
                a["trigger"].as_str().unwrap(),
                a["status_code"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [(1, "scheduled", 500), (1, "replay", 200)],
        "history kept, numbers restart"
    );
    let received = receiver.received();
    assert_eq!(received.len(), 2);
    assert!(
        received.iter().all(|r| r.header("webhook-id") == event_id),
        "same event id"
    );

    // A sent delivery can be replayed too; an unknown event or endpoint cannot.
    let endpoint_id = endpoint["id"].as_str().unwrap();
    let (status, again) = app
        .post(
            &format!("/v1/events/{event_id}/replay"),
            json!({"endpoint_id": endpoint_id, "reason": "resend"}),
        )
        .await;
    assert_eq!(
        (status, again["replayed"].clone()),
        (StatusCode::ACCEPTED, json!(1))
    );
    receiver.wait_for(3).await;
    app.wait_for_deliveries(&event_id, "sent").await;
    let (status, _) = app
        .post("/v1/events/nope/replay", json!({"reason": "x"}))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, body) = app
        .post(
            &format!("/v1/events/{event_id}/replay"),
            json!({"endpoint_id": "01900000-0000-7000-8000-000000000000", "reason": "x"}),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");

    let (status, audit) = app.get("/v1/replays").await;
    assert_eq!(status, StatusCode::OK);
    let audit = audit["data"].as_array().unwrap();
    assert_eq!(audit.len(), 2);
    assert_eq!(audit[1]["actor"], "admin");
    assert_eq!(audit[1]["reason"], "partner fixed their TLS");
    assert_eq!(audit[1]["filter"], json!({"event_id": event_id}));
    assert_eq!(audit[1]["count"], 1);
    assert_eq!(
        audit[0]["filter"],
        json!({"event_id": event_id, "endpoint_id": endpoint_id})
    );
}

async fn bulk_replay_requeues_matching_dead_letters_and_records_the_filter(app: TestApp) {
    let a = Receiver::start().await;
    let b = Receiver::start().await;
    a.respond_with(503);
    b.respond_with(503);
    let ea = app
        .create_endpoint(&a.url, json!({"retry_max_attempts": 1}))
        .await;
    app.create_endpoint(&b.url, json!({"retry_max_attempts": 1}))
        .await;
    let mut events = Vec::new();
    for i in 0..3 {
        events.push(app.publish("stock.changed", json!({"sku": i})).await);
    }
    for id in &events {
        app.wait_for_deliveries(id, "dead_letter").await;
    }

    a.respond_with(200);
    let ea_id = ea["id"].as_str().unwrap();
    let (status, body) = app
        .post(
            "/v1/replays",
            json!({"endpoint_id": ea_id, "event_type": "stock.changed", "reason": "a is back"}),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["replayed"], 3);
    a.wait_for(6).await;
    let (_, dead) = app.get("/v1/deliveries?status=dead_letter").await;
    let dead = dead["data"].as_array().unwrap();
    assert_eq!(dead.len(), 3, "b's deliveries stay dead");
    assert!(dead.iter().all(|d| d["endpoint_id"] != ea["id"]));

    let (_, none) = app
        .post(
            "/v1/replays",
            json!({"status": "pending", "reason": "nothing to do"}),
        )
        .await;
    assert_eq!(none["replayed"], 0, "other statuses are not replayed");
    let (status, _) = app
        .post(
            "/v1/replays",
            json!({"endpoint_id": "01900000-0000-7000-8000-000000000000", "reason": "x"}),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    let (_, audit) = app.get("/v1/replays?limit=1").await;
    assert_eq!(audit["data"][0]["count"], 0);
    let cursor = audit["next_cursor"].as_str().unwrap();
    let (_, older) = app
        .get(&format!("/v1/replays?limit=1&cursor={cursor}"))
        .await;
    let first = &older["data"][0];
    assert_eq!(first["count"], 3);
    assert_eq!(first["actor"], "admin");
    assert_eq!(
        first["filter"],
        json!({"status": "dead_letter", "endpoint_id": ea_id, "event_type": "stock.changed"})
    );
}
