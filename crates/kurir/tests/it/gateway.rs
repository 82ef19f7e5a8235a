//! The inbox gateway end to end, through a real `kurir serve` on both backends: partners POST
//! signed webhooks to `/inbox/{source}`, kurir forwards each accepted event once to a recording
//! receiver, signed with the `kurir` scheme, retried until 2xx; status polling with the read
//! token or the admin token.

use chrono::Utc;
use kurir_core::{Scheme, Secret, Verifier};
use reqwest::StatusCode;
use serde_json::{json, Value};

use axum::response::IntoResponse;

use crate::api::support::{
    eventually, on_both_backends, Backend, Received, Receiver, TestApp, TestDb, TOKEN,
};
use crate::support::receiver::Receiver as ScriptedReceiver;
use crate::support::receiver::Recorded;

on_both_backends!(
    a_standard_webhooks_request_is_forwarded_once_signed_and_reported_completed,
    a_failing_forward_target_is_retried_until_it_succeeds,
    a_bad_request_is_refused_and_nothing_is_stored_or_forwarded,
    the_status_route_needs_the_admin_token_or_the_sources_read_token,
    kurir_delivers_to_its_own_inbox_gateway_which_forwards_once_with_the_same_event_id,
    a_replay_under_new_id_headers_is_refused_and_forwarded_once,
    a_forward_answered_410_fails_for_good,
);

on_both_backends!(an_inbox_retry_keeps_every_forward_attempt_and_audits_who_retried);

/// The Standard Webhooks secret partners sign with in these tests.
pub(crate) const PARTNER_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// A source's generated credentials, shown once at creation.
pub(crate) struct Source {
    forward_secret: String,
    read_token: String,
}

impl Source {
    pub(crate) fn forward_secret(&self) -> &str {
        &self.forward_secret
    }
}

pub(crate) async fn create_source(
    app: &TestApp,
    name: &str,
    scheme: &str,
    secret: &str,
    to: &str,
) -> Source {
    let body = json!({"name": name, "scheme": scheme, "secrets": [secret], "forward_url": to});
    let (status, created) = app.post("/v1/inbox/sources", body).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    Source {
        forward_secret: created["forward_secret"].as_str().unwrap().to_owned(),
        read_token: created["read_token"].as_str().unwrap().to_owned(),
    }
}

/// A `standard-webhooks` source named `name`, signed with [`PARTNER_SECRET`], that forwards to
/// a new recording receiver.
async fn standard_source(app: &TestApp, name: &str) -> (Receiver, Source) {
    let app_side = Receiver::start().await;
    let source = create_source(
        app,
        name,
        "standard-webhooks",
        PARTNER_SECRET,
        &app_side.url,
    )
    .await;
    (app_side, source)
}

/// A webhook as a Standard Webhooks sender makes it, signed now by the reference crate.
pub(crate) struct Signed {
    id: String,
    headers: Vec<(&'static str, String)>,
    body: Vec<u8>,
}

pub(crate) fn standard_webhook(id: &str, event_type: &str) -> Signed {
    let body = json!({"type": event_type, "data": {"invoice": id, "amount": 250_000}})
        .to_string()
        .into_bytes();
    let timestamp = Utc::now().timestamp();
    let signature = standardwebhooks::Webhook::new(PARTNER_SECRET)
        .unwrap()
        .sign(id, timestamp, &body)
        .unwrap();
    Signed {
        id: id.to_owned(),
        headers: vec![
            ("content-type", "application/json".to_owned()),
            ("webhook-id", id.to_owned()),
            ("webhook-timestamp", timestamp.to_string()),
            ("webhook-signature", signature),
        ],
        body,
    }
}

/// POSTs `signed` to `/inbox/{source}` without any admin token; the status and JSON answer.
pub(crate) async fn post_inbox(
    app: &TestApp,
    source: &str,
    signed: &Signed,
) -> (StatusCode, Value) {
    let mut request = reqwest::Client::new()
        .post(format!("{}/inbox/{source}", app.url))
        .body(signed.body.clone());
    for (name, value) in &signed.headers {
        request = request.header(*name, value);
    }
    app.send(request).await
}

/// `GET /inbox/{source}/events/{id}` with `token` (none when `None`).
async fn poll(app: &TestApp, source: &str, id: &str, token: Option<&str>) -> (StatusCode, Value) {
    let mut request = reqwest::Client::new().get(format!("{}/inbox/{source}/events/{id}", app.url));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    app.send(request).await
}

/// Polls the status until it is `completed`; returns it.
async fn wait_completed(app: &TestApp, source: &str, id: &str, token: &str) -> Value {
    eventually(&format!("inbox event {id} to complete"), || async {
        let (status, body) = poll(app, source, id, Some(token)).await;
        (status == StatusCode::OK && body["status"] == "completed").then_some(body)
    })
    .await
}

/// Checks `forward` is signed by `forward_secret` under both schemes it carries (kurir-core's own
/// verifier, as an application would) and returns its event id: Standard Webhooks' `webhook-id`,
/// which its signature covers (the body is the sender's, which need not carry kurir's
/// `event_id`).
fn verify_forward(forward: &Received, forward_secret: &str) -> String {
    let secret = Secret::parse(forward_secret).unwrap();
    Verifier::new(Scheme::Kurir, vec![secret.clone()])
        .verify(&forward.headers, &forward.body, Utc::now())
        .expect("the forward is signed with the source's forward secret, kurir scheme");
    let verified = Verifier::new(Scheme::StandardWebhooks, vec![secret])
        .verify(&forward.headers, &forward.body, Utc::now())
        .expect("the forward is signed with the source's forward secret, Standard Webhooks");
    verified.event_id.expect("the forward names its event")
}

/// How many of `received` are forwards of event `id`.
fn forwards_of(received: &[Received], id: &str) -> usize {
    received
        .iter()
        .filter(|r| r.header("x-webhook-event-id") == id)
        .count()
}

async fn a_standard_webhooks_request_is_forwarded_once_signed_and_reported_completed(app: TestApp) {
    let (app_side, source) = standard_source(&app, "src").await;
    let webhook = standard_webhook("msg_2tQ7", "invoice.paid");

    let (status, answer) = post_inbox(&app, "src", &webhook).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
    assert_eq!(answer, json!({"status": "pending", "event_id": "msg_2tQ7"}));

    let forwarded = app_side.wait_for(1).await;
    let forward = &forwarded[0];
    assert_eq!(verify_forward(forward, &source.forward_secret), "msg_2tQ7");
    assert_eq!(
        forward.body, webhook.body,
        "the original body, byte for byte"
    );
    assert_eq!(forward.header("x-webhook-event"), "invoice.paid");
    assert_eq!(forward.header("x-kurir-source"), "src");
    assert_eq!(forward.header("content-type"), "application/json");
    assert!(
        forward
            .headers
            .get("webhook-signature")
            .is_some_and(|s| s != webhook.headers[3].1.as_str()),
        "the partner's signature is not passed on"
    );

    let done = wait_completed(&app, "src", "msg_2tQ7", &source.read_token).await;
    assert_eq!(done["attempts"], 1);
    assert_eq!(done["event_type"], "invoice.paid");
    assert_eq!(done["last_error"], Value::Null);
    assert!(done["last_attempt_at"].is_string());

    let (status, again) = post_inbox(&app, "src", &webhook).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(again["status"], "already_processed");
    // A second event is forwarded after the duplicate; once it has arrived, a forward of the
    // duplicate would have too.
    let marker = standard_webhook("msg_marker", "invoice.paid");
    assert_eq!(
        post_inbox(&app, "src", &marker).await.0,
        StatusCode::ACCEPTED
    );
    let received = app_side.wait_for(2).await;
    assert_eq!(forwards_of(&received, "msg_2tQ7"), 1, "not forwarded again");
    assert_eq!(forwards_of(&received, "msg_marker"), 1);
    wait_completed(&app, "src", "msg_marker", TOKEN).await;
    assert_eq!(app_side.received().len(), 2);
}

async fn a_failing_forward_target_is_retried_until_it_succeeds(app: TestApp) {
    let (app_side, source) = standard_source(&app, "flaky").await;
    app_side.respond_next(&[500, 503]);
    let webhook = standard_webhook("msg_flaky", "invoice.paid");
    assert_eq!(
        post_inbox(&app, "flaky", &webhook).await.0,
        StatusCode::ACCEPTED
    );

    let attempts = app_side.wait_for(3).await;
    for attempt in &attempts {
        assert_eq!(verify_forward(attempt, &source.forward_secret), "msg_flaky");
        assert_eq!(attempt.body, webhook.body);
    }
    let done = wait_completed(&app, "flaky", "msg_flaky", &source.read_token).await;
    assert_eq!(done["attempts"], 3, "{done}");
    assert_eq!(
        done["last_error"],
        Value::Null,
        "cleared by the success: {done}"
    );
    // A partner's retry meanwhile is still the same, single event.
    let (status, again) = post_inbox(&app, "flaky", &webhook).await;
    assert_eq!(
        (status, again["status"].clone()),
        (StatusCode::OK, json!("already_processed"))
    );
    assert_eq!(app_side.received().len(), 3);
}

async fn a_bad_request_is_refused_and_nothing_is_stored_or_forwarded(app: TestApp) {
    let (app_side, _) = standard_source(&app, "src").await;

    let mut tampered = standard_webhook("msg_tampered", "invoice.paid");
    tampered.body = br#"{"type":"invoice.paid","data":{"amount":1}}"#.to_vec();
    let mut unsigned = standard_webhook("msg_unsigned", "invoice.paid");
    unsigned
        .headers
        .retain(|(name, _)| *name != "webhook-signature");
    let mut stale = standard_webhook("msg_stale", "invoice.paid");
    stale.headers[2].1 = (Utc::now().timestamp() - 3600).to_string();
    let mut huge = standard_webhook("msg_huge", "invoice.paid");
    huge.body = vec![b' '; 1024 * 1024 + 1];
    for (request, status, code) in [
        (&tampered, 401, "signature_mismatch"),
        (&unsigned, 401, "missing_header"),
        (&stale, 401, "timestamp_too_old"),
        (&huge, 413, "payload_too_large"),
    ] {
        let (answer_status, answer) = post_inbox(&app, "src", request).await;
        assert_eq!(answer_status.as_u16(), status, "{}: {answer}", request.id);
        assert_eq!(answer["error"]["code"], code, "{}: {answer}", request.id);
        let (found, _) = poll(&app, "src", &request.id, Some(TOKEN)).await;
        assert_eq!(
            found,
            StatusCode::NOT_FOUND,
            "{} was not stored",
            request.id
        );
    }
    let (status, answer) = post_inbox(&app, "nope", &standard_webhook("msg_x", "a.b")).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{answer}");

    // A kurir-scheme request without its event id header cannot be stored once.
    let secret = "kurir-scheme-secret";
    create_source(&app, "ids", "kurir", secret, &app_side.url).await;
    let body = br#"{"event_type":"order.paid"}"#;
    let mut without_id = Signed {
        id: String::new(),
        headers: Vec::new(),
        body: body.to_vec(),
    };
    let signed = kurir_core::signature_headers(
        "evt_1",
        "order.paid",
        &[&Secret::parse(secret).unwrap()],
        Utc::now(),
        body,
    );
    without_id.headers = signed
        .into_iter()
        .filter(|(name, _)| !name.ends_with("event-id"))
        .collect();
    let (status, answer) = post_inbox(&app, "ids", &without_id).await;
    assert_eq!(
        (status, answer["error"]["code"].clone()),
        (StatusCode::BAD_REQUEST, json!("missing_event_id"))
    );

    let marker = standard_webhook("msg_marker", "invoice.paid");
    assert_eq!(
        post_inbox(&app, "src", &marker).await.0,
        StatusCode::ACCEPTED
    );
    let received = app_side.wait_for(1).await;
    wait_completed(&app, "src", "msg_marker", TOKEN).await;
    assert_eq!(received.len(), 1);
    assert_eq!(
        app_side.received().len(),
        1,
        "only the good request was forwarded"
    );
    let metrics = reqwest::get(format!("{}/metrics", app.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for outcome in ["signature_mismatch", "payload_too_large", "accepted"] {
        let counted = metrics.lines().any(|line| {
            line.starts_with("kurir_inbox_events_total{")
                && line.contains(r#"source="src""#)
                && line.contains(&format!(r#"outcome="{outcome}""#))
                && line.ends_with(" 1")
        });
        assert!(counted, "{outcome} counted once:\n{metrics}");
    }
}

async fn the_status_route_needs_the_admin_token_or_the_sources_read_token(app: TestApp) {
    let (app_side, source) = standard_source(&app, "src").await;
    let other = create_source(&app, "other", "github", "github-secret", &app_side.url).await;
    let webhook = standard_webhook("msg_polled", "invoice.paid");
    assert_eq!(
        post_inbox(&app, "src", &webhook).await.0,
        StatusCode::ACCEPTED
    );

    for token in [None, Some("wrong"), Some(other.read_token.as_str())] {
        let (status, answer) = poll(&app, "src", "msg_polled", token).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{token:?}: {answer}");
        assert_eq!(answer["error"]["code"], "unauthorized");
    }
    let (status, _) = poll(
        &app,
        "no-such-source",
        "msg_polled",
        Some(&source.read_token),
    )
    .await;
    assert_eq!(
        status,
        StatusCode::UNAUTHORIZED,
        "an unknown source looks like a wrong token"
    );

    for token in [source.read_token.as_str(), TOKEN] {
        let (status, answer) = poll(&app, "src", "msg_polled", Some(token)).await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        assert_eq!(answer["event_id"], "msg_polled");
        assert!(answer["attempts"].is_u64(), "{answer}");
    }
    let (status, _) = poll(&app, "src", "msg_unknown", Some(&source.read_token)).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    wait_completed(&app, "src", "msg_polled", &source.read_token).await;
}

/// The issue's gateway test: kurir delivers an event to its own inbox gateway, which forwards it
/// to the application: one arrival, with the event id kurir gave it.
async fn kurir_delivers_to_its_own_inbox_gateway_which_forwards_once_with_the_same_event_id(
    app: TestApp,
) {
    let app_side = Receiver::start().await;
    let endpoint = app
        .create_endpoint(
            &format!("{}/inbox/loop", app.url),
            json!({"event_types": ["order.*"]}),
        )
        .await;
    let endpoint_secret = endpoint["secret"].as_str().unwrap();
    let source = create_source(&app, "loop", "kurir", endpoint_secret, &app_side.url).await;

    let event_id = app
        .publish("order.paid", json!({"order_id": "98765", "total": 250000}))
        .await;
    app.wait_for_deliveries(&event_id, "sent").await;
    let forwarded = app_side.wait_for(1).await;
    let forward = &forwarded[0];
    assert_eq!(verify_forward(forward, &source.forward_secret), event_id);
    assert_eq!(forward.header("x-webhook-event"), "order.paid");
    let envelope = forward.json();
    assert_eq!(envelope["event_id"], event_id.as_str());
    assert_eq!(
        envelope["data"],
        json!({"order_id": "98765", "total": 250000})
    );
    let done = wait_completed(&app, "loop", &event_id, &source.read_token).await;
    assert_eq!(done["event_type"], "order.paid");

    let marker = app
        .publish("order.shipped", json!({"order_id": "98765"}))
        .await;
    let received = app_side.wait_for(2).await;
    assert_eq!(forwards_of(&received, &event_id), 1, "arrived once");
    assert_eq!(forwards_of(&received, &marker), 1);
}

/// The issue's replay: a captured kurir-scheme request sent again within the tolerance under new
/// `X-Webhook-Event-Id` headers. The gateway stores an event once under the id its signature
/// covers (the body's `event_id`), so the replays are refused and the event is forwarded once.
async fn a_replay_under_new_id_headers_is_refused_and_forwarded_once(app: TestApp) {
    let app_side = Receiver::start().await;
    let secret = "kurir-scheme-secret";
    let source = create_source(&app, "replayed", "kurir", secret, &app_side.url).await;
    let body = br#"{"event_id":"evt_original","event_type":"order.paid","data":{"n":1}}"#;
    let headers = kurir_core::signature_headers(
        "evt_original",
        "order.paid",
        &[&Secret::parse(secret).unwrap()],
        Utc::now(),
        body,
    );
    let original = Signed {
        id: "evt_original".into(),
        headers: headers.clone(),
        body: body.to_vec(),
    };
    let (status, answer) = post_inbox(&app, "replayed", &original).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
    for n in 1..=3 {
        let mut replay = Signed {
            id: format!("evt_replay_{n}"),
            headers: headers.clone(),
            body: body.to_vec(),
        };
        for (name, value) in &mut replay.headers {
            if *name == "x-webhook-event-id" {
                *value = format!("evt_replay_{n}");
            }
        }
        let (status, answer) = post_inbox(&app, "replayed", &replay).await;
        assert_eq!(
            (status, answer["error"]["code"].clone()),
            (StatusCode::BAD_REQUEST, json!("event_id_mismatch")),
            "{answer}"
        );
    }
    wait_completed(&app, "replayed", "evt_original", &source.read_token).await;
    let marker = br#"{"event_id":"evt_marker","event_type":"order.paid","data":{}}"#;
    let marker = Signed {
        id: "evt_marker".into(),
        headers: kurir_core::signature_headers(
            "evt_marker",
            "order.paid",
            &[&Secret::parse(secret).unwrap()],
            Utc::now(),
            marker,
        ),
        body: marker.to_vec(),
    };
    assert_eq!(
        post_inbox(&app, "replayed", &marker).await.0,
        StatusCode::ACCEPTED
    );
    let received = app_side.wait_for(2).await;
    wait_completed(&app, "replayed", "evt_marker", &source.read_token).await;
    assert_eq!(forwards_of(&received, "evt_original"), 1, "forwarded once");
    assert_eq!(
        app_side.received().len(),
        2,
        "the replays were not forwarded"
    );
}
/// Issue 11, item 5: a forward URL answering `410 Gone` was retried like any failure. Now the
/// event fails for good, with a `last_error` that says so and no attempt scheduled.
async fn a_forward_answered_410_fails_for_good(app: TestApp) {
    let target = ScriptedReceiver::scripted(|n, _| {
        let status = if n == 0 { 410 } else { 200 };
        StatusCode::from_u16(status).unwrap().into_response()
    })
    .await;
    let source = create_source(
        &app,
        "gone",
        "standard-webhooks",
        PARTNER_SECRET,
        &target.url("/app"),
    )
    .await;
    let webhook = standard_webhook("msg_gone", "invoice.paid");
    assert_eq!(
        post_inbox(&app, "gone", &webhook).await.0,
        StatusCode::ACCEPTED
    );
    let failed = eventually("the event to fail", || async {
        let (_, body) = poll(&app, "gone", "msg_gone", Some(&source.read_token)).await;
        (body["status"] == "failed").then_some(body)
    })
    .await;
    assert_eq!(failed["attempts"], 1, "{failed}");
    assert_eq!(failed["next_attempt_at"], Value::Null, "no retry: {failed}");
    let error = failed["last_error"].as_str().unwrap_or_default();
    assert!(
        error.contains("410 Gone") && error.contains("not forwarded again"),
        "{error}"
    );
}

/// Issue 11, item 5: a forward URL's `Retry-After` was ignored; the next attempt came after the
/// runner's backoff alone. (The longest delay, which caps `Retry-After`, is 5 s here.)
async fn a_forward_answered_429_waits_for_its_retry_after(backend: Backend) {
    let Some(database) = TestDb::unmigrated(backend).await else {
        return;
    };
    let app = TestApp::spawn_with(&database, &[("retry_max_delay", "5s")]).await;
    let target = ScriptedReceiver::scripted(|n, _| {
        if n == 0 {
            (StatusCode::TOO_MANY_REQUESTS, [("retry-after", "1")]).into_response()
        } else {
            StatusCode::OK.into_response()
        }
    })
    .await;
    create_source(
        &app,
        "busy",
        "standard-webhooks",
        PARTNER_SECRET,
        &target.url("/app"),
    )
    .await;
    let webhook = standard_webhook("msg_busy", "invoice.paid");
    assert_eq!(
        post_inbox(&app, "busy", &webhook).await.0,
        StatusCode::ACCEPTED
    );
    wait_completed(&app, "busy", "msg_busy", TOKEN).await;
    let forwards = target.requests();
    assert_eq!(forwards.len(), 2);
    let gap = forwards[1].at - forwards[0].at;
    app.stopper().stop().await;
    drop(database);
    assert!(
        gap >= std::time::Duration::from_secs(1),
        "Retry-After: 1 honoured, waited {gap:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forward_answered_429_waits_for_its_retry_after_on_sqlite() {
    a_forward_answered_429_waits_for_its_retry_after(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forward_answered_429_waits_for_its_retry_after_on_postgres() {
    a_forward_answered_429_waits_for_its_retry_after(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forward_answered_429_waits_for_its_retry_after_on_mysql() {
    a_forward_answered_429_waits_for_its_retry_after(Backend::Mysql).await;
}

/// Issue 33, item 2: after a retry, a source event that had failed its forwards read
/// "completed, 1 attempt": the inbox row's count and error are reset by the retry, and nothing
/// else kept them. Now the event's page (`GET …/events/{id}`) lists every attempt across the
/// retry, with its status and error, and names who retried it and from where.
async fn an_inbox_retry_keeps_every_forward_attempt_and_audits_who_retried(db: TestDb) {
    let app = TestApp::spawn_with(&db, &[("retry_max_attempts", "3")]).await;
    // The application fails three forwards, then is fixed.
    let target = ScriptedReceiver::scripted(|n, _: &Recorded| {
        let status = if n < 3 { 500 } else { 200 };
        (StatusCode::from_u16(status).unwrap(), "boom").into_response()
    })
    .await;
    let source = create_source(
        &app,
        "hist",
        "standard-webhooks",
        PARTNER_SECRET,
        &target.url("/app"),
    )
    .await;
    let webhook = standard_webhook("msg_hist", "invoice.paid");
    assert_eq!(
        post_inbox(&app, "hist", &webhook).await.0,
        StatusCode::ACCEPTED
    );
    eventually("the event to fail its three forwards", || async {
        let (_, body) = poll(&app, "hist", "msg_hist", Some(&source.read_token)).await;
        (body["status"] == "failed" && body["next_attempt_at"].is_null()).then_some(())
    })
    .await;
    let path = "/v1/inbox/sources/hist/events/msg_hist";
    let (status, retried) = app.post(&format!("{path}/retry"), json!({})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{retried}");
    wait_completed(&app, "hist", "msg_hist", &source.read_token).await;

    let (status, event) = app.get(path).await;
    assert_eq!(status, StatusCode::OK, "{event}");
    assert_eq!(event["status"], "completed", "{event}");
    let history = event["history"].as_array().expect("history");
    let seen: Vec<(u64, u64)> = history
        .iter()
        .map(|a| {
            (
                a["attempt"].as_u64().unwrap(),
                a["status_code"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(seen, [(1, 500), (2, 500), (3, 500), (1, 200)], "{event}");
    for failed in &history[..3] {
        let error = failed["error"].as_str().unwrap_or_default();
        assert!(
            error.contains("HTTP 500") && error.contains("boom"),
            "{failed}"
        );
    }
    assert_eq!(history[3]["error"], Value::Null, "{event}");
    let retries = event["retries"].as_array().expect("retries");
    assert_eq!(retries.len(), 1, "{event}");
    assert_eq!(retries[0]["actor"], "admin", "{event}");
    assert_eq!(retries[0]["via"], "api", "{event}");
    let (status, missing) = app.get("/v1/inbox/sources/hist/events/nope").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{missing}");
    app.stopper().stop().await;
}
