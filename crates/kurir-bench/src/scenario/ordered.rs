//! `ordered`: one endpoint with `ordering: "aggregate"`, its events spread over 1, 100 and
//! 10,000 aggregates, enqueued as in `throughput` while kurir runs; deliveries/s from the first
//! commit to the last receipt. One aggregate is one delivery at a time (each after the previous
//! one's outcome is recorded), and every claim reads past the rows waiting behind their head,
//! so the runs show both the head-of-line cost and the claim's.

use kurir::endpoint::{EndpointId, EndpointUpdate, Ordering};

use super::{produce, result, throughput, Ctx, Pace, Rig, Via};
use crate::report::ScenarioResult;
use crate::stats::Deliveries;

/// The aggregate counts measured.
const AGGREGATES: [u64; 3] = [1, 100, 10_000];

/// One run per aggregate count.
pub async fn run(ctx: &Ctx) -> anyhow::Result<Vec<ScenarioResult>> {
    let mut out = Vec::new();
    for aggregates in AGGREGATES {
        out.push(one(ctx, aggregates).await?);
    }
    Ok(out)
}

/// Events of the run with `aggregates`: two per aggregate, between a tenth of the most and the
/// most (one aggregate's events are one long queue; its run stays short).
fn events(ctx: &Ctx, aggregates: u64) -> usize {
    let most = ctx.sizes.ordered_events;
    (2 * aggregates as usize).clamp(most / 10, most)
}

async fn one(ctx: &Ctx, aggregates: u64) -> anyhow::Result<ScenarioResult> {
    let events = events(ctx, aggregates);
    let mut r = result("ordered", format!("A={aggregates}"));
    let base = ctx.events(events);
    let mut rig = Rig::new(ctx, base, events, &["e/0".to_owned()]).await?;
    let store = rig.db.store().await?;
    let id = EndpointId::parse(&rig.endpoint_ids[0])?;
    let update = EndpointUpdate {
        ordering: Some(Ordering::Aggregate),
        ..Default::default()
    };
    store.update_endpoint(&id, update).await?;
    store.close().await;
    rig.start_kurir(ctx).await?;
    let pace = Pace {
        tx_size: throughput::TX_SIZE,
        producers: throughput::PRODUCERS,
        rate: None,
    };
    let via = Via::Grouped(aggregates);
    produce(&rig.app, &via, &rig.recorder, base, events, pace).await?;
    if !rig.wait_for(events as u64, ctx.sizes.patience).await {
        r.notes.push(format!(
            "gave up after {:?}: {} of {events} deliveries arrived",
            ctx.sizes.patience,
            rig.recorder.received()
        ));
    }
    let d = Deliveries::collect(&rig.recorder, 0..1);
    let lat = d.latency();
    r.metric("aggregates", aggregates as f64, "");
    r.metric("events", events as f64, "");
    r.metric("deliveries", d.received as f64, "");
    r.metric("duplicates", rig.recorder.duplicates() as f64, "");
    r.metric("deliveries_per_s", d.end_to_end_rate(), "/s");
    r.metric("latency_p50", lat.p50, "ms");
    r.metric("latency_p99", lat.p99, "ms");
    r.notes.push(format!(
        "{events} events over {aggregates} aggregates to one ordered endpoint"
    ));
    r.rate_series = d.rate_series(d.first_commit, 0.25);
    r.latency_cdf = crate::stats::cdf(&d.latencies);
    rig.finish(&mut r, d.received).await?;
    r.load_end = crate::machine::load_average();
    Ok(r)
}
