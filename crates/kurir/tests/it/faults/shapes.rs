//! Hostile response shapes, one endpoint each, beside a healthy endpoint: the healthy one gets
//! every event exactly once and each is recorded as sent, every hostile delivery has its attempt
//! recorded, kurir's memory stays bounded, and SIGTERM ends the process.

use kurir::endpoint::NewEndpoint;
use kurir::store::Store;

use super::assert_all_arrived;
use crate::on_both_backends;
use crate::support::hostile::{Hostile, Shape};
use crate::support::process::{kurir_serve, Kurir};
use crate::support::receiver::Receiver;
use crate::support::{enqueue_events, eventually, TestDb};

/// Events in each test: more than one endpoint's `max_in_flight` (16), so hostile answers are
/// read side by side.
const EVENTS: usize = 20;

/// A generous bound on kurir's peak resident memory: an idle debug build holds about 20 MB,
/// and one hostile answer held whole would be 8 to 50 MB, times the 16 read at once.
const MOST_RSS: u64 = 150 << 20;

const MIB: usize = 1 << 20;

on_both_backends!(
    a_50_mib_body_is_read_no_further_than_kept,
    an_invalid_utf8_body_is_recorded,
);

async fn a_50_mib_body_is_read_no_further_than_kept(db: TestDb) {
    beside_a_healthy_endpoint(db, Shape::LongBody(50 * MIB)).await;
}

/// A body PostgreSQL's `text` refuses (issue 11, item 1).
fn nul_body() -> Shape {
    Shape::Body(500, b"\x00\x00bad".to_vec())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nul_body_is_recorded_on_sqlite() {
    beside_a_healthy_endpoint(TestDb::sqlite().await, nul_body()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nul_body_is_recorded_on_postgres() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    beside_a_healthy_endpoint(db, nul_body()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nul_body_is_recorded_on_mysql() {
    let Some(db) = TestDb::mysql().await else {
        return;
    };
    beside_a_healthy_endpoint(db, nul_body()).await;
}

async fn an_invalid_utf8_body_is_recorded(db: TestDb) {
    beside_a_healthy_endpoint(db, Shape::Body(500, b"\xff\xfe\xc3(bad \xe2\x82".to_vec())).await;
}

/// The shapes below exercise the HTTP client, whatever the database: PostgreSQL only.
async fn postgres() -> Option<TestDb> {
    TestDb::postgres().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_chunked_body_is_read_no_further_than_kept() {
    let Some(db) = postgres().await else { return };
    beside_a_healthy_endpoint(db, Shape::EndlessChunked).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_8_mib_header_fails_the_attempt() {
    let Some(db) = postgres().await else { return };
    beside_a_healthy_endpoint(db, Shape::LongHeader(8 * MIB)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_thousand_headers_fail_the_attempt() {
    let Some(db) = postgres().await else { return };
    beside_a_healthy_endpoint(db, Shape::ManyHeaders(20_000)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_1xx_answers_fails_the_attempt() {
    let Some(db) = postgres().await else { return };
    beside_a_healthy_endpoint(db, Shape::InterimFlood).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_is_not_followed() {
    let Some(db) = postgres().await else { return };
    let target = Receiver::ok().await;
    beside_a_healthy_endpoint(db, Shape::Redirect(target.url("/redirected"))).await;
    assert!(target.requests().is_empty(), "the redirect was followed");
}

/// The shared body: `shape` at one endpoint, a healthy receiver at another, [`EVENTS`] events.
async fn beside_a_healthy_endpoint(db: TestDb, shape: Shape) {
    let healthy = Receiver::ok().await;
    let hostile = Hostile::start(shape.clone()).await;
    db.store
        .create_endpoint(NewEndpoint::new(healthy.url("/healthy")))
        .await
        .unwrap();
    let bad = db
        .store
        .create_endpoint(NewEndpoint::new(hostile.url()))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut kurir = Kurir::spawn(kurir_serve(&db.url, dir.path()));
    let ids = enqueue_events(&db.store, "order.paid", EVENTS).await;

    healthy.wait_for(EVENTS).await;
    let outcomes = eventually("an attempt of every hostile delivery recorded", || {
        first_attempts(&db.store, &ids, bad.id.as_str())
    })
    .await;
    let healthy_sent = eventually("every healthy delivery recorded as sent", || async {
        let sent = healthy_sent(&db.store, &ids, bad.id.as_str()).await;
        (sent == EVENTS).then_some(sent)
    })
    .await;
    let peak = kurir.peak_rss();
    let status = kurir.terminate().await;

    let shape_name = format!("{shape:?}").chars().take(40).collect::<String>();
    eprintln!(
        "{shape_name}: first attempt {}; healthy {healthy_sent}/{EVENTS} sent; {} hostile \
         requests; peak RSS {} MiB",
        outcomes[0],
        hostile.requests(),
        peak >> 20
    );
    assert_eq!(
        assert_all_arrived(&healthy.requests(), &ids),
        0,
        "the healthy endpoint got each event once"
    );
    assert!(peak > 0 && peak < MOST_RSS, "peak RSS {peak} bytes");
    assert!(status.success(), "SIGTERM exits 0, got {status}");
}

/// The first attempt of each delivery to `endpoint`, described, once every one has one.
async fn first_attempts(store: &Store, ids: &[String], endpoint: &str) -> Option<Vec<String>> {
    let mut outcomes = Vec::new();
    for id in ids {
        let deliveries = store.deliveries_for_event(id).await.ok()?;
        let d = deliveries.iter().find(|d| d.endpoint_id == endpoint)?;
        let attempts = store.attempts_for_delivery(d.id).await.ok()?;
        let a = attempts.first()?;
        let kept = a.response_body.as_deref().map_or(0, str::len);
        outcomes.push(match (a.status_code, &a.error) {
            (Some(code), _) => format!("HTTP {code}, {kept} bytes kept"),
            (None, Some(e)) => e.chars().take(120).collect(),
            (None, None) => "neither status nor error".into(),
        });
    }
    Some(outcomes)
}

/// How many of the deliveries of `ids` not to `hostile` are recorded as sent.
async fn healthy_sent(store: &Store, ids: &[String], hostile: &str) -> usize {
    let mut sent = 0;
    for id in ids {
        let deliveries = store.deliveries_for_event(id).await.unwrap_or_default();
        sent += deliveries
            .iter()
            .filter(|d| d.endpoint_id != hostile)
            .filter(|d| d.status == kurir::delivery::DeliveryStatus::Sent)
            .count();
    }
    sent
}

/// The flood ends when kurir has read its budget for one answer, not when the response timeout
/// runs out: hyper alone reads `1xx` answers for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_1xx_answers_is_cut_at_the_read_budget() {
    use kurir::webhook_client::{PostError, Timeouts, WebhookClient};
    let hostile = Hostile::start(Shape::InterimFlood).await;
    let client = WebhookClient::new(kurir::config::parse_networks("127.0.0.0/8").unwrap(), 4);
    let long = std::time::Duration::from_secs(30);
    let timeouts = Timeouts {
        connect: long,
        response: long,
    };
    let started = std::time::Instant::now();
    let answer = client
        .post(&hostile.url(), &[], b"{}".to_vec(), timeouts)
        .await;
    eprintln!("1xx flood: {answer:?} after {:?}", started.elapsed());
    let Err(PostError::Request(message)) = answer else {
        panic!("expected the read budget to end the attempt, got {answer:?}")
    };
    assert!(message.contains("MiB"), "{message}");
}
