//! `noisy` (issue 32, item 3): a degraded partner keeps flowing, a dead one is cut off. One
//! kurir with default settings delivers the same events to three partners in one run: a healthy
//! one, one answering `500` to 30 % of requests at random, and one answering `500` to all.
//!
//! - The 30 %-failing partner must keep at least 0.6 of the healthy one's throughput: its first
//!   successful deliveries by the time the healthy partner has every event, against every event
//!   (each `500` is retried after its backoff, so some cost is fair).
//! - The dead partner's breaker must open within seconds: the time from its first request to the
//!   first time its circuit reads `open` (polled every 50 ms).
//!
//! How often each breaker opened is counted the same way, by polling.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kurir::endpoint::NewEndpoint;
use tokio_util::sync::CancellationToken;

use super::chaos::{Partners, Shape};
use super::{result, Ctx};
use crate::child::UnderTest;
use crate::clock::now_ns;
use crate::db::{each_pool, AppPool};
use crate::report::ScenarioResult;

/// The partners, in this order.
const HEALTHY: usize = 0;
const NOISY: usize = 1;
const DEAD: usize = 2;

/// Events per enqueue transaction.
const TX_SIZE: usize = 100;

/// One run.
pub async fn run(ctx: &Ctx) -> anyhow::Result<Vec<ScenarioResult>> {
    let events = ctx.sizes.events;
    let mut r = result(
        "noisy",
        format!("{events} events, partners 0 % / 30 % / 100 % 500s"),
    );
    let db = ctx.database().await?;
    let partners = Partners::start(vec![
        Shape::Healthy,
        Shape::Failing(30),
        Shape::Failing(100),
    ])
    .await?;
    let ids = create_endpoints(&db, &partners).await?;
    let app = db.app_pool(4).await?;
    let kurir = UnderTest::kurir(&db.url, &ctx.dir, &[]).await?;
    let stop = CancellationToken::new();
    let circuits = Arc::new(Mutex::new(Circuits::default()));
    let poller = tokio::spawn(poll_circuits(
        app.clone(),
        ids,
        Arc::clone(&circuits),
        stop.clone(),
    ));
    let start_ns = now_ns();
    let first_event = ctx.events(events);
    enqueue(&app, first_event, events).await?;
    let healthy_done = wait_for(&partners, HEALTHY, events, ctx.sizes.patience).await;
    let seen = Seen {
        first_event,
        events,
        noisy: partners.delivered(NOISY),
        elapsed_s: (now_ns() - start_ns) as f64 / 1e9,
    };
    // On a tiny run the dead partner's breaker may open only after the others are done.
    let deadline = Instant::now() + Duration::from_secs(30);
    while circuits.lock().unwrap().first_open_ns[DEAD].is_none() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.cancel();
    poller.await??;
    kurir.stop().await?;
    let circuits = circuits.lock().unwrap().clone();
    report(&mut r, &seen, &circuits, &partners);
    if !healthy_done {
        r.notes.push(format!(
            "gave up after {:?}: the healthy partner had {} of {events}",
            ctx.sizes.patience,
            partners.delivered(HEALTHY)
        ));
    }
    partners.stop();
    let lost = app.lost_events().await?;
    r.at_most("events lost", lost as f64, 0.0, "");
    app.close().await;
    db.remove().await?;
    r.load_end = crate::machine::load_average();
    Ok(vec![r])
}

async fn create_endpoints(
    db: &crate::db::Database,
    partners: &Partners,
) -> anyhow::Result<Vec<String>> {
    let store = db.store().await?;
    let mut ids = Vec::new();
    for k in [HEALTHY, NOISY, DEAD] {
        let e = store
            .create_endpoint(NewEndpoint::new(partners.url(k)))
            .await?;
        ids.push(e.id.as_str().to_owned());
    }
    store.close().await;
    Ok(ids)
}

/// The events, and what the 30 %-failing partner had when the healthy one had them all.
#[derive(Clone, Copy)]
struct Seen {
    first_event: u64,
    events: usize,
    noisy: usize,
    elapsed_s: f64,
}

fn report(r: &mut ScenarioResult, seen: &Seen, circuits: &Circuits, partners: &Partners) {
    let Seen {
        first_event,
        events,
        noisy,
        elapsed_s,
    } = *seen;
    let ratio = noisy as f64 / events as f64;
    r.metric("healthy_deliveries_per_s", events as f64 / elapsed_s, "/s");
    r.metric("noisy_deliveries_per_s", noisy as f64 / elapsed_s, "/s");
    r.metric("noisy_to_healthy", ratio, "");
    r.at_least(
        "30 %-failing partner's throughput against the healthy one's",
        ratio,
        0.6,
        "",
    );
    r.metric(
        "noisy_breaker_opened",
        circuits.opened[NOISY] as f64,
        "times",
    );
    r.metric(
        "healthy_breaker_opened",
        circuits.opened[HEALTHY] as f64,
        "times",
    );
    let first_request = partners.answered(DEAD, |a| a.first_request_ns);
    let to_open = match (first_request, circuits.first_open_ns[DEAD]) {
        (Some(first), Some(open)) => open.saturating_sub(first) as f64 / 1e9,
        _ => f64::INFINITY,
    };
    r.metric("dead_partner_time_to_open", to_open, "s");
    r.at_most(
        "the dead partner's breaker opens within",
        to_open,
        10.0,
        "s",
    );
    r.notes.push(format!(
        "{events} events (from ev-{first_event}) enqueued in transactions of {TX_SIZE}; the \
         30 %-failing partner had {noisy} when the healthy one had them all, {elapsed_s:.1} s \
         after the first"
    ));
}

/// Enqueues events `base .. base + count` in transactions of [`TX_SIZE`].
async fn enqueue(app: &AppPool, base: u64, count: usize) -> anyhow::Result<()> {
    for first in (0..count).step_by(TX_SIZE) {
        let last = (first + TX_SIZE).min(count);
        app.enqueue(base + first as u64..base + last as u64, None)
            .await?;
    }
    Ok(())
}

/// Waits until partner `k` has `count` events, or `patience` passes; whether it has.
async fn wait_for(partners: &Partners, k: usize, count: usize, patience: Duration) -> bool {
    let deadline = Instant::now() + patience;
    while partners.delivered(k) < count {
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    true
}

/// What polling the circuits saw, per partner.
#[derive(Clone, Default)]
struct Circuits {
    /// Times seen turning `open`.
    opened: [u64; 3],
    /// When first seen `open`.
    first_open_ns: [Option<u64>; 3],
}

/// Reads the circuits of `endpoints` every 50 ms until `stop`.
async fn poll_circuits(
    app: AppPool,
    endpoints: Vec<String>,
    seen: Arc<Mutex<Circuits>>,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    // MySQL keeps the ids as binary strings.
    let sql = match app {
        AppPool::Mysql(_) => {
            "SELECT CONVERT(endpoint_id USING utf8mb4), CONVERT(state USING utf8mb4) \
             FROM kurir_endpoint_circuits"
        }
        AppPool::Postgres(_) | AppPool::Sqlite(_) => {
            "SELECT endpoint_id, state FROM kurir_endpoint_circuits"
        }
    };
    let mut was_open = [false; 3];
    while !stop.is_cancelled() {
        let rows: Vec<(String, String)> =
            each_pool!(&app, pool => sqlx::query_as(sql).fetch_all(pool).await?);
        let states: HashMap<String, String> = rows.into_iter().collect();
        let at = now_ns();
        {
            let mut seen = seen.lock().unwrap();
            for (k, id) in endpoints.iter().enumerate() {
                let open = states.get(id).is_some_and(|s| s == "open");
                if open && !was_open[k] {
                    seen.opened[k] += 1;
                    seen.first_open_ns[k].get_or_insert(at);
                }
                was_open[k] = open;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}
