//! `/v1/subscribers` and `subscriber_id` on endpoints and events (issue 29), through a real
//! server: the subscriber's life (create, upsert, list by name, disable, delete as a tombstone
//! whose id stays taken), an unknown subscriber refused with nothing stored, and events reaching
//! only their own subscriber's receiver.

use reqwest::StatusCode;
use serde_json::json;

use super::support::{on_both_backends, Receiver, TestApp};

on_both_backends!(
    a_subscriber_is_created_upserted_listed_disabled_and_deleted,
    an_event_or_endpoint_naming_an_unknown_subscriber_is_refused_and_nothing_stored,
    an_event_for_a_subscriber_reaches_only_its_receiver,
);

async fn a_subscriber_is_created_upserted_listed_disabled_and_deleted(app: TestApp) {
    let body = json!({"id": "cus_8Hq2", "name": "Toko", "metadata": {"plan": "pro"}});
    let (status, created) = app.post("/v1/subscribers", body.clone()).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(created["metadata"]["plan"], "pro");
    assert_eq!(created["enabled"], true);
    let (status, again) = app.post("/v1/subscribers", body).await;
    assert_eq!(status, StatusCode::CONFLICT, "{again}");
    assert_eq!(again["error"]["code"], "subscriber_exists");

    let put = |name: &'static str| {
        let req = app.request(reqwest::Method::PUT, "/v1/subscribers/cus_9");
        app.send(req.body(json!({"name": name}).to_string()))
    };
    assert_eq!(put("Nine").await.0, StatusCode::CREATED);
    let (status, renamed) = put("Nine Ltd").await;
    assert_eq!(
        (status, renamed["name"].as_str()),
        (StatusCode::OK, Some("Nine Ltd"))
    );

    let (_, page) = app.get("/v1/subscribers?name=Toko").await;
    let ids: Vec<_> = page["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].clone())
        .collect();
    assert_eq!(ids, vec![json!("cus_8Hq2")]);

    let (status, off) = app
        .patch("/v1/subscribers/cus_8Hq2", json!({"enabled": false}))
        .await;
    assert_eq!(status, StatusCode::OK, "{off}");
    assert_eq!(off["enabled"], false);

    let (status, bad) = app
        .post("/v1/subscribers", json!({"id": "has space", "name": "x"}))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
    assert!(
        bad["error"]["message"].as_str().unwrap().contains("id"),
        "{bad}"
    );

    assert_eq!(
        app.delete("/v1/subscribers/cus_9").await.0,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        app.delete("/v1/subscribers/cus_9").await.0,
        StatusCode::NOT_FOUND
    );
    let (status, taken) = put("Nine again").await;
    assert_eq!(status, StatusCode::CONFLICT, "{taken}");
    assert_eq!(taken["error"]["code"], "subscriber_deleted");
    let (_, tombstone) = app.get("/v1/subscribers/cus_9").await;
    assert!(tombstone["deleted_at"].is_string(), "{tombstone}");
    assert_eq!(
        app.get("/v1/subscribers/nobody").await.0,
        StatusCode::NOT_FOUND
    );
}

async fn an_event_or_endpoint_naming_an_unknown_subscriber_is_refused_and_nothing_stored(
    app: TestApp,
) {
    let before = app.snapshot().await;
    let event = json!({"event_type": "order.paid", "data": {}, "subscriber_id": "cus_missing"});
    let (status, refused) = app.post("/v1/events", event.clone()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("subscriber_id"),
        "{refused}"
    );
    let (status, batch) = app
        .post("/v1/events/batch", json!({"events": [event]}))
        .await;
    assert_eq!(status, StatusCode::OK, "{batch}");
    assert_eq!(batch["results"][0]["status"], 400, "{batch}");
    let endpoint = json!({"url": "https://example.com/hook", "subscriber_id": "cus_missing"});
    let (status, refused) = app.post("/v1/endpoints", endpoint).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    assert_eq!(app.snapshot().await, before, "nothing stored");
}

async fn an_event_for_a_subscriber_reaches_only_its_receiver(app: TestApp) {
    let (theirs, ours) = (Receiver::start().await, Receiver::start().await);
    let (status, _) = app
        .post("/v1/subscribers", json!({"id": "cus_a", "name": "A"}))
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let a = app
        .create_endpoint(&theirs.url, json!({"subscriber_id": "cus_a"}))
        .await;
    assert_eq!(a["subscriber_id"], "cus_a");
    let op = app.create_endpoint(&ours.url, json!({})).await;
    assert!(op["subscriber_id"].is_null(), "{op}");

    let to_a = json!({"event_type": "order.paid", "data": {"n": 1}, "subscriber_id": "cus_a"});
    let (status, accepted) = app.post("/v1/events", to_a).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");
    let a_event = accepted["event_id"].as_str().unwrap().to_owned();
    let op_event = app.publish("order.paid", json!({"n": 2})).await;
    app.wait_for_deliveries(&a_event, "sent").await;
    app.wait_for_deliveries(&op_event, "sent").await;

    let bodies = |r: &Receiver| -> Vec<String> {
        r.received()
            .iter()
            .map(|m| m.json()["event_id"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(bodies(&theirs), vec![a_event.clone()]);
    assert_eq!(bodies(&ours), vec![op_event.clone()]);

    let (_, shown) = app.get(&format!("/v1/events/{a_event}")).await;
    assert_eq!(shown["subscriber_id"], "cus_a");
    let (_, listed) = app.get("/v1/events?subscriber_id=cus_a").await;
    let ids: Vec<_> = listed["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event_id"].clone())
        .collect();
    assert_eq!(ids, vec![json!(a_event)]);
}
