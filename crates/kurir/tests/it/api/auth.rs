//! Every `/v1` route needs a token (the admin token or a named one) but the OpenAPI document;
//! health checks do not. What each role may do is `tokens`'s.

use reqwest::{Method, StatusCode};

use super::support::{on_both_backends, TestApp};

/// Every route of the admin API, with a concrete path.
pub const ROUTES: &[(&str, &str)] = &[
    ("POST", "/v1/endpoints"),
    ("GET", "/v1/endpoints"),
    ("GET", "/v1/endpoints/01900000-0000-7000-8000-000000000000"),
    (
        "PATCH",
        "/v1/endpoints/01900000-0000-7000-8000-000000000000",
    ),
    (
        "DELETE",
        "/v1/endpoints/01900000-0000-7000-8000-000000000000",
    ),
    (
        "POST",
        "/v1/endpoints/01900000-0000-7000-8000-000000000000/rotate-secret",
    ),
    ("POST", "/v1/events"),
    ("GET", "/v1/events"),
    ("GET", "/v1/events/evt_1"),
    ("POST", "/v1/events/evt_1/replay"),
    ("GET", "/v1/events/evt_1/replay/preview"),
    ("GET", "/v1/deliveries"),
    ("POST", "/v1/replays"),
    ("GET", "/v1/replays"),
    ("GET", "/v1/replays/preview"),
    ("GET", "/v1/stats"),
    (
        "POST",
        "/v1/endpoints/01900000-0000-7000-8000-000000000000/test",
    ),
    ("GET", "/v1/inbox/sources/billing/events"),
    ("POST", "/v1/inbox/sources/billing/events/evt_1/retry"),
    ("POST", "/v1/tokens"),
    ("GET", "/v1/tokens"),
    ("DELETE", "/v1/tokens/tok_0190f3c2aaaa7000800000000000beef"),
    ("GET", "/v1/whoami"),
    ("GET", "/v1/no-such-route"),
];

on_both_backends!(
    every_v1_route_refuses_a_missing_or_wrong_token,
    health_checks_need_no_token
);

async fn every_v1_route_refuses_a_missing_or_wrong_token(app: TestApp) {
    let client = reqwest::Client::new();
    for (method, path) in ROUTES {
        let method: Method = method.parse().unwrap();
        let url = format!("{}{path}", app.url);
        for (what, req) in [
            ("no token", client.request(method.clone(), &url)),
            (
                "wrong token",
                client
                    .request(method.clone(), &url)
                    .bearer_auth("not-the-token"),
            ),
            (
                "wrong scheme",
                client
                    .request(method.clone(), &url)
                    .basic_auth("admin", Some(super::support::TOKEN)),
            ),
        ] {
            let (status, body) = app.send(req.body("{}")).await;
            assert_eq!(
                status,
                StatusCode::UNAUTHORIZED,
                "{method} {path} with {what}: {body}"
            );
            assert_eq!(body["error"]["code"], "unauthorized", "{method} {path}");
        }
    }
    assert_eq!(app.snapshot().await, "[]\n[]\n[]\n[]\nreplays: 0");
}

async fn health_checks_need_no_token(app: TestApp) {
    for path in ["/healthz", "/readyz"] {
        let resp = reqwest::get(format!("{}{path}", app.url)).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK, "{path}");
    }
    let resp = app
        .request(Method::GET, "/v1/stats")
        .header("x-request-id", "req-42")
        .send()
        .await
        .unwrap();
    assert_eq!(
        resp.headers()["x-request-id"],
        "req-42",
        "a client's request id is kept"
    );
    let resp = app.request(Method::GET, "/v1/stats").send().await.unwrap();
    assert!(
        !resp.headers()["x-request-id"].is_empty(),
        "a request id is made"
    );
}
