//! Issue 33, item 2: history that agrees with itself. A delivery answered with an error status
//! shows that status and what the receiver said as its last error, in the API, the CLI and the
//! dashboard; the event page counts every attempt once and numbers a replay's attempts as
//! the replay's.

use axum::http::StatusCode as AxumStatus;
use reqwest::header::COOKIE;
use serde_json::json;

use crate::api::support::{on_both_backends, Receiver, TestApp};
use crate::cli::cli_ok;
use crate::ui::sign_in;

on_both_backends!(
    a_delivery_answered_500_shows_the_status_and_the_start_of_the_body,
    the_event_page_counts_every_attempt_and_numbers_a_replays_as_such,
    a_replays_latency_is_measured_from_the_replay,
);

/// A receiver on loopback that answers every POST with `status` and `body`; its URL.
async fn answering(status: u16, body: &'static str) -> String {
    let status = AxumStatus::from_u16(status).unwrap();
    let app = axum::Router::new().route(
        "/{*path}",
        axum::routing::post(move || async move { (status, body) }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

/// Regression: a delivery answered `500` showed `LAST ERROR -` in the CLI and the dashboard,
/// though the answer and its body were recorded.
async fn a_delivery_answered_500_shows_the_status_and_the_start_of_the_body(app: TestApp) {
    let url = answering(500, "upstream database down\n  try again later").await;
    app.create_endpoint(&url, json!({"retry_max_attempts": 1}))
        .await;
    let id = app.publish("invoice.issued", json!({"invoice": 1})).await;
    let event = app.wait_for_deliveries(&id, "dead_letter").await;
    let expected = "HTTP 500: upstream database down try again later";
    assert_eq!(event["deliveries"][0]["last_error"], expected, "{event}");
    assert_eq!(
        event["deliveries"][0]["attempts"][0]["response_body"],
        "upstream database down\n  try again later",
        "the whole body stays in the attempt"
    );

    let listed = cli_ok(&app, &["deliveries", "list", "--status", "dead_letter"]).await;
    assert!(listed.contains(expected), "kurir deliveries list: {listed}");
    let shown = cli_ok(&app, &["events", "show", &id]).await;
    assert!(
        shown.contains("HTTP 500: upstream"),
        "kurir events show: {shown}"
    );

    let (cookie, _) = sign_in(&app, None).await;
    let page = reqwest::Client::new()
        .get(format!("{}/ui/dead-letters", app.url))
        .header(COOKIE, cookie)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(page.contains(expected), "the dead letters page: {page}");
}

/// Regression: the event page said "1 attempt(s)" above three attempt rows, and the numbers
/// restarted at 1 after the replay with nothing saying which run a row belonged to.
async fn the_event_page_counts_every_attempt_and_numbers_a_replays_as_such(app: TestApp) {
    let receiver = Receiver::start().await;
    receiver.respond_with(500);
    let fast =
        json!({"retry_max_attempts": 2, "retry_initial_delay_ms": 10, "retry_max_delay_ms": 10});
    app.create_endpoint(&receiver.url, fast).await;
    let id = app.publish("invoice.issued", json!({"invoice": 2})).await;
    app.wait_for_deliveries(&id, "dead_letter").await;
    receiver.respond_with(200);
    let (status, body) = app
        .post(
            &format!("/v1/events/{id}/replay"),
            json!({"reason": "back up"}),
        )
        .await;
    assert_eq!(status, reqwest::StatusCode::ACCEPTED, "{body}");
    let event = app.wait_for_deliveries(&id, "sent").await;
    let attempts = event["deliveries"][0]["attempts"].as_array().unwrap();
    let numbered: Vec<(u64, u64, u64)> = attempts
        .iter()
        .map(|a| {
            let n = |k: &str| a[k].as_u64().unwrap();
            (n("number"), n("replay"), n("attempt"))
        })
        .collect();
    assert_eq!(numbered, [(1, 0, 1), (2, 0, 2), (3, 1, 1)], "{event}");

    let (cookie, _) = sign_in(&app, None).await;
    let page = reqwest::Client::new()
        .get(format!("{}/ui/events/{id}", app.url))
        .header(COOKIE, cookie)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        page.contains("3 attempts in all, 1 since replay 1"),
        "one truthful count: {page}"
    );
    assert!(page.contains("replay 1, attempt 1"), "{page}");
    assert!(!page.contains("attempt(s)"), "{page}");

    let shown = cli_ok(&app, &["events", "show", &id]).await;
    assert!(
        shown.contains("replay 1, attempt 1"),
        "kurir events show: {shown}"
    );
}

/// Regression: the overview's "occurred → delivered" measured a replay's delivery from the
/// event's `occurred_at`, so one replay of an hour-old event read as an hour of latency.
async fn a_replays_latency_is_measured_from_the_replay(app: TestApp) {
    let receiver = Receiver::start().await;
    receiver.respond_with(500);
    app.create_endpoint(&receiver.url, json!({"retry_max_attempts": 1}))
        .await;
    let an_hour_ago = chrono::Utc::now() - chrono::Duration::hours(1);
    let (status, body) = app
        .post(
            "/v1/events",
            json!({"event_type": "invoice.issued", "data": {"invoice": 3}, "occurred_at": an_hour_ago}),
        )
        .await;
    assert!(status.is_success(), "{body}");
    let id = body["event_id"].as_str().unwrap().to_owned();
    app.wait_for_deliveries(&id, "dead_letter").await;
    receiver.respond_with(200);
    let (status, body) = app
        .post(
            &format!("/v1/events/{id}/replay"),
            json!({"reason": "back up"}),
        )
        .await;
    assert_eq!(status, reqwest::StatusCode::ACCEPTED, "{body}");
    app.wait_for_deliveries(&id, "sent").await;

    let since = chrono::Utc::now() - chrono::Duration::minutes(5);
    let latency = app.store.latency_counts(since, 60, 1).await.unwrap();
    let counted: i64 = latency.iter().map(|(_, h)| h.total()).sum();
    assert_eq!(counted, 1, "the one delivering attempt");
    let p95 = latency.iter().find_map(|(_, h)| h.quantile(0.95)).unwrap();
    assert!(
        p95 < 60_000.0,
        "measured from the replay, not an hour: {p95} ms"
    );
}
