//! `ceiling`: the limits of this machine in this run, for the other scenarios' ratios.
//!
//! - Raw POSTs/s: closed-loop requests to the sink with kurir's own HTTP client and an
//!   envelope-sized signed-looking body, at the concurrency kurir uses (16 per endpoint, 256 in
//!   all), no database.
//! - Claim+complete rows/s: kurir's own store calls (`claim_due_deliveries` in batches of the
//!   default 200, `complete_deliveries` in batches of up to 512, pipelined as the dispatcher
//!   pipelines them) on a preloaded backlog, no HTTP.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;

use kurir::delivery::{ClaimedDelivery, Completion, NextState};
use kurir::endpoint::NewEndpoint;
use kurir::store::{EndpointSlot, Store};
use kurir::webhook_client::{Timeouts, WebhookClient};

use super::{kurir_concurrency, result, Ctx, PER_PROCESS};
use crate::clock::now_ns;
use crate::db::PAYLOAD;
use crate::report::ScenarioResult;
use crate::sink::{Recorder, Sink};
use crate::stats::percentiles;

/// kurir's default batch size (`KURIR_BATCH_SIZE`).
const BATCH: u32 = 200;

/// Runs both measurements.
pub async fn run(ctx: &Ctx) -> anyhow::Result<Vec<ScenarioResult>> {
    let mut out = Vec::new();
    for e in [1, 10] {
        let c = kurir_concurrency(e);
        let mut r = result(
            "ceiling",
            format!("raw POSTs, concurrency {c} (kurir with E={e})"),
        );
        let v = raw_posts(c, ctx.sizes.ceiling).await?;
        ctx.shared.lock().unwrap().raw_posts.insert(c, v);
        r.metric("raw_posts_per_s", v, "/s");
        r.notes.push(format!(
            "{c} concurrent keep-alive requests for {:?}, kurir's own HTTP client, one sink on loopback",
            ctx.sizes.ceiling
        ));
        r.load_end = crate::machine::load_average();
        out.push(r);
    }
    out.push(claim_complete(ctx).await?);
    Ok(out)
}

/// An HTTP client for the harness's own requests (the inbox scenario's partner).
pub fn kurir_like_client() -> anyhow::Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(2))
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .tcp_nodelay(true)
        .pool_max_idle_per_host(256)
        .build()?)
}

/// A request's headers, shared by the tasks that send it.
type Headers = Arc<[(&'static str, String)]>;

/// The body and headers of the raw POSTs: a delivery as kurir sends it, signature aside.
fn raw_request() -> (Vec<u8>, Headers) {
    let body = format!(
        r#"{{"event_id":"0190f3c2-7c4e-7b1a-9a51-6f1d2f0e9b11","event_type":"order.paid","version":1,"occurred_at":"2026-06-11T08:15:30Z","delivery_attempt":1,"data":{PAYLOAD}}}"#
    )
    .into_bytes();
    let headers: Headers = Arc::from(vec![
        ("content-type", "application/json".to_owned()),
        ("x-webhook-event", "order.paid".to_owned()),
        (
            "x-webhook-event-id",
            "0190f3c2-7c4e-7b1a-9a51-6f1d2f0e9b11".to_owned(),
        ),
        ("x-webhook-timestamp", "2026-06-11T08:15:31Z".to_owned()),
        ("x-webhook-signature", "0".repeat(64)),
    ]);
    (body, headers)
}

/// Closed-loop POSTs/s to a fresh sink with `concurrency` workers for `duration`.
pub async fn raw_posts(concurrency: usize, duration: Duration) -> anyhow::Result<f64> {
    let recorder = Recorder::new(0, 0, 0);
    let sink = Sink::start(recorder.clone()).await?;
    let url = format!("{}/raw", sink.url());
    // kurir's own HTTP client, as its dispatcher builds it with its default `max_concurrency`.
    let allowed = kurir::config::parse_networks("127.0.0.0/8").context("loopback network")?;
    let client = Arc::new(WebhookClient::new(allowed, PER_PROCESS));
    let (body, headers) = raw_request();
    let timeouts = Timeouts {
        connect: Duration::from_secs(2),
        response: Duration::from_secs(5),
    };
    let count = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    // Warm the connections up first, as kurir's pool is warm in steady state.
    let warm_until = Instant::now() + duration / 5;
    let end = warm_until + duration;
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..concurrency {
        let (client, url, body, headers, count, errors) = (
            client.clone(),
            url.clone(),
            body.clone(),
            headers.clone(),
            count.clone(),
            errors.clone(),
        );
        tasks.spawn(async move {
            while Instant::now() < end {
                let sent = client.post(&url, &headers, body.clone(), timeouts).await;
                let ok = sent.is_ok_and(|r| r.status == 200);
                if Instant::now() >= warm_until {
                    if ok {
                        count.fetch_add(1, Ordering::Relaxed);
                    } else {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        });
    }
    while tasks.join_next().await.is_some() {}
    sink.stop();
    anyhow::ensure!(
        errors.load(Ordering::Relaxed) == 0,
        "raw POSTs failed: {}",
        errors.load(Ordering::Relaxed)
    );
    Ok(count.load(Ordering::Relaxed) as f64 / duration.as_secs_f64())
}

/// The completion writer as kurir runs it: batches of what the channel holds, up to 512. Returns
/// how long each batch took.
async fn write_completions(
    store: Store,
    owner: String,
    mut rx: tokio::sync::mpsc::Receiver<Completion>,
) -> anyhow::Result<Vec<u64>> {
    let mut batch = Vec::with_capacity(512);
    let mut times = Vec::new();
    while rx.recv_many(&mut batch, 512).await > 0 {
        let t = now_ns();
        store.complete_deliveries(&owner, &batch).await?;
        times.push(now_ns() - t);
        batch.clear();
    }
    Ok(times)
}

/// A delivery answered 200 at once.
fn sent(d: ClaimedDelivery) -> Completion {
    Completion {
        delivery_id: d.delivery_id,
        endpoint_id: d.endpoint.id.clone(),
        attempt: d.attempt,
        trigger: d.trigger,
        started_at: kurir::clock::Clock::system().now_millis(),
        duration_ms: 0,
        status_code: Some(200),
        error: None,
        response_body: Some(Default::default()),
        next: NextState::Sent,
    }
}

/// Claims until nothing is left and sends each claimed delivery to the writer as sent. Returns
/// how long each claim took and how many rows were claimed.
async fn claim_all(
    store: &Store,
    owner: &str,
    slot: &EndpointSlot,
    tx: tokio::sync::mpsc::Sender<Completion>,
) -> anyhow::Result<(Vec<u64>, usize)> {
    let mut claim_times = Vec::new();
    let mut claimed_rows = 0usize;
    loop {
        let t = now_ns();
        let claimed = store
            .claim_due_deliveries(owner, std::slice::from_ref(slot), BATCH)
            .await?
            .deliveries;
        claim_times.push(now_ns() - t);
        if claimed.is_empty() {
            break;
        }
        claimed_rows += claimed.len();
        for d in claimed {
            tx.send(sent(d)).await?;
        }
    }
    Ok((claim_times, claimed_rows))
}

/// kurir's claim and complete on a preloaded backlog, with no HTTP in between.
async fn claim_complete(ctx: &Ctx) -> anyhow::Result<ScenarioResult> {
    let mut r = result("ceiling", format!("DB claim+complete, batch {BATCH}"));
    let rows = (ctx.sizes.backlog / 10).max(1000);
    let db = ctx.database().await?;
    let store = db.store().await?;
    let endpoint = store
        .create_endpoint(NewEndpoint::new("http://127.0.0.1:9/e/0"))
        .await?;
    let app = db.app_pool(2).await?;
    app.preload_backlog(ctx.events(rows), rows as u64, endpoint.id.as_str())
        .await?;
    let slot = EndpointSlot {
        endpoint: Arc::new(endpoint),
        limit: BATCH,
        lease: Duration::from_secs(37),
    };
    let owner = kurir::dispatch::owner_id();
    let (tx, rx) = tokio::sync::mpsc::channel::<Completion>(4096);
    let writer = tokio::spawn(write_completions(store.clone(), owner.clone(), rx));
    let start = now_ns();
    let (mut claim_times, claimed_rows) = claim_all(&store, &owner, &slot, tx).await?;
    let mut complete_times = writer.await??;
    let elapsed = now_ns() - start;
    store.close().await;
    app.close().await;
    db.remove().await?;
    r.metric("rows", claimed_rows as f64, "");
    r.metric(
        "claim_complete_rows_per_s",
        crate::stats::rate(claimed_rows, elapsed),
        "/s",
    );
    let claim = percentiles(&mut claim_times);
    let complete = percentiles(&mut complete_times);
    r.metric("claim_batch_p50", claim.p50, "ms");
    r.metric("claim_batch_p99", claim.p99, "ms");
    r.metric("complete_batch_p50", complete.p50, "ms");
    r.metric("complete_batch_p99", complete.p99, "ms");
    r.metric("complete_batches", complete.count as f64, "");
    r.notes.push(format!(
        "{rows} preloaded pending deliveries to one endpoint; claim loop and completion writer run concurrently, as in kurir"
    ));
    r.load_end = crate::machine::load_average();
    Ok(r)
}
