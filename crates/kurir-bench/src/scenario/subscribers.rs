//! `subscribers` (issue 29, item 5): what thousands of subscribers cost fan-out. 10,000
//! subscribers with 2 endpoints each, all subscribing to `order.*`; events go in by plain SQL,
//! each addressed to a subscriber picked at random, while kurir runs. Delivered/s against the
//! `throughput` scenario with one endpoint, in the same run: the relay looks an event's targets
//! up among its own subscriber's endpoints only, so the target is at least 0.8 of it.
//!
//! Every subscriber's endpoints are the sink's `/e/0` and `/e/1` (told apart by a query string
//! that names the subscriber), so the sink records each event at slot 0 and 1; a delivery to
//! another subscriber's endpoint arrives a third time and counts as a duplicate.

use std::time::Instant;

use kurir::endpoint::{EventFilter, NewEndpoint};

use super::{produce, result, Ctx, Pace, Rig, Via};
use crate::report::ScenarioResult;
use crate::stats::Deliveries;

/// Concurrent application connections writing the events (and installing subscribers).
const PRODUCERS: usize = 8;
/// Endpoints per subscriber.
const PER_SUBSCRIBER: usize = 2;

/// The subscriber id of number `s`.
pub fn subscriber_id(s: u64) -> String {
    format!("cus_{s}")
}

/// How many subscribers: 10,000, or 1,000 in a smoke run.
fn subscribers(ctx: &Ctx) -> u64 {
    if ctx.sizes.events <= 1_000 {
        1_000
    } else {
        10_000
    }
}

/// The reference (one endpoint, from `throughput` or measured now), then the subscribers run
/// and its ratio to the reference.
pub async fn run(ctx: &Ctx) -> anyhow::Result<Vec<ScenarioResult>> {
    let mut out = Vec::new();
    let reference = super::latency::one_endpoint_throughput(ctx, &mut out).await?;
    let mut r = one(ctx, ctx.sizes.events, subscribers(ctx)).await?;
    let rate = r.get("deliveries_per_s").unwrap_or(0.0);
    let ratio = rate / reference.max(f64::MIN_POSITIVE);
    r.metric("throughput_one_endpoint_per_s", reference, "/s");
    r.metric("ratio_to_one_endpoint", ratio, "");
    r.at_least("delivered/s against throughput E=1", ratio, 0.8, "");
    out.push(r);
    Ok(out)
}

/// Creates `count` subscribers with [`PER_SUBSCRIBER`] endpoints each at the sink,
/// `PRODUCERS` at a time.
async fn install(rig: &Rig, sink_url: &str, count: u64) -> anyhow::Result<()> {
    let keys = kurir::encryption::Keyring::parse(super::ENCRYPTION_KEY, "KURIR_ENCRYPTION_KEY")?;
    let store = (rig.db.store().await?).with_keyring(std::sync::Arc::new(keys));
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..PRODUCERS as u64 {
        let (store, sink_url) = (store.clone(), sink_url.to_owned());
        tasks.spawn(async move {
            for s in (w..count).step_by(PRODUCERS) {
                let id = subscriber_id(s);
                let name = format!("Shop {s}");
                store
                    .create_subscriber(&id, &name, &serde_json::json!({}))
                    .await?;
                for k in 0..PER_SUBSCRIBER {
                    let mut e = NewEndpoint::new(format!("{sink_url}/e/{k}?subscriber={id}"));
                    e.event_types = EventFilter::parse(vec!["order.*".to_owned()])?;
                    e.subscriber_id = Some(id.clone());
                    store.create_endpoint(e).await?;
                }
            }
            anyhow::Ok(())
        });
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    store.close().await;
    Ok(())
}

/// `events` events, each to a random one of `count` subscribers.
async fn one(ctx: &Ctx, events: usize, count: u64) -> anyhow::Result<ScenarioResult> {
    let mut r = result("subscribers", format!("S={count}"));
    let base = ctx.events(events);
    // No endpoint of the operator's own: every endpoint belongs to a subscriber.
    let mut rig = Rig::new(ctx, base, events, &[]).await?;
    rig.recorder = crate::sink::Recorder::new(base, events, PER_SUBSCRIBER);
    rig.sink.stop();
    rig.sink = crate::sink::Sink::start(rig.recorder.clone()).await?;
    let installing = Instant::now();
    install(&rig, &rig.sink.url(), count).await?;
    r.metric("install", installing.elapsed().as_secs_f64(), "s");
    let started = Instant::now();
    rig.start_kurir_with(ctx, &super::with_encryption_key())
        .await?;
    r.metric("start_up", started.elapsed().as_secs_f64() * 1e3, "ms");
    r.metric("rss_at_start", rig.before.peak_rss_bytes as f64 / 1e6, "MB");
    let cpu_start = crate::machine::machine_cpu_ticks();
    let pace = Pace {
        tx_size: 1,
        producers: PRODUCERS,
        rate: None,
    };
    let via = Via::SqlToSubscribers(count);
    let enqueue_rate = produce(&rig.app, &via, &rig.recorder, base, events, pace).await?;
    let expected = (events * PER_SUBSCRIBER) as u64;
    rig.wait_or_note(&mut r, expected, ctx.sizes.patience).await;
    r.record_busy(cpu_start);
    let d = Deliveries::collect(&rig.recorder, 0..PER_SUBSCRIBER);
    r.metric("subscribers", count as f64, "");
    r.metric("endpoints", (count as usize * PER_SUBSCRIBER) as f64, "");
    r.metric("deliveries", d.received as f64, "");
    let duplicates = rig.recorder.duplicates() as f64;
    r.metric("duplicates", duplicates, "");
    r.at_most(
        "deliveries to another subscriber's endpoint",
        duplicates,
        0.0,
        "",
    );
    r.metric("stray_requests", rig.recorder.stray() as f64, "");
    r.metric("enqueue_events_per_s", enqueue_rate, "/s");
    r.metric("deliveries_per_s", d.end_to_end_rate(), "/s");
    r.notes.push(format!(
        "{events} events by plain SQL from {PRODUCERS} connections, each to a random one of \
         {count} subscribers with {PER_SUBSCRIBER} endpoints on order.*"
    ));
    rig.finish(&mut r, d.received).await?;
    r.load_end = crate::machine::load_average();
    Ok(r)
}
