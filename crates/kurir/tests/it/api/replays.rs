//! Replay of one event and by filter: back to `pending` with the same event id, attempts kept,
//! every replay audited.

use reqwest::StatusCode;
use serde_json::json;

use super::support::{eventually, on_both_backends, Receiver, TestApp};

on_both_backends!(
    replaying_an_event_redelivers_it_with_the_same_id_and_is_audited,
    bulk_replay_requeues_matching_dead_letters_and_records_the_filter,
    replaying_an_event_resends_only_what_did_not_succeed_unless_include_sent,
    an_event_replay_dry_run_lists_the_deliveries_that_would_go,
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

    // A sent delivery can be re-sent when asked; an unknown event or endpoint cannot.
    let endpoint_id = endpoint["id"].as_str().unwrap();
    let (status, again) = app
        .post(
            &format!("/v1/events/{event_id}/replay"),
            json!({"endpoint_id": endpoint_id, "include_sent": true, "reason": "resend"}),
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
        json!({"event_id": event_id, "endpoint_id": endpoint_id, "include_sent": true})
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

/// One event to a healthy endpoint (sent) and to a failing one (dead-lettered, then healthy
/// again): the event's id and the two endpoints' ids.
pub(crate) async fn sent_and_dead_lettered(
    app: &TestApp,
    ok: &Receiver,
    down: &Receiver,
) -> (String, String, String) {
    down.respond_with(500);
    let healthy = app.create_endpoint(&ok.url, json!({})).await;
    let failing = app
        .create_endpoint(&down.url, json!({"retry_max_attempts": 1}))
        .await;
    let event_id = app.publish("invoice.issued", json!({"invoice": 8})).await;
    let (healthy, failing) = (
        healthy["id"].as_str().unwrap().to_owned(),
        failing["id"].as_str().unwrap().to_owned(),
    );
    eventually("one delivery sent, the other dead-lettered", || async {
        let (_, event) = app.get(&format!("/v1/events/{event_id}")).await;
        let status_of = |id: &str| {
            event["deliveries"]
                .as_array()?
                .iter()
                .find(|d| d["endpoint_id"] == id)
                .map(|d| d["status"].clone())
        };
        (status_of(&healthy)? == "sent" && status_of(&failing)? == "dead_letter").then_some(())
    })
    .await;
    down.respond_with(200);
    (event_id, healthy, failing)
}

/// Regression: replaying an event put its sent deliveries back to pending too, and the healthy
/// receiver got the event twice.
async fn replaying_an_event_resends_only_what_did_not_succeed_unless_include_sent(app: TestApp) {
    let (ok, down) = (Receiver::start().await, Receiver::start().await);
    let (event_id, healthy, _) = sent_and_dead_lettered(&app, &ok, &down).await;
    let path = format!("/v1/events/{event_id}/replay");
    let (status, replayed) = app.post(&path, json!({"reason": "partner is back"})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{replayed}");
    assert_eq!(replayed["replayed"], 1, "only the dead letter: {replayed}");
    down.wait_for(2).await;
    app.wait_for_deliveries(&event_id, "sent").await;
    assert_eq!(
        ok.received().len(),
        1,
        "the healthy receiver got no duplicate"
    );

    // A sent delivery asked for by endpoint is refused without include_sent, and says so.
    let (status, body) = app
        .post(&path, json!({"endpoint_id": healthy, "reason": "again"}))
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"]["code"], "delivery_sent", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("include_sent"),
        "{body}"
    );

    // Re-sending what succeeded is explicit, and the audit says it was asked for.
    let (status, replayed) = app
        .post(&path, json!({"reason": "resend all", "include_sent": true}))
        .await;
    assert_eq!(
        (status, replayed["replayed"].clone()),
        (StatusCode::ACCEPTED, json!(2))
    );
    ok.wait_for(2).await;
    down.wait_for(3).await;
    let (_, audit) = app.get("/v1/replays").await;
    assert_eq!(
        audit["data"][0]["filter"],
        json!({"event_id": event_id, "include_sent": true})
    );
    assert_eq!(audit["data"][1]["filter"], json!({"event_id": event_id}));
    assert_eq!(audit["data"][1]["count"], 1);
}

/// The dry run of an event's replay names each delivery that would go: endpoint, URL, status.
async fn an_event_replay_dry_run_lists_the_deliveries_that_would_go(app: TestApp) {
    let (ok, down) = (Receiver::start().await, Receiver::start().await);
    let (event_id, healthy, failing) = sent_and_dead_lettered(&app, &ok, &down).await;
    let preview = format!("/v1/events/{event_id}/replay/preview");
    let (status, dry) = app.get(&preview).await;
    assert_eq!(status, StatusCode::OK, "{dry}");
    assert_eq!(dry["matching"], 1, "{dry}");
    let only = &dry["deliveries"][0];
    assert_eq!(
        (&only["endpoint_id"], &only["endpoint_url"], &only["status"]),
        (&json!(failing), &json!(down.url), &json!("dead_letter")),
        "{dry}"
    );
    let (_, all) = app.get(&format!("{preview}?include_sent=true")).await;
    assert_eq!(all["matching"], 2, "{all}");
    let mut went: Vec<(String, String)> = all["deliveries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["endpoint_id"].as_str().unwrap().into(),
                d["status"].as_str().unwrap().into(),
            )
        })
        .collect();
    went.sort();
    let mut expected = vec![
        (healthy.clone(), "sent".to_owned()),
        (failing, "dead_letter".to_owned()),
    ];
    expected.sort();
    assert_eq!(went, expected);
    // The dry run answers as the replay would: the sent delivery asked for alone is refused.
    let (status, one) = app.get(&format!("{preview}?endpoint_id={healthy}")).await;
    assert_eq!(
        (status, &one["error"]["code"]),
        (StatusCode::CONFLICT, &json!("delivery_sent")),
        "{one}"
    );
    let (_, audit) = app.get("/v1/replays").await;
    assert_eq!(audit["data"], json!([]), "a dry run replays nothing");
    assert_eq!(ok.received().len(), 1);
    assert_eq!(down.received().len(), 1);
}
