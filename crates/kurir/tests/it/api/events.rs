//! `/v1/events`: publish, idempotency, read with deliveries and attempts, list with pagination;
//! `/v1/deliveries`: the delivery listing.

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use super::support::{eventually, on_both_backends, Receiver, TestApp};

on_both_backends!(
    a_published_event_is_delivered_and_shown_with_every_attempt,
    publishing_is_idempotent_by_key_and_by_event_id,
    events_are_listed_newest_first_with_filters_and_cursors,
    deliveries_are_listed_by_status_endpoint_and_type,
);

async fn a_published_event_is_delivered_and_shown_with_every_attempt(app: TestApp) {
    let receiver = Receiver::start().await;
    receiver.respond_with(500);
    let endpoint = app.create_endpoint(&receiver.url, json!({})).await;
    let (status, accepted) = app
        .post(
            "/v1/events",
            json!({"event_type": "order.paid", "data": {"order_id": "98765", "total": 250000},
                   "aggregate_type": "order", "aggregate_id": "98765", "version": 2}),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");
    let event_id = accepted["event_id"].as_str().unwrap().to_owned();
    receiver.wait_for(2).await;
    receiver.respond_with(200);
    let event = app.wait_for_deliveries(&event_id, "sent").await;

    assert_eq!(event["event_type"], "order.paid");
    assert_eq!(event["version"], 2);
    assert_eq!(event["aggregate_id"], "98765");
    assert_eq!(event["data"], json!({"order_id": "98765", "total": 250000}));
    let delivery = &event["deliveries"][0];
    assert_eq!(delivery["endpoint_id"], endpoint["id"]);
    assert_eq!(delivery["last_status_code"], 200);
    assert_eq!(delivery["next_attempt_at"], Value::Null);
    let attempts = delivery["attempts"].as_array().unwrap();
    assert!(attempts.len() >= 3, "{attempts:?}");
    assert_eq!(attempts[0]["status_code"], 500);
    assert_eq!(attempts.last().unwrap()["status_code"], 200);
    let numbers: Vec<u64> = attempts
        .iter()
        .map(|a| a["attempt"].as_u64().unwrap())
        .collect();
    assert_eq!(numbers, (1..=attempts.len() as u64).collect::<Vec<_>>());

    let last = receiver.received().pop().unwrap();
    assert_eq!(last.header("webhook-id"), event_id);
    assert_eq!(last.json()["data"]["order_id"], "98765");
}

async fn publishing_is_idempotent_by_key_and_by_event_id(app: TestApp) {
    let body = json!({"event_type": "payment.succeeded", "data": {"amount": 10}});
    let with_key = |key: &str, body: &Value| {
        app.request(Method::POST, "/v1/events")
            .header("Idempotency-Key", key)
            .body(body.to_string())
    };
    let (status, first) = app.send(with_key("key-1", &body)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{first}");
    let (status, again) = app.send(with_key("key-1", &body)).await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(again["event_id"], first["event_id"]);
    assert_eq!(again["data"], json!({"amount": 10}));
    let other = json!({"event_type": "payment.succeeded", "data": {"amount": 11}});
    let (status, err) = app.send(with_key("key-1", &other)).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(err["error"]["code"], "idempotency_key_reused");

    let own =
        json!({"event_id": "pay_123", "event_type": "payment.succeeded", "data": {"a": 1, "b": 2}});
    let (status, _) = app.post("/v1/events", own.clone()).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let reordered =
        json!({"event_id": "pay_123", "event_type": "payment.succeeded", "data": {"b": 2, "a": 1}});
    let (status, original) = app.post("/v1/events", reordered).await;
    assert_eq!(
        status,
        StatusCode::OK,
        "same content, other formatting: {original}"
    );
    assert_eq!(original["event_id"], "pay_123");
    let changed =
        json!({"event_id": "pay_123", "event_type": "payment.succeeded", "data": {"a": 9}});
    let (status, err) = app.post("/v1/events", changed).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(err["error"]["code"], "event_id_conflict");

    let (_, page) = app.get("/v1/events").await;
    assert_eq!(
        page["data"].as_array().unwrap().len(),
        2,
        "nothing else was created: {page}"
    );
}

async fn events_are_listed_newest_first_with_filters_and_cursors(app: TestApp) {
    let mut ids = Vec::new();
    for i in 0..5 {
        let event_type = if i % 2 == 0 {
            "order.paid"
        } else {
            "order.refunded"
        };
        let (status, body) = app
            .post("/v1/events", json!({"event_type": event_type, "data": {"i": i}, "aggregate_id": format!("o{}", i % 3)}))
            .await;
        assert_eq!(status, StatusCode::ACCEPTED);
        ids.push(body["event_id"].as_str().unwrap().to_owned());
    }
    ids.reverse();

    let mut seen = Vec::new();
    let mut path = "/v1/events?limit=2".to_owned();
    loop {
        let (status, page) = app.get(&path).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        let data = page["data"].as_array().unwrap();
        assert!(data.len() <= 2);
        seen.extend(
            data.iter()
                .map(|e| e["event_id"].as_str().unwrap().to_owned()),
        );
        match page["next_cursor"].as_str() {
            Some(cursor) => path = format!("/v1/events?limit=2&cursor={cursor}"),
            None => break,
        }
    }
    assert_eq!(seen, ids, "every event once, newest first");

    let (_, paid) = app.get("/v1/events?event_type=order.paid").await;
    assert_eq!(paid["data"].as_array().unwrap().len(), 3);
    let (_, about) = app.get("/v1/events?aggregate_id=o1").await;
    let about: Vec<&Value> = about["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| &e["data"]["i"])
        .collect();
    assert_eq!(about, [&json!(4), &json!(1)]);
    let (_, future) = app.get("/v1/events?since=2999-01-01T00:00:00Z").await;
    assert_eq!(future["data"], json!([]));
    let (_, past) = app.get("/v1/events?until=2000-01-01T00:00:00Z").await;
    assert_eq!(past["data"], json!([]));
    let (_, window) = app
        .get("/v1/events?since=2000-01-01T00:00:00Z&until=2999-01-01T00:00:00Z")
        .await;
    assert_eq!(window["data"].as_array().unwrap().len(), 5);
}

async fn deliveries_are_listed_by_status_endpoint_and_type(app: TestApp) {
    let ok = Receiver::start().await;
    let failing = Receiver::start().await;
    failing.respond_with(500);
    let good = app.create_endpoint(&ok.url, json!({})).await;
    let bad = app
        .create_endpoint(&failing.url, json!({"retry_max_attempts": 1}))
        .await;
    let paid = app.publish("order.paid", json!({"n": 1})).await;
    let shipped = app.publish("order.shipped", json!({"n": 2})).await;
    for id in [&paid, &shipped] {
        eventually("both deliveries to settle", || async {
            let (_, e) = app.get(&format!("/v1/events/{id}")).await;
            let statuses: Vec<&str> = e["deliveries"]
                .as_array()?
                .iter()
                .filter_map(|d| d["status"].as_str())
                .collect();
            (statuses.len() == 2 && statuses.iter().all(|s| ["sent", "dead_letter"].contains(s)))
                .then_some(())
        })
        .await;
    }

    let (status, dead) = app.get("/v1/deliveries?status=dead_letter").await;
    assert_eq!(status, StatusCode::OK, "{dead}");
    let dead = dead["data"].as_array().unwrap();
    assert_eq!(dead.len(), 2);
    assert!(dead
        .iter()
        .all(|d| d["endpoint_id"] == bad["id"] && d["last_status_code"] == 500));
    assert_eq!(dead[0]["event_id"], shipped.as_str(), "newest first");

    let (_, to_good) = app
        .get(&format!(
            "/v1/deliveries?endpoint_id={}",
            good["id"].as_str().unwrap()
        ))
        .await;
    assert!(to_good["data"]
        .as_array()
        .unwrap()
        .iter()
        .all(|d| d["status"] == "sent"));
    let (_, of_type) = app.get("/v1/deliveries?event_type=order.paid").await;
    let of_type = of_type["data"].as_array().unwrap();
    assert_eq!(of_type.len(), 2);
    assert!(of_type
        .iter()
        .all(|d| d["event_id"] == paid.as_str() && d["event_type"] == "order.paid"));

    let (_, first) = app.get("/v1/deliveries?limit=3").await;
    assert_eq!(first["data"].as_array().unwrap().len(), 3);
    let cursor = first["next_cursor"].as_str().unwrap();
    let (_, rest) = app
        .get(&format!("/v1/deliveries?limit=3&cursor={cursor}"))
        .await;
    assert_eq!(rest["data"].as_array().unwrap().len(), 1);
    assert!(rest.get("next_cursor").is_none());
}
