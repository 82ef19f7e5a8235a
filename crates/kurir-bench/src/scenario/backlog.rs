//! `backlog`: a deep queue of pending deliveries to one fast endpoint, preloaded in bulk before
//! kurir starts; the delivery rate in the first 10 s against the last 10 s before it empties,
//! and the tables' size before and after.

use std::time::Duration;

use super::{result, Ctx, Rig};
use crate::clock::now_ns;
use crate::report::ScenarioResult;
use crate::stats::Deliveries;

/// The whole scenario.
pub async fn run(ctx: &Ctx) -> anyhow::Result<Vec<ScenarioResult>> {
    let n = ctx.sizes.backlog;
    let mut r = result("backlog", format!("{n} pending"));
    let base = ctx.events(n);
    let mut rig = Rig::new(ctx, base, n, &["e/0".to_owned()]).await?;
    let preload = now_ns();
    rig.app
        .preload_backlog(base, n as u64, &rig.endpoint_ids[0])
        .await?;
    r.metric("preload_seconds", (now_ns() - preload) as f64 / 1e9, "s");
    let committed = now_ns();
    for i in 0..n as u64 {
        rig.recorder.committed(base + i, committed);
    }
    r.sizes_before = rig.app.table_sizes().await?;
    rig.start_kurir(ctx).await?;
    if !rig.wait_for(n as u64, ctx.sizes.patience).await {
        r.notes.push(format!(
            "gave up waiting: {} of {n} arrived",
            rig.recorder.received()
        ));
    }
    // Completions of the last batch, then the sizes as kurir leaves them.
    tokio::time::sleep(Duration::from_millis(500)).await;
    r.sizes_after = rig.app.table_sizes().await?;
    let d = Deliveries::collect(&rig.recorder, 0..1);
    let span = d.last_arrival.saturating_sub(d.first_arrival);
    let window = (span / 3).min(10_000_000_000);
    let first = d.rate_between(d.first_arrival, d.first_arrival + window);
    let last = d.rate_between(d.last_arrival + 1 - window, d.last_arrival + 1);
    r.metric("deliveries", d.received as f64, "");
    r.metric("duplicates", rig.recorder.duplicates() as f64, "");
    r.metric("deliveries_per_s", d.receipt_rate(), "/s");
    r.metric("first_window_per_s", first, "/s");
    r.metric("last_window_per_s", last, "/s");
    r.metric("window", window as f64 / 1e9, "s");
    let last_over_first = last / first.max(f64::MIN_POSITIVE);
    r.metric("last_over_first", last_over_first, "");
    r.at_least("last/first window rate", last_over_first, 0.9, "");
    for (before, after) in r
        .sizes_before
        .clone()
        .iter()
        .zip(r.sizes_after.clone().iter())
    {
        let grew = (after.table_bytes + after.index_bytes) as f64
            / (before.table_bytes + before.index_bytes).max(1) as f64;
        r.metric(&format!("{}_growth", before.table), grew, "x");
    }
    r.notes.push(
        "rows preloaded with one INSERT … SELECT per table (events already fanned out), then ANALYZE; \
         the rate counts from the first receipt; growth = (table+indexes) after ÷ before"
            .into(),
    );
    r.rate_series = d.rate_series(d.first_arrival, 1.0);
    rig.finish(&mut r, d.received).await?;
    r.load_end = crate::machine::load_average();
    Ok(vec![r])
}
