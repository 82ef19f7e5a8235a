//! `isolation`: 10 endpoints, every event to each; once all fast, once with endpoint 9 answering
//! only after 10 s (past kurir's 5 s response timeout). Throughput to the nine endpoints that are
//! fast in both runs, as a fraction of the all-fast run.

use super::{produce, result, throughput, Ctx, Pace, Rig, Via};
use crate::report::ScenarioResult;
use crate::stats::Deliveries;

const ENDPOINTS: usize = 10;
const FAST: usize = 9;

/// Both runs.
pub async fn run(ctx: &Ctx) -> anyhow::Result<Vec<ScenarioResult>> {
    let all_fast = one(ctx, false).await?;
    let mut slow = one(ctx, true).await?;
    let a = all_fast.get("fast_deliveries_per_s").unwrap_or(0.0);
    let b = slow.get("fast_deliveries_per_s").unwrap_or(0.0);
    let fraction = b / a.max(f64::MIN_POSITIVE);
    slow.metric("fraction_of_all_fast", fraction, "");
    slow.at_least("fast endpoints' share kept", fraction, 0.9, "");
    Ok(vec![all_fast, slow])
}

async fn one(ctx: &Ctx, with_slow: bool) -> anyhow::Result<ScenarioResult> {
    let events = ctx.sizes.isolation_events;
    let mut r = result(
        "isolation",
        if with_slow {
            "9 fast + 1 slow (10 s)"
        } else {
            "10 fast"
        },
    );
    let base = ctx.events(events);
    let paths: Vec<String> = (0..ENDPOINTS)
        .map(|k| {
            if with_slow && k == FAST {
                format!("slow/{k}")
            } else {
                format!("e/{k}")
            }
        })
        .collect();
    let mut rig = Rig::new(ctx, base, events, &paths).await?;
    rig.start_kurir(ctx).await?;
    let pace = Pace {
        tx_size: throughput::TX_SIZE,
        producers: throughput::PRODUCERS,
        rate: None,
    };
    produce(&rig.app, &Via::Rust, &rig.recorder, base, events, pace).await?;
    // Slow answers are never recorded, so this counts the fast endpoints only.
    let expected = (events * if with_slow { FAST } else { ENDPOINTS }) as u64;
    if !rig.wait_for(expected, ctx.sizes.patience).await {
        r.notes.push(format!(
            "gave up waiting: {} of {expected} arrived",
            rig.recorder.received()
        ));
    }
    let d = Deliveries::collect(&rig.recorder, 0..FAST);
    let lat = d.latency();
    r.metric("events", events as f64, "");
    r.metric("fast_deliveries", d.received as f64, "");
    r.metric("fast_deliveries_per_s", d.end_to_end_rate(), "/s");
    r.metric("latency_p50", lat.p50, "ms");
    r.metric("latency_p99", lat.p99, "ms");
    if with_slow {
        r.metric("slow_requests", rig.recorder.slow_requests() as f64, "");
    }
    r.rate_series = d.rate_series(d.first_commit, 0.25);
    r.latency_cdf = crate::stats::cdf(&d.latencies);
    rig.finish(&mut r, d.received).await?;
    r.load_end = crate::machine::load_average();
    Ok(r)
}
