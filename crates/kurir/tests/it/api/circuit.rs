//! An open circuit breaker as the operator sees it and acts on it (issue 33, item 3): a held
//! delivery says so instead of a past "next attempt", and "probe now" or "close" (audited,
//! refused to a viewer) lets the held deliveries go.

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use super::support::{eventually, on_both_backends, Receiver, TestApp};
use super::tokens::create_token;

on_both_backends!(an_open_circuit_is_shown_on_its_deliveries_and_an_operator_probes_or_closes_it);

/// The endpoint's circuit once it is open: waits for the failed attempt to open it.
async fn opened(app: &TestApp, id: &str) -> Value {
    eventually("the circuit to open", || async {
        let (_, e) = app.get(&format!("/v1/endpoints/{id}")).await;
        (e["circuit"]["state"] == "open").then(|| e["circuit"].clone())
    })
    .await
}

/// The delivery of `event_id` once its failed attempt is recorded: the circuit opens as the
/// answer comes in, a moment before the completion is written.
async fn held(app: &TestApp, endpoint: &str, event_id: &str) -> Value {
    eventually("the failed attempt to be recorded", || async {
        let d = delivery(app, endpoint, event_id).await;
        (d["status"] != "processing").then_some(d)
    })
    .await
}

/// The one delivery of `event_id` as `GET /v1/deliveries` shows it.
async fn delivery(app: &TestApp, endpoint: &str, event_id: &str) -> Value {
    let (_, page) = app
        .get(&format!("/v1/deliveries?endpoint_id={endpoint}"))
        .await;
    page["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["event_id"] == event_id)
        .cloned()
        .unwrap_or_else(|| panic!("no delivery of {event_id}: {page}"))
}

async fn an_open_circuit_is_shown_on_its_deliveries_and_an_operator_probes_or_closes_it(
    app: TestApp,
) {
    let receiver = Receiver::start().await;
    receiver.respond_with(500);
    // One failure opens it; the longest cool-down keeps it open for the whole test unless an
    // operator acts.
    let endpoint = app
        .create_endpoint(
            &receiver.url,
            json!({"circuit_failure_threshold": 1, "circuit_cooldown_ms": 600_000}),
        )
        .await;
    let id = endpoint["id"].as_str().unwrap();
    let first = app.publish("order.paid", json!({"n": 1})).await;
    receiver.wait_for(1).await;
    let circuit = opened(&app, id).await;
    let probe_at = circuit["next_probe_at"].as_str().unwrap().to_owned();

    // Held: the delivery says so, with the probe's time, on both reads.
    let d = held(&app, id, &first).await;
    assert_eq!(d["held"], true, "{d}");
    assert_eq!(d["circuit_state"], "open", "{d}");
    assert_eq!(d["next_probe_at"], probe_at.as_str(), "{d}");
    let (_, event) = app.get(&format!("/v1/events/{first}")).await;
    assert_eq!(event["deliveries"][0]["held"], true, "{event}");
    let (_, list) = app.get("/v1/endpoints").await;
    assert_eq!(list["data"][0]["circuit"]["state"], "open", "{list}");

    // A viewer may look, not act; nothing is changed or recorded.
    let (_, viewer) = create_token(&app, "grafana", "viewer").await;
    let refused = reqwest::Client::new()
        .request(
            Method::POST,
            format!("{}/v1/endpoints/{id}/circuit", app.url),
        )
        .bearer_auth(&viewer)
        .header("content-type", "application/json")
        .body(json!({"action": "close"}).to_string());
    let (status, body) = app.send(refused).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(opened(&app, id).await["next_probe_at"], probe_at.as_str());

    // Probe now: the held delivery goes out as the probe; its success closes the circuit.
    receiver.respond_with(200);
    let path = format!("/v1/endpoints/{id}/circuit");
    let (status, changed) = app.post(&path, json!({"action": "probe"})).await;
    assert_eq!(status, StatusCode::OK, "{changed}");
    assert_eq!(changed["circuit"]["state"], "open");
    assert!(
        changed["circuit"]["next_probe_at"].as_str().unwrap() < probe_at.as_str(),
        "brought forward: {changed}"
    );
    app.wait_for_deliveries(&first, "sent").await;
    // The breaker hears of the probe's success from the process's recorder, a moment after the
    // delivery is written as sent.
    eventually("the probe's success to close the circuit", || async {
        let (_, e) = app.get(&format!("/v1/endpoints/{id}")).await;
        (e["circuit"]["state"] == "closed").then_some(())
    })
    .await;
    let d = delivery(&app, id, &first).await;
    assert_eq!(
        (d["held"].clone(), d["circuit_state"].clone()),
        (json!(false), json!("closed"))
    );

    // Nothing to do on a closed circuit: refused, not recorded.
    let (status, body) = app.post(&path, json!({"action": "close"})).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"]["code"], "circuit_closed", "{body}");
    let (status, body) = app.post(&path, json!({"action": "open"})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");

    // Open again, then closed by hand: the held delivery is sent at once.
    receiver.respond_with(500);
    let second = app.publish("order.paid", json!({"n": 2})).await;
    opened(&app, id).await;
    receiver.respond_with(200);
    assert_eq!(held(&app, id, &second).await["held"], true);
    let (status, changed) = app.post(&path, json!({"action": "close"})).await;
    assert_eq!(status, StatusCode::OK, "{changed}");
    assert_eq!(changed["circuit"]["state"], "closed");
    app.wait_for_deliveries(&second, "sent").await;

    // The audit: both actions, newest first, with who and from where.
    let (status, audit) = app.get(&format!("{path}/actions")).await;
    assert_eq!(status, StatusCode::OK, "{audit}");
    let rows: Vec<(&str, &str, &str, &str)> = audit["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            let s = |k: &str| a[k].as_str().unwrap();
            (s("action"), s("state_before"), s("actor"), s("via"))
        })
        .collect();
    assert_eq!(
        rows,
        [
            ("close", "open", "admin", "api"),
            ("probe", "open", "admin", "api")
        ]
    );
}
