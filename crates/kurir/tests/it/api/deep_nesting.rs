//! `data` nested deeper than `limits::MAX_JSON_DEPTH` (128 levels) is refused with a `400`
//! that names the limit, the same on every database, for one event and in a batch (issue 32:
//! 1,000 levels answered `500` on SQLite, 50,000 on PostgreSQL, which a client retrying 5xx
//! retries forever). 128 levels are stored and delivered (31 on MariaDB, whose JSON functions
//! read no deeper).

use reqwest::{Method, StatusCode};
use serde_json::Value;

use super::support::{on_both_backends, Receiver, TestApp};

on_both_backends!(data_nested_deeper_than_128_levels_gets_400_naming_the_limit);

/// A JSON object `levels` deep: `{"a":{"a":…{}}}`.
fn nested(levels: usize) -> String {
    format!(
        "{}{}",
        r#"{"a":"#.repeat(levels - 1) + "{",
        "}".repeat(levels)
    )
}

/// A JSON object `levels` deep in two bytes a level: `{"a":[[…]]}` (30,000 levels fit the
/// test server's 64 KiB body limit).
fn arrays(levels: usize) -> String {
    format!(
        r#"{{"a":{}{}}}"#,
        "[".repeat(levels - 1),
        "]".repeat(levels - 1)
    )
}

fn event(data: &str) -> String {
    format!(r#"{{"event_type":"order.paid","data":{data}}}"#)
}

async fn post(app: &TestApp, path: &str, body: String) -> (StatusCode, Value) {
    app.send(app.request(Method::POST, path).body(body)).await
}

async fn data_nested_deeper_than_128_levels_gets_400_naming_the_limit(app: TestApp) {
    let receiver = Receiver::start().await;
    app.create_endpoint(&receiver.url, serde_json::json!({}))
        .await;
    for (levels, data) in [
        (129, nested(129)),
        (1_000, nested(1_000)),
        (30_000, arrays(30_000)),
    ] {
        let (status, body) = post(&app, "/v1/events", event(&data)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{levels} levels: {body}");
        assert_eq!(body["error"]["field"], "data", "{levels} levels: {body}");
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("at most 128"), "{levels} levels: {body}");
    }
    let batch = format!(
        r#"{{"events":[{},{}]}}"#,
        event(&nested(2)),
        event(&nested(1_000))
    );
    let (status, body) = post(&app, "/v1/events/batch", batch).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let results = body["results"].as_array().unwrap();
    assert_eq!(results[0]["status"], 202, "{body}");
    assert_eq!(results[1]["status"], 400, "{body}");
    assert_eq!(results[1]["error"]["field"], "events[1].data", "{body}");
    let message = results[1]["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("at most 128"), "{body}");

    // MariaDB's JSON functions, which the SQL contract's `kurir_outbox_payload_object` check
    // uses, read 31 levels: deeper data is refused there, with a 400 as well.
    let deepest = if app.store.backend() == "mysql" {
        let (status, body) = post(&app, "/v1/events", event(&nested(32))).await;
        assert_eq!(
            status,
            StatusCode::BAD_REQUEST,
            "32 levels on MariaDB: {body}"
        );
        assert_eq!(body["error"]["field"], "data", "{body}");
        31
    } else {
        128
    };
    let (status, body) = post(&app, "/v1/events", event(&nested(deepest))).await;
    assert_eq!(
        status,
        StatusCode::ACCEPTED,
        "{deepest} levels are allowed: {body}"
    );
    let id = body["event_id"].as_str().unwrap();
    // The batch's good event and this one. (Read as text: the event view and the webhook wrap
    // `data` in more levels than serde_json's `Value` parses by default.)
    let delivered = receiver.wait_for(2).await;
    let webhook = delivered
        .iter()
        .find(|r| r.header("webhook-id") == id)
        .expect("the deepest event allowed is delivered");
    let text = std::str::from_utf8(&webhook.body).unwrap();
    assert!(text.contains(&nested(deepest)), "delivered byte for byte");
}
