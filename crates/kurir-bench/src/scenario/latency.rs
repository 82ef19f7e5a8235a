//! `latency`: commit→receipt at a steady rate, one endpoint, one kurir process, in phases:
//! 200 events/s through the Rust `enqueue`, through `POST /v1/events`, and as plain SQL
//! `INSERT`s from another connection; then half the measured one-endpoint throughput.
//!
//! For the API phase the "commit" is when the `202` reached the client: the caller cannot know
//! of the event earlier (a delivery that overtakes the answer counts as 0 ms).

use std::time::Duration;

use super::{produce, result, throughput, Ctx, Pace, Rig, Via};
use crate::report::ScenarioResult;
use crate::stats::Deliveries;

/// The fixed rate the latency targets are set at.
const STEADY: f64 = 200.0;

struct Phase {
    label: String,
    via: Via,
    rate: f64,
    goal_ms: f64,
}

/// The four phases: three at the steady rate, one at `half` of the `measured` ceiling.
fn phases(measured: f64, half: f64) -> [Phase; 4] {
    let api = Via::Api(reqwest::Client::new(), String::new());
    [
        Phase {
            label: "200/s, Rust enqueue".into(),
            via: Via::Rust,
            rate: STEADY,
            goal_ms: 10.0,
        },
        Phase {
            label: "200/s, POST /v1/events".into(),
            via: api,
            rate: STEADY,
            goal_ms: 10.0,
        },
        Phase {
            label: "200/s, plain SQL INSERT".into(),
            via: Via::Sql,
            rate: STEADY,
            goal_ms: 25.0,
        },
        Phase {
            label: format!("{half:.0}/s (half of {measured:.0}/s), Rust enqueue"),
            via: Via::Rust,
            rate: half,
            goal_ms: 50.0,
        },
    ]
}

/// All phases.
pub async fn run(ctx: &Ctx) -> anyhow::Result<Vec<ScenarioResult>> {
    let mut out = Vec::new();
    let measured = one_endpoint_throughput(ctx, &mut out).await?;
    let half = (measured / 2.0).max(STEADY);
    let secs = ctx.sizes.duration.as_secs_f64();
    let phases = phases(measured, half);
    let sizes: Vec<usize> = phases
        .iter()
        .map(|p| (p.rate * secs).ceil() as usize)
        .collect();
    let total: usize = sizes.iter().sum();
    let base = ctx.events(total);
    let mut rig = Rig::new(ctx, base, total, &["e/0".to_owned()]).await?;
    let base_url = rig.start_kurir(ctx).await?;
    let mut offset = 0usize;
    let mut results = Vec::new();
    for (phase, n) in phases.into_iter().zip(sizes) {
        let mut r = result("latency", phase.label.clone());
        let before = rig.kurir.as_ref().map(|k| k.sample()).unwrap_or_default();
        let via = match phase.via {
            Via::Api(client, _) => Via::Api(client, base_url.clone()),
            v => v,
        };
        let first = base + offset as u64;
        let achieved = produce(&rig.app, &via, &rig.recorder, first, n, pace(phase.rate)).await?;
        let expected = (offset + n) as u64;
        if !rig.wait_for(expected, ctx.sizes.patience).await {
            r.notes.push(format!(
                "gave up waiting: {} of {expected} arrived",
                rig.recorder.received()
            ));
        }
        // Let the last deliveries' completions land before the next phase starts.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let d = Deliveries::collect_events(&rig.recorder, offset..offset + n, 0..1);
        record_latency(&mut r, &d, achieved, phase.rate, phase.goal_ms);
        let after = rig.kurir.as_ref().map(|k| k.sample()).unwrap_or_default();
        super::add_process_figures(&mut r, before, after, d.received);
        r.rate_series = d.rate_series(d.first_commit, 0.5);
        r.latency_cdf = crate::stats::cdf(&d.latencies);
        r.notes.push(format!("{n} events over {secs:.0} s"));
        r.load_end = crate::machine::load_average();
        offset += n;
        results.push(r);
    }
    // The phases share one database: the last one carries the check of them all.
    if let Some(last) = results.last_mut() {
        rig.record_lost_events(last).await?;
    }
    rig.finish(&mut ScenarioResult::default(), 0).await?;
    out.extend(results);
    Ok(out)
}

/// The one-endpoint throughput measured earlier in this run, or measured now (its result
/// added to `out`).
pub async fn one_endpoint_throughput(
    ctx: &Ctx,
    out: &mut Vec<ScenarioResult>,
) -> anyhow::Result<f64> {
    let measured = ctx.shared.lock().unwrap().throughput_one;
    Ok(match measured {
        Some(v) => v,
        None => {
            let r = throughput::one(ctx, ctx.sizes.events, 1).await?;
            let v = r.get("deliveries_per_s").unwrap_or(0.0);
            out.push(r);
            v
        }
    })
}

/// One phase's figures: rates, latency percentiles and the goal for its p99.
fn record_latency(r: &mut ScenarioResult, d: &Deliveries, achieved: f64, rate: f64, goal_ms: f64) {
    let lat = d.latency();
    r.metric("target_rate", rate, "/s");
    r.metric("achieved_enqueue_rate", achieved, "/s");
    r.metric("deliveries", d.received as f64, "");
    r.metric("latency_p50", lat.p50, "ms");
    r.metric("latency_p90", lat.p90, "ms");
    r.metric("latency_p99", lat.p99, "ms");
    r.metric("latency_max", lat.max, "ms");
    r.at_most("p99 commit→receipt", lat.p99, goal_ms, "ms");
}

/// How the producers pace `rate` events a second.
pub fn pace(rate: f64) -> Pace {
    Pace {
        // At most ~500 transactions a second, as a busy application would group writes.
        tx_size: (rate / 500.0).ceil().max(1.0) as usize,
        producers: 4,
        rate: Some(rate),
    }
}
