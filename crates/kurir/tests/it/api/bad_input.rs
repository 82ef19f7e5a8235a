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
    let (status, source) = app
        .post(
            "/v1/inbox/sources",
            json!({"name": "src", "scheme": "github", "secrets": ["github-secret"],
                   "forward_url": receiver.url}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{source}");
    let create = |extra: &str| format!(r#"{{"url": "https://x.example/hook", {extra}}}"#);

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
    cases.extend(issue_12_cases(&ep, &event_id, create));
    cases.push(Case {
        header: Some(("Idempotency-Key", "has space")),
        ..field(
            "POST",
            "/v1/events",
            r#"{"event_type": "order.paid", "data": {}}"#,
            "Idempotency-Key",
        )
    });

    let mut before = app.snapshot().await;
    let mut problems = Vec::new();
    for c in cases {
        let what = format!(
            "{} {} {}",
            c.method,
            c.path,
            &c.body[..c.body.len().min(80)]
        );
        if let Err(problem) = check(&app, &c).await {
            problems.push(format!("{what}: {problem}"));
        }
        let after = app.snapshot().await;
        if after != before {
            problems.push(format!("{what}: changed the database"));
            before = after;
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Sends `c`; what is wrong with the answer, if anything.
async fn check(app: &TestApp, c: &Case) -> Result<(), String> {
    let mut req = app
        .request(c.method.parse::<Method>().unwrap(), &c.path)
        .body(c.body.clone());
    if let Some((name, value)) = c.header {
        req = req.header(name, value);
    }
    let response = req.send().await.map_err(|e| e.to_string())?;
    let status = response.status();
    let bytes = response.bytes().await.map_err(|e| e.to_string())?;
    let body: serde_json::Value = serde_json::from_slice(&bytes)
        .map_err(|_| format!("{status}, not the JSON error shape: {bytes:?}"))?;
    if status.as_u16() != c.status || body["error"]["code"] != c.code {
        return Err(format!("{status} {body}"));
    }
    if body["error"]["message"].as_str().is_none_or(str::is_empty) {
        return Err(format!("no message: {body}"));
    }
    if let Some(field) = c.field {
        let message = body["error"]["message"].as_str().unwrap_or_default();
        if body["error"]["field"] != field || !message.contains(field) {
            return Err(format!("does not name {field}: {body}"));
        }
    }
    Ok(())
}

/// The inputs issue 12 found answered with a 500, accepted and silently dropped, or accepted
/// without a bound: each is a 4xx in the JSON error shape now, naming the field.
fn issue_12_cases(ep: &str, event_id: &str, create: impl Fn(&str) -> String) -> Vec<Case> {
    let nul = r"\u0000";
    let not_found =
        |method, path: &str, body: &str| case(method, path, body, 404, "not_found", None);
    let mut cases = vec![
        // NUL in a string field, path or query.
        field(
            "POST",
            "/v1/endpoints",
            &create(&format!(r#""description": "a{nul}b""#)),
            "description",
        ),
        field(
            "POST",
            "/v1/endpoints",
            &format!(r#"{{"url": "https://x.example/a{nul}b"}}"#),
            "url",
        ),
        field(
            "POST",
            "/v1/endpoints",
            &create(&format!(r#""secret": "secret-{nul}-nul""#)),
            "secret",
        ),
        field(
            "PATCH",
            ep,
            &format!(r#"{{"enabled": false, "disabled_reason": "a{nul}"}}"#),
            "disabled_reason",
        ),
        field(
            "PATCH",
            ep,
            &format!(r#"{{"description": "a{nul}"}}"#),
            "description",
        ),
        field(
            "POST",
            "/v1/events",
            &format!(r#"{{"event_type": "order.paid", "data": {{}}, "aggregate_type": "o{nul}"}}"#),
            "aggregate_type",
        ),
        field(
            "POST",
            "/v1/events",
            &format!(r#"{{"event_type": "order.paid", "data": {{}}, "aggregate_id": "1{nul}"}}"#),
            "aggregate_id",
        ),
        field(
            "POST",
            &format!("/v1/events/{event_id}/replay"),
            &format!(r#"{{"reason": "a{nul}"}}"#),
            "reason",
        ),
        field(
            "POST",
            "/v1/replays",
            &format!(r#"{{"reason": "a{nul}"}}"#),
            "reason",
        ),
        field(
            "POST",
            "/v1/inbox/sources",
            &format!(
                r#"{{"name": "s2", "scheme": "github", "secrets": ["github-secret"], "forward_url": "https://x.example/{nul}"}}"#
            ),
            "forward_url",
        ),
        field(
            "POST",
            "/v1/inbox/sources",
            &format!(
                r#"{{"name": "s2", "scheme": "github", "secrets": ["github-{nul}-secret"], "forward_url": "https://x.example/"}}"#
            ),
            "secrets",
        ),
        field(
            "PATCH",
            "/v1/inbox/sources/src",
            r#"{"forward_url": "http:///path"}"#,
            "forward_url",
        ),
        not_found("GET", "/v1/events/%00", ""),
        not_found("POST", "/v1/events/%00/replay", r#"{"reason": "x"}"#),
        field("GET", "/v1/events?event_type=%00", "", "event_type"),
        field("GET", "/v1/events?aggregate_id=%00", "", "aggregate_id"),
        field("GET", "/v1/deliveries?event_type=%00", "", "event_type"),
        not_found("GET", "/v1/inbox/sources/%00", ""),
        not_found("PATCH", "/v1/inbox/sources/%00", "{}"),
        not_found("DELETE", "/v1/inbox/sources/%00", ""),
        not_found("POST", "/inbox/%00", "{}"),
        not_found("GET", "/inbox/%00/events/x", ""),
        not_found("GET", "/inbox/src/events/%00", ""),
        // Numbers out of range, which were a 500 or silently dropped on read back.
        field(
            "POST",
            "/v1/endpoints",
            &create(r#""max_in_flight": 2147483648"#),
            "max_in_flight",
        ),
        field(
            "POST",
            "/v1/endpoints",
            &create(r#""max_in_flight": 1001"#),
            "max_in_flight",
        ),
        field(
            "PATCH",
            ep,
            r#"{"max_in_flight": 2147483648}"#,
            "max_in_flight",
        ),
        field(
            "POST",
            "/v1/endpoints",
            &create(r#""connect_timeout_ms": 4294967295"#),
            "connect_timeout_ms",
        ),
        field(
            "PATCH",
            ep,
            r#"{"connect_timeout_ms": 4294967295}"#,
            "connect_timeout_ms",
        ),
        field(
            "POST",
            "/v1/endpoints",
            &create(r#""request_timeout_ms": 2147483648"#),
            "request_timeout_ms",
        ),
        field(
            "POST",
            "/v1/endpoints",
            &create(r#""request_timeout_ms": 99"#),
            "request_timeout_ms",
        ),
        field(
            "POST",
            "/v1/endpoints",
            &create(r#""retry_initial_delay_ms": 10000000000000000000"#),
            "retry_initial_delay_ms",
        ),
        field(
            "POST",
            "/v1/endpoints",
            &create(r#""retry_max_delay_ms": 10000000000000000000"#),
            "retry_max_delay_ms",
        ),
        // No bound: instant retries without end.
        field(
            "POST",
            "/v1/endpoints",
            &create(r#""retry_initial_delay_ms": 0"#),
            "retry_initial_delay_ms",
        ),
        field(
            "POST",
            "/v1/endpoints",
            &create(r#""retry_max_attempts": 2147483647"#),
            "retry_max_attempts",
        ),
        field(
            "POST",
            "/v1/endpoints",
            &create(r#""retry_max_attempts": 51"#),
            "retry_max_attempts",
        ),
        // URLs that become something else, or leak.
        field("POST", "/v1/endpoints", r#"{"url": "http:///path"}"#, "url"),
        field(
            "POST",
            "/v1/endpoints",
            r#"{"url": "https://user:pw@x.example/hook"}"#,
            "url",
        ),
        field(
            "POST",
            "/v1/endpoints",
            r#"{"url": "https://user@x.example/hook"}"#,
            "url",
        ),
        field(
            "POST",
            "/v1/endpoints",
            r#"{"url": "https://x.example/a\r\nb"}"#,
            "url",
        ),
        field(
            "POST",
            "/v1/endpoints",
            r#"{"url": "https://x.example/a b"}"#,
            "url",
        ),
        field(
            "POST",
            "/v1/endpoints",
            r#"{"url": "http:x.example/hook"}"#,
            "url",
        ),
        field("PATCH", ep, r#"{"url": "https://u:p@x.example/"}"#, "url"),
        // Times outside the years both databases and RFC 3339 hold.
        field(
            "POST",
            "/v1/events",
            r#"{"event_type": "order.paid", "data": {}, "occurred_at": "-262143-01-01T00:00:00Z"}"#,
            "occurred_at",
        ),
        field(
            "POST",
            "/v1/events",
            r#"{"event_type": "order.paid", "data": {}, "occurred_at": "-0001-01-01T00:00:00Z"}"#,
            "occurred_at",
        ),
        field(
            "GET",
            "/v1/events?since=-262143-01-01T00:00:00Z",
            "",
            "since",
        ),
        field(
            "GET",
            "/v1/deliveries?until=-262143-01-01T00:00:00Z",
            "",
            "until",
        ),
        field(
            "POST",
            "/v1/replays",
            r#"{"reason": "x", "since": "-262143-01-01T00:00:00Z"}"#,
            "since",
        ),
        // Ids are validated.
        field("GET", "/v1/deliveries?endpoint_id=xyz", "", "endpoint_id"),
        // A path segment that is not UTF-8.
        case("GET", "/v1/endpoints/%FF", "", 400, "invalid_request", None),
        case("GET", "/v1/events/%FF%FE", "", 400, "invalid_request", None),
        case("POST", "/inbox/%FF", "{}", 400, "invalid_request", None),
    ];
    cases.push(case("GET", "/no/such/route", "", 404, "not_found", None));
    cases
}
