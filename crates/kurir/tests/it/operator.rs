//! The operator surfaces the dashboard needs, through the admin API of a real `kurir serve` on
//! both backends: the endpoint test event, the URL warning at create time, the inbox's event
//! listing and retry, inbox figures in `/v1/stats`, forward metrics, and the replay dry run.

use kurir_core::{Scheme, Secret, Verifier};
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::api::support::{eventually, on_both_backends, Backend, Receiver, TestApp, TestDb};
use crate::gateway::{post_inbox, standard_webhook, PARTNER_SECRET};

// Each runs on both backends with forwards and deliveries given up after two attempts.
on_both_backends!(with super::run;
    a_test_event_is_sent_signed_at_once_and_its_answer_returned,
    a_url_the_ssrf_guard_refuses_is_warned_about_at_create_time,
    inbox_events_are_listed_filtered_paged_and_a_failed_one_retried,
    a_replay_preview_counts_what_the_replay_then_replays,
);

async fn run<F, Fut>(backend: Backend, test: F)
where
    F: FnOnce(TestApp) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let Some(database) = TestDb::unmigrated(backend).await else {
        return;
    };
    let app = TestApp::spawn_with(&database, &[("retry_max_attempts", "2")]).await;
    let stop = app.stopper();
    test(app).await;
    stop.stop().await;
    drop(database);
}

async fn a_test_event_is_sent_signed_at_once_and_its_answer_returned(app: TestApp) {
    let receiver = Receiver::start().await;
    // The filter does not match kurir.test: a test is sent whatever the filter says.
    let endpoint = app
        .create_endpoint(&receiver.url, json!({"event_types": ["order.*"]}))
        .await;
    let id = endpoint["id"].as_str().unwrap();
    let (status, result) = app
        .post(&format!("/v1/endpoints/{id}/test"), json!({}))
        .await;
    assert_eq!(status, StatusCode::OK, "{result}");
    assert_eq!(result["delivered"], true, "{result}");
    assert_eq!(result["status_code"], 200);
    assert!(result["duration_ms"].is_i64());
    let got = receiver.wait_for(1).await;
    assert_eq!(got.len(), 1, "exactly one request, at once");
    let secret = Secret::parse(endpoint["secret"].as_str().unwrap()).unwrap();
    let verified = Verifier::new(Scheme::StandardWebhooks, vec![secret])
        .verify(&got[0].headers, &got[0].body, chrono::Utc::now())
        .expect("the test event is signed with the endpoint's secret");
    assert_eq!(verified.event_id.as_deref(), result["event_id"].as_str());
    assert_eq!(got[0].json()["event_type"], "kurir.test");
    // The request it answers with is the one the endpoint received: every header kurir set,
    // signatures included, and the body byte for byte.
    let request = &result["request"];
    assert_eq!(
        (&request["method"], &request["url"]),
        (&json!("POST"), &json!(receiver.url))
    );
    let sent = request["headers"].as_array().unwrap();
    for name in [
        "content-type",
        "x-webhook-signature",
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
    ] {
        let shown = sent
            .iter()
            .find(|h| h["name"] == name)
            .unwrap_or_else(|| panic!("{name}: {request}"));
        assert_eq!(
            shown["value"].as_str(),
            got[0].headers.get(name).and_then(|v| v.to_str().ok()),
            "{name}"
        );
    }
    assert_eq!(
        request["body"].as_str().unwrap().as_bytes(),
        &got[0].body[..]
    );

    receiver.respond_with(503);
    let (_, failed) = app
        .post(&format!("/v1/endpoints/{id}/test"), json!({}))
        .await;
    assert_eq!(
        (failed["delivered"].clone(), failed["status_code"].clone()),
        (json!(false), json!(503))
    );
    let (_, event) = app.get("/v1/events?limit=10").await;
    assert_eq!(event["data"], json!([]), "test events are not stored");

    let (status, _) = app
        .post(
            "/v1/endpoints/0190f3c2-0000-7000-8000-000000000000/test",
            json!({}),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

async fn a_url_the_ssrf_guard_refuses_is_warned_about_at_create_time(app: TestApp) {
    // Tests allow 127.0.0.0/8 only: a private address will be refused at every attempt.
    let (status, refused) = app
        .post(
            "/v1/endpoints",
            json!({"url": "http://10.1.2.3:8080/hooks"}),
        )
        .await;
    assert_eq!(
        status,
        StatusCode::CREATED,
        "still created: the network may be allowed later"
    );
    let warnings = refused["warnings"].as_array().expect("a warning");
    assert_eq!(warnings.len(), 1, "{refused}");
    let text = warnings[0].as_str().unwrap();
    assert!(
        text.contains("10.1.2.3 is a private address") && text.contains("KURIR_ALLOWED_NETWORKS"),
        "{text}"
    );
    let allowed = app
        .create_endpoint("http://127.0.0.1:9/hooks", json!({}))
        .await;
    assert!(allowed.get("warnings").is_none(), "{allowed}");
    let named = app
        .create_endpoint("https://partner.example/hooks", json!({}))
        .await;
    assert!(
        named.get("warnings").is_none(),
        "host names are not resolved: {named}"
    );
    let id = allowed["id"].as_str().unwrap();
    let (_, moved) = app
        .patch(
            &format!("/v1/endpoints/{id}"),
            json!({"url": "http://[fd00::1]/x"}),
        )
        .await;
    assert!(
        moved["warnings"][0]
            .as_str()
            .unwrap()
            .contains("unique-local"),
        "{moved}"
    );
}

/// Sends `n` Standard Webhooks events to source `name`; returns their ids, oldest first.
async fn receive(app: &TestApp, name: &str, prefix: &str, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..n {
        let id = format!("{prefix}_{i}");
        let (status, answer) = post_inbox(app, name, &standard_webhook(&id, "invoice.paid")).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
        ids.push(id);
    }
    ids
}

async fn inbox_events_of(app: &TestApp, query: &str) -> (StatusCode, Value) {
    app.get(&format!("/v1/inbox/sources/billing/events{query}"))
        .await
}

async fn inbox_events_are_listed_filtered_paged_and_a_failed_one_retried(app: TestApp) {
    let forward_to = Receiver::start().await;
    forward_to.respond_with(500);
    let body = json!({"name": "billing", "scheme": "standard-webhooks", "secrets": [PARTNER_SECRET],
                      "forward_url": forward_to.url});
    assert_eq!(
        app.post("/v1/inbox/sources", body).await.0,
        StatusCode::CREATED
    );
    let ids = receive(&app, "billing", "evt", 3).await;
    // Two attempts each, then given up.
    eventually("every event to fail for good", || async {
        let (_, page) = inbox_events_of(&app, "?status=failed").await;
        let page = page["data"].as_array()?.clone();
        let done = page.len() == 3
            && page
                .iter()
                .all(|e| e["attempts"] == 2 && e["next_attempt_at"].is_null());
        done.then_some(())
    })
    .await;
    let (status, first) = inbox_events_of(&app, "?limit=2").await;
    assert_eq!(status, StatusCode::OK, "{first}");
    let listed: Vec<&str> = first["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event_id"].as_str().unwrap())
        .collect();
    assert_eq!(listed, [ids[2].as_str(), ids[1].as_str()], "newest first");
    let event = &first["data"][0];
    assert_eq!(event["status"], "failed");
    assert_eq!(event["event_type"], "invoice.paid");
    assert_eq!(event["last_error"], "forward answered HTTP 500");
    assert!(
        event.get("payload").is_none() && !first.to_string().contains("250000"),
        "no bodies: {first}"
    );
    let cursor = first["next_cursor"].as_str().unwrap();
    let (_, second) = inbox_events_of(&app, &format!("?limit=2&cursor={cursor}")).await;
    assert_eq!(second["data"][0]["event_id"], ids[0].as_str());
    assert!(second.get("next_cursor").is_none());
    assert_eq!(
        inbox_events_of(&app, "?status=completed").await.1["data"],
        json!([])
    );
    let (status, bad) = inbox_events_of(&app, "?status=done").await;
    assert_eq!(
        (status, bad["error"]["field"].clone()),
        (StatusCode::BAD_REQUEST, json!("status"))
    );
    let (status, _) = app.get("/v1/inbox/sources/nobody/events").await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    let (_, stats) = app.get("/v1/stats").await;
    assert_eq!(stats["inbox"]["failed"], 3, "{stats}");
    assert_eq!(stats["inbox"]["sources"][0]["source"], "billing");
    assert_eq!(stats["inbox"]["sources"][0]["failed"], 3);
    assert!(
        stats["inbox"]["oldest_unforwarded_age_seconds"]
            .as_f64()
            .unwrap()
            >= 0.0
    );
    let metrics = reqwest::get(format!("{}/metrics", app.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("kurir_inbox_forwards_total{source=\"billing\",outcome=\"rejected\"} 6"),
        "forwards are counted: {metrics}"
    );
    assert!(metrics.contains("kurir_inbox_forward_duration_seconds_count{source=\"billing\"} 6"));

    forward_to.respond_with(200);
    let retry = format!("/v1/inbox/sources/billing/events/{}/retry", ids[1]);
    let (status, answer) = app.post(&retry, json!({})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
    eventually("the retried event to be forwarded", || async {
        let (_, page) = inbox_events_of(&app, "?status=completed").await;
        (page["data"][0]["event_id"] == ids[1].as_str()).then_some(())
    })
    .await;
    let (status, again) = app.post(&retry, json!({})).await;
    assert_eq!(
        (status, again["error"]["code"].clone()),
        (StatusCode::CONFLICT, json!("not_failed"))
    );
    let (status, _) = app
        .post("/v1/inbox/sources/billing/events/nope/retry", json!({}))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(
        inbox_events_of(&app, "?status=failed").await.1["data"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
}

async fn a_replay_preview_counts_what_the_replay_then_replays(app: TestApp) {
    let down = Receiver::start().await;
    down.respond_with(500);
    let endpoint = app.create_endpoint(&down.url, json!({})).await;
    let id = endpoint["id"].as_str().unwrap();
    for _ in 0..3 {
        app.publish("order.paid", json!({})).await;
    }
    app.publish("order.shipped", json!({})).await;
    eventually("four dead letters", || async {
        let (_, page) = app.get("/v1/deliveries?status=dead_letter").await;
        (page["data"].as_array()?.len() == 4).then_some(())
    })
    .await;
    let (status, preview) = app
        .get(&format!(
            "/v1/replays/preview?endpoint_id={id}&event_type=order.paid"
        ))
        .await;
    assert_eq!(status, StatusCode::OK, "{preview}");
    assert_eq!(preview["matching"], 3);
    let (_, all) = app.get("/v1/replays/preview").await;
    assert_eq!(all["matching"], 4, "dead letters by default");
    let (_, audit) = app.get("/v1/replays").await;
    assert_eq!(audit["data"], json!([]), "a preview is not a replay");
    let (status, _) = app.get("/v1/replays/preview?status=nope").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    down.respond_with(200);
    let (_, replayed) = app
        .post(
            "/v1/replays",
            json!({"endpoint_id": id, "event_type": "order.paid", "reason": "fixed"}),
        )
        .await;
    assert_eq!(replayed["replayed"], 3);
}
