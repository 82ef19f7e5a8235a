//! Deliveries that already exist when their endpoint stops (issue 29, item 1): a subscriber
//! disabled or deleted, an endpoint disabled, while deliveries to it wait in a dispatcher's lane
//! (claimed, in memory, behind a request the receiver holds). Nothing more reaches the stopped
//! endpoint: what waited goes back to the database uncharged (`pending`, its attempt count as it
//! was) and waits there (or ends `cancelled`, for a deletion), while the operator's and other
//! subscribers' endpoints keep flowing; enabled again, each waiting delivery goes out exactly
//! once. On every database, and across two processes sharing PostgreSQL or MySQL: the change made
//! on one process's API, the other process's lanes stop.

use std::collections::HashMap;

use kurir::endpoint::NewEndpoint;
use kurir::outbox::NewEvent;
use kurir::store::Store;
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::api::support::TestApp;
use crate::support::process::{kurir_serve, Kurir};
use crate::support::receiver::Receiver;
use crate::support::{enqueue_all, eventually, scalar, TestDb};
use crate::{on_both_backends, on_shared_servers};

on_both_backends!(
    a_disabled_subscribers_waiting_deliveries_go_back_uncharged_and_go_out_once_enabled,
    a_disabled_endpoints_waiting_deliveries_go_back_uncharged_and_go_out_once_enabled,
    a_deleted_subscribers_waiting_deliveries_end_cancelled_and_are_never_sent,
);

on_shared_servers!(a_subscriber_disabled_on_one_process_stops_the_lanes_of_another);

/// The held endpoint answers within its longest timeout (60 s, not the tests' 2 s), so that the
/// held request never times out under load and lets the lane send the next one.
///
/// How many deliveries each test queues behind the held one: the lane's prefetch
/// (`WAITING_ROUNDS` rounds of `max_in_flight` 1) holds this many waiting.
const WAITING: i64 = 3;

/// How a test stops the endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    DisableSubscriber,
    DisableEndpoint,
    DeleteSubscriber,
}

/// The number of `endpoint`'s deliveries in `status` whose attempt count is `attempts` (any
/// attempt count: `None`).
async fn deliveries(s: &Store, endpoint: &str, status: &str, attempts: Option<i64>) -> i64 {
    let attempts = attempts.map_or(String::new(), |n| format!(" AND attempt_count = {n}"));
    scalar(
        s,
        &format!(
            "SELECT COUNT(*) FROM kurir_deliveries WHERE endpoint_id = '{endpoint}' \
             AND status = '{status}'{attempts}"
        ),
    )
    .await
}

/// The attempts recorded to `endpoint`.
async fn attempts(s: &Store, endpoint: &str) -> i64 {
    scalar(
        s,
        &format!(
            "SELECT COUNT(*) FROM kurir_attempts a JOIN kurir_deliveries d \
             ON d.id = a.delivery_id WHERE d.endpoint_id = '{endpoint}'"
        ),
    )
    .await
}

/// How long the last attempt to `endpoint` took, in milliseconds.
async fn last_duration_ms(s: &Store, endpoint: &str) -> i64 {
    scalar(
        s,
        &format!(
            "SELECT a.duration_ms FROM kurir_attempts a JOIN kurir_deliveries d \
             ON d.id = a.delivery_id WHERE d.endpoint_id = '{endpoint}' ORDER BY a.id DESC LIMIT 1"
        ),
    )
    .await
}

/// How many requests carried each event id.
fn per_event(held: &Receiver) -> HashMap<String, usize> {
    let mut seen = HashMap::new();
    for r in held.requests() {
        *seen.entry(r.event_id()).or_default() += 1;
    }
    seen
}

/// Fills `endpoint`'s lane in whichever process dispatches for it: answers quickly until its
/// last attempt took less than the dispatcher's "quick answer" (so the lane prefetches), then
/// has `publish` make one delivery that the receiver holds and [`WAITING`] more that wait in the
/// lane, claimed. Returns the held ones' event ids.
async fn fill_lane<F, Fut>(s: &Store, held: &Receiver, endpoint: &str, publish: F) -> Vec<String>
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = Vec<String>>,
{
    let mut warmed = 0;
    eventually("a quick answer from the held endpoint", || {
        warmed += 1;
        let n = warmed;
        let publish = &publish;
        async move {
            held.release(1);
            publish(1).await;
            held.wait_for(n).await;
            eventually("the warm-up to be recorded", || async {
                (deliveries(s, endpoint, "sent", None).await == n as i64).then_some(())
            })
            .await;
            (last_duration_ms(s, endpoint).await < 250).then_some(())
        }
    })
    .await;
    let before = held.requests().len();
    let ids = publish(1 + WAITING as usize).await;
    held.wait_until("the first of them held open", |r, open| {
        r.len() == before + 1 && open == 1
    })
    .await;
    eventually("the others to wait in the lane, claimed", || async {
        (deliveries(s, endpoint, "processing", None).await == 1 + WAITING).then_some(())
    })
    .await;
    ids
}

/// Waits until what waited in the lane is back in the database, uncharged, with only the held
/// delivery still being made.
async fn wait_handed_back(s: &Store, endpoint: &str, what: &str) {
    eventually(what, || async {
        let pending = deliveries(s, endpoint, "pending", Some(0)).await;
        let processing = deliveries(s, endpoint, "processing", None).await;
        (pending == WAITING && processing == 1).then_some(())
    })
    .await;
}

/// Subscriber A's audit, newest first: `action actor via` each, every one with its time.
async fn audit(app: &TestApp) -> Vec<String> {
    let (status, body) = app.get("/v1/subscribers/cus_a/actions").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let rows = body["data"].as_array().unwrap();
    rows.iter()
        .map(|a| {
            assert!(a["created_at"].is_string(), "{a}");
            format!(
                "{} {} {}",
                a["action"].as_str().unwrap(),
                a["actor"],
                a["via"]
            )
            .replace('"', "")
        })
        .collect()
}

async fn create_subscriber(app: &TestApp, id: &str) {
    let (status, body) = app
        .post("/v1/subscribers", json!({"id": id, "name": id}))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
}

/// Publishes `n` events addressed to `subscriber` (none: the operator's) through the API.
async fn publish(app: &TestApp, subscriber: Option<&str>, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..n {
        let mut body = json!({"event_type": "order.paid", "data": {"n": i}});
        if let Some(s) = subscriber {
            body["subscriber_id"] = json!(s);
        }
        let (status, body) = app.post("/v1/events", body).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        ids.push(body["event_id"].as_str().unwrap().to_owned());
    }
    ids
}

/// Events to subscriber B and to the operator still reach them while A's endpoint is stopped:
/// the lanes of everyone else flow, and the dispatcher has stepped meanwhile.
async fn others_flow(app: &TestApp, others: &Receiver) {
    let before = others.requests().len();
    publish(app, Some("cus_b"), 2).await;
    publish(app, None, 2).await;
    others.wait_for(before + 4).await;
}

async fn a_disabled_subscribers_waiting_deliveries_go_back_uncharged_and_go_out_once_enabled(
    app: TestApp,
) {
    stop_and_resume(app, Stop::DisableSubscriber).await;
}

async fn a_disabled_endpoints_waiting_deliveries_go_back_uncharged_and_go_out_once_enabled(
    app: TestApp,
) {
    stop_and_resume(app, Stop::DisableEndpoint).await;
}

async fn a_deleted_subscribers_waiting_deliveries_end_cancelled_and_are_never_sent(app: TestApp) {
    stop_and_resume(app, Stop::DeleteSubscriber).await;
}

/// The story of the three tests above, told once: fill subscriber A's endpoint's lane, `stop`
/// it, check nothing more reaches it while everyone else's deliveries flow, then resume it
/// (enable again) and check each waiting delivery went out once, or (deleted) that they all
/// ended cancelled and none was sent.
async fn stop_and_resume(app: TestApp, stop: Stop) {
    let held = Receiver::holding().await;
    let others = Receiver::ok().await;
    create_subscriber(&app, "cus_a").await;
    create_subscriber(&app, "cus_b").await;
    let ea = app
        .create_endpoint(
            &held.url("/a"),
            json!({"subscriber_id": "cus_a", "max_in_flight": 1, "request_timeout_ms": 60000}),
        )
        .await;
    let ea = ea["id"].as_str().unwrap().to_owned();
    app.create_endpoint(&others.url("/b"), json!({"subscriber_id": "cus_b"}))
        .await;
    app.create_endpoint(&others.url("/operator"), json!({}))
        .await;
    let s = &app.store;
    let ids = fill_lane(s, &held, &ea, |n| publish(&app, Some("cus_a"), n)).await;
    let sent_before = held.requests().len();

    let (status, body) = match stop {
        Stop::DisableSubscriber => {
            app.patch("/v1/subscribers/cus_a", json!({"enabled": false}))
                .await
        }
        Stop::DisableEndpoint => {
            app.patch(&format!("/v1/endpoints/{ea}"), json!({"enabled": false}))
                .await
        }
        Stop::DeleteSubscriber => app.delete("/v1/subscribers/cus_a").await,
    };
    assert!(status.is_success(), "{stop:?}: {status} {body}");
    if stop == Stop::DeleteSubscriber {
        // Everything undelivered ends cancelled at once, the held delivery too (its request is
        // on the wire; its outcome cannot move it back).
        let cancelled = deliveries(s, &ea, "cancelled", None).await;
        assert_eq!(
            cancelled,
            1 + WAITING,
            "every undelivered delivery cancelled"
        );
        let (status, _) = app.get(&format!("/v1/endpoints/{ea}")).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "its endpoint is a tombstone");
    } else {
        wait_handed_back(s, &ea, "the waiting deliveries to go back, uncharged").await;
    }
    // The held request ends; the lane must not send what waited behind it.
    held.release(1000);
    eventually("the held attempt to be recorded", || async {
        (attempts(s, &ea).await as usize == sent_before).then_some(())
    })
    .await;
    others_flow(&app, &others).await;
    if stop != Stop::DeleteSubscriber {
        eventually("the held delivery to be recorded", || async {
            let sent = deliveries(s, &ea, "sent", None).await;
            (sent as usize == sent_before).then_some(())
        })
        .await;
        // Still waiting, uncharged, after the dispatcher stepped many times.
        others_flow(&app, &others).await;
        assert_eq!(
            deliveries(s, &ea, "pending", Some(0)).await,
            WAITING,
            "{stop:?}: the waiting deliveries wait, uncharged"
        );
    }
    assert_eq!(
        held.requests().len(),
        sent_before,
        "{stop:?}: nothing more reached the stopped endpoint"
    );

    let (status, body) = match stop {
        Stop::DisableSubscriber => {
            app.patch("/v1/subscribers/cus_a", json!({"enabled": true}))
                .await
        }
        Stop::DisableEndpoint => {
            app.patch(&format!("/v1/endpoints/{ea}"), json!({"enabled": true}))
                .await
        }
        Stop::DeleteSubscriber => {
            let cancelled = deliveries(s, &ea, "cancelled", None).await;
            assert_eq!(cancelled, 1 + WAITING, "they stay cancelled");
            assert_eq!(
                audit(&app).await,
                ["delete admin api"],
                "the deletion audited"
            );
            return;
        }
    };
    assert!(status.is_success(), "{stop:?}: {status} {body}");
    let audited = audit(&app).await;
    match stop {
        Stop::DisableSubscriber => assert_eq!(audited, ["enable admin api", "disable admin api"]),
        _ => assert!(
            audited.is_empty(),
            "an endpoint's change is not the subscriber's"
        ),
    }
    eventually("every waiting delivery to go out", || async {
        let sent = deliveries(s, &ea, "sent", None).await as usize;
        (sent == sent_before + WAITING as usize).then_some(())
    })
    .await;
    let seen = per_event(&held);
    for id in &ids {
        assert_eq!(seen.get(id), Some(&1), "{stop:?}: event {id} sent once");
    }
}

/// Two processes share the database: the real binary dispatches and holds A's deliveries in its
/// lane; the subscriber is disabled through another process's API (a `kurir serve` in this
/// test). The binary's lane stops: what waited goes back uncharged, nothing more is sent, and
/// once A is enabled again (on the same other process) each goes out exactly once.
async fn a_subscriber_disabled_on_one_process_stops_the_lanes_of_another(db: TestDb) {
    let s = &db.store;
    let held = Receiver::holding().await;
    let meta = json!({});
    s.create_subscriber("cus_a", "A", &meta).await.unwrap();
    let mut new = NewEndpoint::new(held.url("/a"));
    new.subscriber_id = Some("cus_a".into());
    new.max_in_flight = Some(1);
    new.overrides.request_timeout_ms = Some(60_000);
    let ea = s.create_endpoint(new).await.unwrap().id.to_string();
    // The data dir (its encryption key) is the one the other process opens too.
    let mut binary = Kurir::spawn(kurir_serve(&db.url, db.dir.path()));
    let order = |i: usize| {
        NewEvent::json("order.paid", &json!({"n": i}))
            .unwrap()
            .subscriber("cus_a")
    };
    let ids = fill_lane(s, &held, &ea, |n| async move {
        enqueue_all(s, (0..n).map(order).collect()).await
    })
    .await;
    // Every delivery of the lane is the binary's: the other process starts only now, and finds
    // nothing of A's due.
    let owner = scalar(
        s,
        &format!(
            "SELECT COUNT(*) FROM kurir_deliveries WHERE endpoint_id = '{ea}' \
             AND status = 'processing' AND lease_owner LIKE 'kurir-{}-%'",
            binary.pid()
        ),
    )
    .await;
    assert_eq!(owner, 1 + WAITING, "the binary holds the lane");
    let sent_before = held.requests().len();
    let other = TestApp::spawn(&db).await;
    let (status, body): (StatusCode, Value) = other
        .patch("/v1/subscribers/cus_a", json!({"enabled": false}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    wait_handed_back(
        s,
        &ea,
        "the binary's lane to give back what waited, uncharged",
    )
    .await;
    held.release(1000);
    eventually("the held delivery to be recorded", || async {
        let sent = deliveries(s, &ea, "sent", None).await;
        (sent as usize == sent_before).then_some(())
    })
    .await;
    assert_eq!(deliveries(s, &ea, "pending", Some(0)).await, WAITING);
    assert_eq!(held.requests().len(), sent_before, "nothing more was sent");

    let (status, body) = other
        .patch("/v1/subscribers/cus_a", json!({"enabled": true}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    eventually("every waiting delivery to go out", || async {
        let sent = deliveries(s, &ea, "sent", None).await as usize;
        (sent == sent_before + WAITING as usize).then_some(())
    })
    .await;
    let seen = per_event(&held);
    for id in &ids {
        assert_eq!(seen.get(id), Some(&1), "event {id} sent once");
    }
    other.stopper().stop().await;
    binary.terminate().await;
}
