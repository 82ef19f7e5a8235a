//! The delivery engine end to end: a kurir server in this process, a real receiver on loopback,
//! events enqueued in transactions.

use std::time::Duration;

use axum::http::StatusCode;
use axum::response::IntoResponse;
use kurir::delivery::DeliveryStatus;
use kurir::endpoint::{Endpoint, EventFilter, NewEndpoint};
use kurir::store::Store;
use kurir_core::secret::Secret;
use kurir_core::verify::{Scheme, Verifier};

use crate::on_both_backends;
use crate::support::receiver::Receiver;
use crate::support::{enqueue_events, eventually, test_delivery_config, TestDb, TestServer};

on_both_backends!(
    events_arrive_signed_with_every_header_and_field_of_the_contract,
    a_receiver_failing_n_times_then_succeeding_gets_n_plus_one_attempts,
    a_receiver_that_always_fails_dead_letters_after_max_attempts,
    gone_dead_letters_and_disables_the_endpoint,
    retry_after_is_honoured,
    retry_after_zero_or_in_the_past_does_not_shorten_the_backoff,
    fan_out_delivers_exactly_the_subscribed_events,
    a_slow_endpoint_does_not_hold_up_a_fast_one,
    ssrf_guard_refuses_loopback_unless_allowed,
    graceful_shutdown_lets_requests_in_flight_finish,
    endpoint_overrides_apply_and_timeouts_and_refused_connections_are_recorded,
);

const SECRET: &str = "whsec_MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";

async fn add_endpoint(store: &Store, url: String, filter: &[&str]) -> Endpoint {
    let mut e = NewEndpoint::new(url);
    e.secret = Some(Secret::parse(SECRET).unwrap());
    e.event_types = EventFilter::parse(filter.iter().map(|s| s.to_string()).collect()).unwrap();
    store.create_endpoint(e).await.unwrap()
}

/// Waits until every delivery of `event_id` has reached `status`.
async fn wait_status(store: &Store, event_id: &str, status: DeliveryStatus) {
    eventually(
        &format!("deliveries of {event_id} to be {status}"),
        || async {
            let ds = store.deliveries_for_event(event_id).await.unwrap();
            (!ds.is_empty() && ds.iter().all(|d| d.status == status)).then_some(())
        },
    )
    .await
}

async fn events_arrive_signed_with_every_header_and_field_of_the_contract(db: TestDb) {
    let rx = Receiver::ok().await;
    add_endpoint(&db.store, rx.url("/hooks"), &[]).await;
    let ids = enqueue_events(&db.store, "order.paid", 1).await;
    let server = TestServer::start(&db, test_delivery_config()).await;
    rx.wait_for(1).await;
    wait_status(&db.store, &ids[0], DeliveryStatus::Sent).await;
    server.stop().await;

    let req = &rx.requests()[0];
    assert_eq!(req.header("content-type"), "application/json");
    assert_eq!(
        req.header("content-length"),
        req.body.len().to_string(),
        "a plain body with its length, never chunked"
    );
    assert!(req.header("user-agent").starts_with("kurir/"));
    assert_eq!(req.header("x-webhook-event"), "order.paid");
    assert_eq!(req.header("x-webhook-event-id"), ids[0]);
    assert_eq!(req.header("webhook-id"), ids[0]);
    let ts =
        chrono::DateTime::parse_from_rfc3339(req.header("x-webhook-timestamp")).expect("RFC 3339");
    assert!(req.header("x-webhook-timestamp").ends_with('Z'));
    assert_eq!(
        req.header("webhook-timestamp"),
        ts.timestamp().to_string(),
        "same instant"
    );

    let body = req.json();
    assert_eq!(body["event_id"], ids[0].as_str());
    assert_eq!(body["event_type"], "order.paid");
    assert_eq!(body["version"], 1);
    assert_eq!(body["delivery_attempt"], 1);
    assert!(chrono::DateTime::parse_from_rfc3339(body["occurred_at"].as_str().unwrap()).is_ok());
    let raw = std::str::from_utf8(&req.body).unwrap();
    assert!(
        raw.ends_with(r#","data":{"n":0,"note":"hello"}}"#),
        "payload embedded byte-for-byte: {raw}"
    );

    let now = chrono::Utc::now();
    let secret = Secret::parse(SECRET).unwrap();
    for scheme in [Scheme::Kurir, Scheme::StandardWebhooks] {
        Verifier::new(scheme, vec![secret.clone()])
            .verify(&req.headers, &req.body, now)
            .unwrap_or_else(|e| panic!("{scheme} signature must verify: {e}"));
    }
    standardwebhooks::Webhook::new(SECRET)
        .unwrap()
        .verify(&req.body, &req.headers)
        .expect("the standardwebhooks crate verifies our signature");
}

async fn a_receiver_failing_n_times_then_succeeding_gets_n_plus_one_attempts(db: TestDb) {
    let rx = Receiver::scripted(|n, _| {
        if n < 3 {
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        } else {
            StatusCode::OK.into_response()
        }
    })
    .await;
    add_endpoint(&db.store, rx.url("/flaky"), &[]).await;
    let ids = enqueue_events(&db.store, "order.paid", 1).await;
    let config = test_delivery_config();
    let policy = config.retry;
    let server = TestServer::start(&db, config).await;
    wait_status(&db.store, &ids[0], DeliveryStatus::Sent).await;
    server.stop().await;

    let reqs = rx.requests();
    assert_eq!(reqs.len(), 4);
    for (i, r) in reqs.iter().enumerate() {
        assert_eq!(r.event_id(), ids[0], "the same event_id on every attempt");
        assert_eq!(r.header("webhook-id"), ids[0]);
        assert_eq!(r.json()["delivery_attempt"], i as u64 + 1);
    }
    for (attempt, pair) in (1u32..).zip(reqs.windows(2)) {
        let gap = pair[1].at - pair[0].at;
        assert!(
            gap >= policy.backoff(attempt),
            "attempt {attempt} waited {gap:?}, less than the policy"
        );
    }
    let d = &db.store.deliveries_for_event(&ids[0]).await.unwrap()[0];
    assert_eq!(d.attempt_count, 4);
    let attempts = db.store.attempts_for_delivery(d.id).await.unwrap();
    let codes: Vec<Option<u16>> = attempts.iter().map(|a| a.status_code).collect();
    assert_eq!(codes, [Some(500), Some(500), Some(500), Some(200)]);
    // An answer other than 2xx is its attempt's error, named by its status.
    let named: Vec<bool> = attempts
        .iter()
        .map(|a| {
            a.error
                .as_deref()
                .is_some_and(|e| e.starts_with("HTTP 500"))
        })
        .collect();
    assert_eq!(named, [true, true, true, false], "{attempts:?}");
    assert!(attempts[3].error.is_none());
    assert!(attempts.iter().all(|a| a.duration_ms >= 0));
}

async fn a_receiver_that_always_fails_dead_letters_after_max_attempts(db: TestDb) {
    let rx =
        Receiver::scripted(|_, _| (StatusCode::BAD_GATEWAY, "upstream down").into_response()).await;
    add_endpoint(&db.store, rx.url("/down"), &[]).await;
    let ids = enqueue_events(&db.store, "order.paid", 1).await;
    let mut config = test_delivery_config();
    config.retry.max_attempts = 3;
    let server = TestServer::start(&db, config).await;
    wait_status(&db.store, &ids[0], DeliveryStatus::DeadLetter).await;
    server.stop().await;
    assert_eq!(rx.requests().len(), 3);
    let d = &db.store.deliveries_for_event(&ids[0]).await.unwrap()[0];
    assert_eq!((d.attempt_count, d.last_status_code), (3, Some(502)));
    let attempts = db.store.attempts_for_delivery(d.id).await.unwrap();
    assert_eq!(attempts.len(), 3);
    assert_eq!(attempts[2].response_body.as_deref(), Some("upstream down"));
}

async fn gone_dead_letters_and_disables_the_endpoint(db: TestDb) {
    let rx = Receiver::scripted(|_, _| StatusCode::GONE.into_response()).await;
    let endpoint = add_endpoint(&db.store, rx.url("/gone"), &[]).await;
    let ids = enqueue_events(&db.store, "order.paid", 1).await;
    let server = TestServer::start(&db, test_delivery_config()).await;
    wait_status(&db.store, &ids[0], DeliveryStatus::DeadLetter).await;
    server.stop().await;
    assert_eq!(rx.requests().len(), 1, "no retry after 410");
    let endpoint = db.store.get_endpoint(&endpoint.id).await.unwrap().unwrap();
    assert!(!endpoint.enabled);
    assert!(endpoint.disabled_reason.unwrap().contains("410"));
}

async fn retry_after_is_honoured(db: TestDb) {
    let rx = Receiver::scripted(|n, _| {
        if n == 0 {
            (StatusCode::TOO_MANY_REQUESTS, [("retry-after", "1")]).into_response()
        } else {
            StatusCode::OK.into_response()
        }
    })
    .await;
    add_endpoint(&db.store, rx.url("/busy"), &[]).await;
    let ids = enqueue_events(&db.store, "order.paid", 1).await;
    let mut config = test_delivery_config();
    config.retry.max_delay = Duration::from_secs(5);
    let server = TestServer::start(&db, config).await;
    wait_status(&db.store, &ids[0], DeliveryStatus::Sent).await;
    server.stop().await;
    let reqs = rx.requests();
    assert_eq!(reqs.len(), 2);
    let gap = reqs[1].at - reqs[0].at;
    assert!(
        gap >= Duration::from_secs(1),
        "Retry-After: 1 honoured, waited {gap:?}"
    );
}

/// Issue 11, item 5: `Retry-After: 0`, or a date already past, replaced the backoff, so a
/// receiver answering that way took every attempt in well under a second.
async fn retry_after_zero_or_in_the_past_does_not_shorten_the_backoff(db: TestDb) {
    let rx = Receiver::scripted(|n, _| {
        if n % 2 == 0 {
            (StatusCode::TOO_MANY_REQUESTS, [("retry-after", "0")]).into_response()
        } else {
            let past = "Wed, 21 Oct 2015 07:28:00 GMT";
            (StatusCode::SERVICE_UNAVAILABLE, [("retry-after", past)]).into_response()
        }
    })
    .await;
    add_endpoint(&db.store, rx.url("/busy"), &[]).await;
    let ids = enqueue_events(&db.store, "order.paid", 1).await;
    let mut config = test_delivery_config();
    config.retry.initial_delay = Duration::from_millis(300);
    config.retry.max_delay = Duration::from_secs(5);
    config.retry.max_attempts = 3;
    let policy = config.retry;
    let server = TestServer::start(&db, config).await;
    wait_status(&db.store, &ids[0], DeliveryStatus::DeadLetter).await;
    server.stop().await;
    let reqs = rx.requests();
    assert_eq!(reqs.len(), 3);
    for (attempt, pair) in (1u32..).zip(reqs.windows(2)) {
        let gap = pair[1].at - pair[0].at;
        assert!(
            gap >= policy.backoff(attempt),
            "attempt {attempt} was followed after {gap:?}, less than the backoff"
        );
    }
}

async fn fan_out_delivers_exactly_the_subscribed_events(db: TestDb) {
    let rx = Receiver::ok().await;
    add_endpoint(&db.store, rx.url("/orders"), &["order.*"]).await;
    add_endpoint(&db.store, rx.url("/payments"), &["payment.succeeded"]).await;
    add_endpoint(&db.store, rx.url("/all"), &[]).await;
    let mut ids = enqueue_events(&db.store, "order.paid", 2).await;
    ids.extend(enqueue_events(&db.store, "payment.succeeded", 1).await);
    ids.extend(enqueue_events(&db.store, "user.created", 1).await);
    let server = TestServer::start(&db, test_delivery_config()).await;
    for id in &ids {
        wait_status(&db.store, id, DeliveryStatus::Sent).await;
    }
    server.stop().await;
    let types = |path: &str| -> Vec<String> {
        let mut t: Vec<String> = rx
            .requests_to(path)
            .iter()
            .map(|r| r.json()["event_type"].as_str().unwrap().to_owned())
            .collect();
        t.sort();
        t
    };
    assert_eq!(types("/orders"), ["order.paid", "order.paid"]);
    assert_eq!(types("/payments"), ["payment.succeeded"]);
    assert_eq!(
        types("/all"),
        [
            "order.paid",
            "order.paid",
            "payment.succeeded",
            "user.created"
        ]
    );
}

async fn a_slow_endpoint_does_not_hold_up_a_fast_one(db: TestDb) {
    let slow = Receiver::holding().await;
    let fast = Receiver::ok().await;
    let mut new = NewEndpoint::new(slow.url("/slow"));
    new.max_in_flight = Some(2);
    db.store.create_endpoint(new).await.unwrap();
    add_endpoint(&db.store, fast.url("/fast"), &[]).await;
    let ids = enqueue_events(&db.store, "order.paid", 20).await;
    let mut config = test_delivery_config();
    config.max_concurrency = 4;
    let server = TestServer::start(&db, config).await;

    // Every fast delivery completes while the slow endpoint holds its requests open.
    fast.wait_for(20).await;
    assert_eq!(
        slow.max_open(),
        2,
        "the slow endpoint never gets more than its max_in_flight"
    );
    assert_eq!(slow.requests().len(), 2);

    slow.release(1000);
    for id in &ids {
        wait_status(&db.store, id, DeliveryStatus::Sent).await;
    }
    server.stop().await;
    assert_eq!(slow.max_open(), 2);
    assert_eq!(slow.requests().len(), 20);
}

async fn ssrf_guard_refuses_loopback_unless_allowed(db: TestDb) {
    let rx = Receiver::ok().await;
    add_endpoint(&db.store, rx.url("/literal"), &[]).await;
    add_endpoint(
        &db.store,
        format!("http://localhost:{}/named", rx.addr.port()),
        &[],
    )
    .await;
    let refused = enqueue_events(&db.store, "order.paid", 1).await;
    let mut config = test_delivery_config();
    config.allowed_networks.clear();
    config.retry.max_attempts = 1;
    let server = TestServer::start(&db, config).await;
    wait_status(&db.store, &refused[0], DeliveryStatus::DeadLetter).await;
    server.stop().await;
    assert!(
        rx.requests().is_empty(),
        "nothing reached the loopback receiver"
    );
    for d in db.store.deliveries_for_event(&refused[0]).await.unwrap() {
        let error = d.last_error.unwrap_or_default();
        assert!(
            error.contains("SSRF") && error.contains("loopback"),
            "clear error: {error}"
        );
        assert!(
            error.contains("KURIR_ALLOWED_NETWORKS"),
            "says how to allow it: {error}"
        );
    }

    let allowed = enqueue_events(&db.store, "order.paid", 1).await;
    let server = TestServer::start(&db, test_delivery_config()).await;
    wait_status(&db.store, &allowed[0], DeliveryStatus::Sent).await;
    server.stop().await;
    assert_eq!(rx.requests_to("/literal").len(), 1);
    assert_eq!(rx.requests_to("/named").len(), 1);
}

async fn graceful_shutdown_lets_requests_in_flight_finish(db: TestDb) {
    let rx = Receiver::holding().await;
    add_endpoint(&db.store, rx.url("/held"), &[]).await;
    let ids = enqueue_events(&db.store, "order.paid", 3).await;
    let server = TestServer::start(&db, test_delivery_config()).await;
    rx.wait_until("3 requests held open", |_, open| open == 3)
        .await;
    let stopping = tokio::spawn(server.stop());
    rx.release(3);
    stopping.await.unwrap();
    for id in &ids {
        let d = &db.store.deliveries_for_event(id).await.unwrap()[0];
        assert_eq!(
            d.status,
            DeliveryStatus::Sent,
            "finished and recorded before exit"
        );
    }
}

async fn endpoint_overrides_apply_and_timeouts_and_refused_connections_are_recorded(db: TestDb) {
    // A receiver that never answers, behind an endpoint with a 200 ms response timeout and two
    // attempts; and a port nobody listens on.
    let silent = Receiver::holding().await;
    let mut new = NewEndpoint::new(silent.url("/silent"));
    new.overrides.request_timeout_ms = Some(200);
    new.overrides.retry_max_attempts = Some(2);
    db.store.create_endpoint(new).await.unwrap();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed_url = format!("http://{}/nobody", closed.local_addr().unwrap());
    drop(closed);
    let mut new = NewEndpoint::new(closed_url);
    new.overrides.retry_max_attempts = Some(3);
    let refused = db.store.create_endpoint(new).await.unwrap();
    let ids = enqueue_events(&db.store, "order.paid", 1).await;

    let server = TestServer::start(&db, test_delivery_config()).await;
    wait_status(&db.store, &ids[0], DeliveryStatus::DeadLetter).await;
    server.stop().await;
    silent.release(1000);

    for d in db.store.deliveries_for_event(&ids[0]).await.unwrap() {
        let attempts = db.store.attempts_for_delivery(d.id).await.unwrap();
        let errors: Vec<String> = attempts
            .iter()
            .map(|a| a.error.clone().unwrap_or_default())
            .collect();
        assert!(
            attempts.iter().all(|a| a.status_code.is_none()),
            "no response on any attempt"
        );
        if d.endpoint_id == refused.id.as_str() {
            assert_eq!(
                attempts.len(),
                3,
                "the endpoint's own max attempts: {errors:?}"
            );
            assert!(
                errors.iter().all(|e| e.starts_with("connect error")),
                "{errors:?}"
            );
        } else {
            assert_eq!(
                attempts.len(),
                2,
                "the endpoint's own max attempts: {errors:?}"
            );
            assert!(
                errors.iter().all(|e| e.starts_with("timeout")),
                "{errors:?}"
            );
            assert!(
                attempts.iter().all(|a| a.duration_ms < 5_000),
                "the 200 ms override applied, not the 5 s default"
            );
        }
    }
}
