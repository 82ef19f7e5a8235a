//! Every kind of bad input gets its documented 4xx, names the field at fault, and changes
//! nothing stored.

use base64::Engine;
use reqwest::{Method, StatusCode};
use serde_json::json;

use super::support::{on_both_backends, Receiver, TestApp};

on_both_backends!(bad_inputs_get_the_documented_4xx_and_change_nothing);

/// One bad request: what is sent and what must come back.
struct Case {
    method: &'static str,
    path: String,
    body: String,
    header: Option<(&'static str, &'static str)>,
    status: u16,
    code: &'static str,
    field: Option<&'static str>,
}

fn case(
    method: &'static str,
    path: &str,
    body: &str,
    status: u16,
    code: &'static str,
    field: Option<&'static str>,
) -> Case {
    Case {
        method,
        path: path.to_owned(),
        body: body.to_owned(),
        header: None,
        status,
        code,
        field,
    }
}

fn field(method: &'static str, path: &str, body: &str, field: &'static str) -> Case {
    case(method, path, body, 400, "invalid_field", Some(field))
}

async fn bad_inputs_get_the_documented_4xx_and_change_nothing(app: TestApp) {
    let receiver = Receiver::start().await;
    let endpoint = app.create_endpoint(&receiver.url, json!({})).await;
    let id = endpoint["id"].as_str().unwrap().to_owned();
    let event_id = app.publish("order.paid", json!({"order_id": "1"})).await;
    app.wait_for_deliveries(&event_id, "sent").await;
    let unknown = "01900000-0000-7000-8000-000000000000";
    let events_cursor = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode("events:5");
    let big = format!(
        r#"{{"event_type":"order.paid","data":{{"blob":"{}"}}}}"#,
        "x".repeat(70 * 1024)
    );
    let ep = format!("/v1/endpoints/{id}");

    let mut cases = vec![
        case(
            "POST",
            "/v1/endpoints",
            r#"{"url": "#,
            400,
            "invalid_json",
            None,
        ),
        case(
            "POST",
            "/v1/endpoints",
            "not json at all",
            400,
            "invalid_json",
            None,
        ),
        case(
            "POST",
            "/v1/endpoints",
            r#"["https://x.example"]"#,
            400,
            "invalid_request",
            None,
        ),
        field("POST", "/v1/endpoints", r#"{}"#, "url"),
        field(
            "POST",
            "/v1/endpoints",
            r#"{"url": "ftp://x.example/hook"}"#,
            "url",
        ),
        field(
            "POST",
            "/v1/endpoints",
            r#"{"url": "/relative/hook"}"#,
            "url",
        ),
        field("POST", "/v1/endpoints", r#"{"url": 42}"#, "url"),
        field(
            "POST",
            "/v1/endpoints",
            r#"{"url": "https://x.example", "max_in_flight": "many"}"#,
            "max_in_flight",
        ),
        field(
            "POST",
            "/v1/endpoints",
            r#"{"url": "https://x.example", "max_in_flight": 0}"#,
            "max_in_flight",
        ),
        field(
            "POST",
            "/v1/endpoints",
            r#"{"url": "https://x.example", "max_in_flight": -1}"#,
            "max_in_flight",
        ),
        field(
            "POST",
            "/v1/endpoints",
            r#"{"url": "https://x.example", "event_types": ["Order Paid"]}"#,
            "event_types",
        ),
        field(
            "POST",
            "/v1/endpoints",
            r#"{"url": "https://x.example", "event_types": "order.paid"}"#,
            "event_types",
        ),
        field(
            "POST",
            "/v1/endpoints",
            r#"{"url": "https://x.example", "secret": "short"}"#,
            "secret",
        ),
        field(
            "POST",
            "/v1/endpoints",
            r#"{"url": "https://x.example", "colour": "red"}"#,
            "colour",
        ),
        field(
            "POST",
            "/v1/endpoints",
            r#"{"url": "https://x.example", "request_timeout_ms": 0}"#,
            "request_timeout_ms",
        ),
        field("PATCH", &ep, r#"{"url": "nope"}"#, "url"),
        field("PATCH", &ep, r#"{"enabled": "yes"}"#, "enabled"),
        field(
            "PATCH",
            &ep,
            r#"{"disabled_reason": "why not"}"#,
            "disabled_reason",
        ),
        field(
            "PATCH",
            &ep,
            r#"{"retry_initial_delay_ms": 5000, "retry_max_delay_ms": 10}"#,
            "retry_initial_delay_ms",
        ),
        case(
            "PATCH",
            &format!("/v1/endpoints/{unknown}"),
            r#"{"description": "x"}"#,
            404,
            "not_found",
            None,
        ),
        case(
            "DELETE",
            "/v1/endpoints/not-a-uuid",
            "",
            404,
            "not_found",
            None,
        ),
        case(
            "POST",
            &format!("/v1/endpoints/{unknown}/rotate-secret"),
            "{}",
            404,
            "not_found",
            None,
        ),
        field(
            "POST",
            &format!("{ep}/rotate-secret"),
            r#"{"grace_period_seconds": -5}"#,
            "grace_period_seconds",
        ),
        field(
            "POST",
            "/v1/events",
            r#"{"event_type": "Order Paid", "data": {}}"#,
            "event_type",
        ),
        field(
            "POST",
            "/v1/events",
            r#"{"event_type": "order..paid", "data": {}}"#,
            "event_type",
        ),
        field(
            "POST",
            "/v1/events",
            r#"{"event_type": "order.paid", "data": [1, 2]}"#,
            "data",
        ),
        field(
            "POST",
            "/v1/events",
            r#"{"event_type": "order.paid", "data": "text"}"#,
            "data",
        ),
        field(
            "POST",
            "/v1/events",
            r#"{"event_type": "order.paid", "data": null}"#,
            "data",
        ),
        field(
            "POST",
            "/v1/events",
            r#"{"event_type": "order.paid"}"#,
            "data",
        ),
        field("POST", "/v1/events", r#"{"data": {}}"#, "event_type"),
        field(
            "POST",
            "/v1/events",
            r#"{"event_type": "order.paid", "data": {}, "version": 0}"#,
            "version",
        ),
        field(
            "POST",
            "/v1/events",
            r#"{"event_type": "order.paid", "data": {}, "version": "1"}"#,
            "version",
        ),
        field(
            "POST",
            "/v1/events",
            r#"{"event_type": "order.paid", "data": {}, "occurred_at": "yesterday"}"#,
            "occurred_at",
        ),
        field(
            "POST",
            "/v1/events",
            r#"{"event_type": "order.paid", "data": {}, "event_id": "has space"}"#,
            "event_id",
        ),
        field(
            "POST",
            "/v1/events",
            r#"{"event_type": "order.paid", "data": {}, "aggregate_id": ""}"#,
            "aggregate_id",
        ),
        case("POST", "/v1/events", &big, 413, "payload_too_large", None),
        case(
            "GET",
            "/v1/events/no-such-event",
            "",
            404,
            "not_found",
            None,
        ),
        field("GET", "/v1/events?cursor=garbage", "", "cursor"),
        field(
            "GET",
            &format!("/v1/deliveries?cursor={events_cursor}"),
            "",
            "cursor",
        ),
        field("GET", "/v1/events?limit=0", "", "limit"),
        field("GET", "/v1/events?limit=lots", "", "limit"),
        field("GET", "/v1/events?limit=100000", "", "limit"),
        field("GET", "/v1/events?since=last-tuesday", "", "since"),
        field(
            "GET",
            "/v1/events?since=2026-02-01T00:00:00Z&until=2026-01-01T00:00:00Z",
            "",
            "until",
        ),
        field("GET", "/v1/events?evnt_type=order.paid", "", "evnt_type"),
        field("GET", "/v1/deliveries?status=lost", "", "status"),
        field("GET", "/v1/replays?cursor=garbage", "", "cursor"),
        field("POST", "/v1/replays", r#"{}"#, "reason"),
        field("POST", "/v1/replays", r#"{"reason": "   "}"#, "reason"),
        field(
            "POST",
            "/v1/replays",
            r#"{"reason": "x", "status": "lost"}"#,
            "status",
        ),
        field(
            "POST",
            "/v1/replays",
            r#"{"reason": "x", "event_type": "BAD TYPE"}"#,
            "event_type",
        ),
        field(
            "POST",
            "/v1/replays",
            r#"{"reason": "x", "since": 5}"#,
            "since",
        ),
        case(
            "POST",
            "/v1/replays",
            &format!(r#"{{"reason": "x", "endpoint_id": "{unknown}"}}"#),
            404,
            "not_found",
            None,
        ),
        field(
            "POST",
            &format!("/v1/events/{event_id}/replay"),
            r#"{"reason": ""}"#,
            "reason",
        ),
        case(
            "POST",
            "/v1/events/no-such-event/replay",
            r#"{"reason": "x"}"#,
            404,
            "not_found",
            None,
        ),
        case("PUT", "/v1/events", "{}", 405, "method_not_allowed", None),
    ];
    cases.push(Case {
        header: Some(("Idempotency-Key", "has space")),
        ..field(
            "POST",
            "/v1/events",
            r#"{"event_type": "order.paid", "data": {}}"#,
            "Idempotency-Key",
        )
    });

    let before = app.snapshot().await;
    for c in cases {
        let mut req = app
            .request(c.method.parse::<Method>().unwrap(), &c.path)
            .body(c.body.clone());
        if let Some((name, value)) = c.header {
            req = req.header(name, value);
        }
        let (status, body) = app.send(req).await;
        let what = format!(
            "{} {} {}",
            c.method,
            c.path,
            &c.body[..c.body.len().min(80)]
        );
        assert_eq!(
            status,
            StatusCode::from_u16(c.status).unwrap(),
            "{what}: {body}"
        );
        assert_eq!(body["error"]["code"], c.code, "{what}: {body}");
        assert!(
            !body["error"]["message"].as_str().unwrap().is_empty(),
            "{what}"
        );
        if let Some(field) = c.field {
            assert_eq!(body["error"]["field"], field, "{what}: {body}");
            assert!(
                body["error"]["message"].as_str().unwrap().contains(field),
                "{what}: the message names the field: {body}"
            );
        }
        assert_eq!(app.snapshot().await, before, "{what} changed the database");
    }
}
