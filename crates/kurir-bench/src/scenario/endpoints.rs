//! `endpoints` (issue 27, item 1): what installed endpoints cost the one that receives. One
//! endpoint takes every event; M − 1 others are installed, each subscribed to a type of its own
//! that never comes. Events go in by plain SQL while kurir runs; delivered/s at each M against
//! M = 1, in the same run. kurir used to read every endpoint at every claim and relay batch, so
//! throughput fell as 1/M. Also kurir's start-up time and memory with M installed.

use std::time::Instant;

use kurir::endpoint::{EventFilter, NewEndpoint};

use super::{produce, result, Ctx, Pace, Rig, Via};
use crate::report::ScenarioResult;
use crate::stats::Deliveries;

/// Concurrent application connections writing the events.
const PRODUCERS: usize = 8;

/// The installation sizes measured, smallest first (the first is the reference).
fn sizes(ctx: &Ctx) -> Vec<usize> {
    if ctx.sizes.events <= 1_000 {
        vec![1, 100, 1_000]
    } else {
        vec![1, 100, 1_000, 10_000]
    }
}

/// One run per installation size, then the ratio of the largest to the first.
pub async fn run(ctx: &Ctx) -> anyhow::Result<Vec<ScenarioResult>> {
    let mut out = Vec::new();
    for m in sizes(ctx) {
        out.push(one(ctx, ctx.sizes.events, m).await?);
    }
    super::ratio_to_first(&mut out, "ratio_to_one_endpoint");
    if let Some(last) = out.last_mut() {
        let ratio = last.get("ratio_to_one_endpoint").unwrap_or(0.0);
        last.at_least("delivered/s against M=1", ratio, 0.8, "");
    }
    if ctx.sizes.events > 1_000 {
        out.push(one(ctx, 1_000, 100_000).await?);
    }
    Ok(out)
}

/// Installs `count` endpoints that subscribe to nothing this scenario sends, `PRODUCERS` at a
/// time.
pub async fn install_idle_endpoints(rig: &Rig, sink_url: &str, count: usize) -> anyhow::Result<()> {
    let keys = kurir::encryption::Keyring::parse(super::ENCRYPTION_KEY, "KURIR_ENCRYPTION_KEY")?;
    let store = (rig.db.store().await?).with_keyring(std::sync::Arc::new(keys));
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..PRODUCERS {
        let (store, sink_url) = (store.clone(), sink_url.to_owned());
        tasks.spawn(async move {
            for i in (w..count).step_by(PRODUCERS) {
                let mut e = NewEndpoint::new(format!("{sink_url}/never/{i}"));
                e.event_types = EventFilter::parse(vec![format!("other.type{i}")])?;
                store.create_endpoint(e).await?;
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

/// `events` events to one endpoint with `installed` − 1 others installed.
async fn one(ctx: &Ctx, events: usize, installed: usize) -> anyhow::Result<ScenarioResult> {
    let mut r = result("endpoints", format!("M={installed}"));
    let base = ctx.events(events);
    let mut rig = Rig::new(ctx, base, events, &["e/0".to_owned()]).await?;
    install_idle_endpoints(&rig, &rig.sink.url(), installed - 1).await?;
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
    let enqueue_rate = produce(&rig.app, &Via::Sql, &rig.recorder, base, events, pace).await?;
    rig.wait_or_note(&mut r, events as u64, ctx.sizes.patience)
        .await;
    r.record_busy(cpu_start);
    let d = Deliveries::collect(&rig.recorder, 0..1);
    r.metric("installed", installed as f64, "");
    r.metric("deliveries", d.received as f64, "");
    r.metric("duplicates", rig.recorder.duplicates() as f64, "");
    r.metric("stray_requests", rig.recorder.stray() as f64, "");
    r.at_most(
        "requests to endpoints that want nothing",
        rig.recorder.stray() as f64,
        0.0,
        "",
    );
    r.metric("enqueue_events_per_s", enqueue_rate, "/s");
    r.metric("deliveries_per_s", d.end_to_end_rate(), "/s");
    r.notes.push(format!(
        "{events} events by plain SQL from {PRODUCERS} connections to 1 of {installed} endpoints"
    ));
    rig.finish(&mut r, d.received).await?;
    r.load_end = crate::machine::load_average();
    Ok(r)
}
