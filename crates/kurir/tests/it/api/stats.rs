//! `GET /v1/stats`.

use serde_json::json;

use super::support::{on_both_backends, Receiver, TestApp};

on_both_backends!(stats_count_events_deliveries_and_the_backlog);

async fn stats_count_events_deliveries_and_the_backlog(app: TestApp) {
    let (_, empty) = app.get("/v1/stats").await;
    assert_eq!(empty["backlog"]["total"], 0);
    assert_eq!(empty["oldest_pending_age_seconds"], json!(null));
    assert_eq!(empty["events"]["total"], 0);

    let ok = Receiver::start().await;
    let down = Receiver::start().await;
    down.respond_with(500);
    app.create_endpoint(&ok.url, json!({})).await;
    app.create_endpoint(
        &down.url,
        json!({"retry_initial_delay_ms": 600000, "retry_max_delay_ms": 600000}),
    )
    .await;
    let id = app.publish("order.paid", json!({})).await;
    super::support::eventually("one sent, one failed", || async {
        let (_, e) = app.get(&format!("/v1/events/{id}")).await;
        let mut s: Vec<String> = e["deliveries"]
            .as_array()?
            .iter()
            .map(|d| d["status"].as_str().unwrap().to_owned())
            .collect();
        s.sort();
        (s == ["retrying", "sent"]).then_some(())
    })
    .await;

    let (_, stats) = app.get("/v1/stats").await;
    assert_eq!(
        stats["events"],
        json!({"total": 1, "dispatched": 1, "undispatched": 0, "oldest_undispatched_age_seconds": null})
    );
    assert_eq!(
        stats["deliveries"],
        json!({"pending": 0, "processing": 0, "sent": 1, "retrying": 1, "failed": 1, "dead_letter": 0, "cancelled": 0}),
        "retrying, and under its older name for clients written before"
    );
    assert_eq!(
        stats["backlog"],
        json!({"pending": 0, "processing": 0, "retrying": 1, "failed": 1, "total": 1})
    );
    assert!(stats["oldest_pending_age_seconds"].as_f64().unwrap() >= 0.0);

    // Regression (issue 33): the status read `failed` while the delivery was still being
    // retried. Its name is `retrying`; the old name still filters, for clients written before.
    for filter in ["retrying", "failed"] {
        let (_, page) = app.get(&format!("/v1/deliveries?status={filter}")).await;
        let statuses: Vec<&str> = page["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["status"].as_str().unwrap())
            .collect();
        assert_eq!(statuses, ["retrying"], "status={filter}: {page}");
    }
}
