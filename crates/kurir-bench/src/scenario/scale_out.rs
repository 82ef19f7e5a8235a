//! `scale-out` (issue 27, item 2): what several `kurir serve` processes sharing one database
//! deliver against one. One endpoint; with a partner answering in 50 ms each process's
//! `max_in_flight` (16 by default) bounds what it delivers, so P processes should deliver about
//! P times as much, each doing its share; with a fast partner on this 2-core machine, more
//! processes should be no slower. Events go in by plain SQL while the processes run.

use super::{produce, result, Ctx, Pace, Rig, Via};
use crate::child::UnderTest;
use crate::report::ScenarioResult;
use crate::stats::Deliveries;

/// The slow partner's answer time, in milliseconds.
const PARTNER_MS: u64 = 50;

/// Process counts measured; the first is the reference.
fn process_counts(ctx: &Ctx) -> Vec<usize> {
    if ctx.sizes.events <= 1_000 {
        vec![1, 3]
    } else {
        vec![1, 2, 3, 6]
    }
}

/// The runs with the slow partner, then one and three processes with a fast one.
pub async fn run(ctx: &Ctx) -> anyhow::Result<Vec<ScenarioResult>> {
    if ctx.backend == crate::db::Backend::Sqlite {
        // One process per SQLite file: there is nothing to scale out.
        return Ok(Vec::new());
    }
    let slow_events = ctx.sizes.events.min(2_000);
    let path = format!("d/{PARTNER_MS}/0");
    let mut out = compare(ctx, &process_counts(ctx), slow_events, &path, "slow").await?;
    if let Some(last) = out.iter_mut().find(|r| r.label == "slow P=3") {
        let ratio = last.get("ratio_to_one_process").unwrap_or(0.0);
        last.at_least("delivered/s against one process", ratio, 2.5, "");
        let least = last.get("least_share").unwrap_or(0.0);
        last.at_least("the least busy process's share", least, 0.2, "");
    }
    let mut fast = compare(ctx, &[1, 3], ctx.sizes.events, "e/0", "fast").await?;
    if let Some(last) = fast.last_mut() {
        let ratio = last.get("ratio_to_one_process").unwrap_or(0.0);
        last.at_least("delivered/s against one process", ratio, 1.0, "");
    }
    out.extend(fast);
    Ok(out)
}

async fn compare(
    ctx: &Ctx,
    counts: &[usize],
    events: usize,
    path: &str,
    name: &str,
) -> anyhow::Result<Vec<ScenarioResult>> {
    let mut out = Vec::new();
    for &p in counts {
        out.push(one(ctx, events, p, path, name).await?);
    }
    super::ratio_to_first(&mut out, "ratio_to_one_process");
    Ok(out)
}

async fn one(
    ctx: &Ctx,
    events: usize,
    processes: usize,
    path: &str,
    name: &str,
) -> anyhow::Result<ScenarioResult> {
    let mut r = result("scale-out", format!("{name} P={processes}"));
    let base = ctx.events(events);
    let mut rig = Rig::new(ctx, base, events, &[path.to_owned()]).await?;
    let key = super::with_encryption_key();
    rig.start_kurir_with(ctx, &key).await?;
    let mut others = Vec::new();
    for i in 1..processes {
        let dir = ctx.dir.join(format!("p{i}"));
        others.push(UnderTest::kurir(&rig.db.url, &dir, &key).await?);
    }
    let cpu_start = crate::machine::machine_cpu_ticks();
    let pace = Pace {
        tx_size: 1,
        producers: 4,
        rate: None,
    };
    produce(&rig.app, &Via::Sql, &rig.recorder, base, events, pace).await?;
    rig.wait_or_note(&mut r, events as u64, ctx.sizes.patience)
        .await;
    r.record_busy(cpu_start);
    let d = Deliveries::collect(&rig.recorder, 0..1);
    let shares = rig.app.attempts_by_worker().await?;
    let total: i64 = shares.iter().sum();
    let least = if shares.len() < processes {
        0.0
    } else {
        shares.last().copied().unwrap_or(0) as f64 / total.max(1) as f64
    };
    r.metric("processes", processes as f64, "");
    r.metric("deliveries", d.received as f64, "");
    r.metric("duplicates", rig.recorder.duplicates() as f64, "");
    r.at_most("duplicates", rig.recorder.duplicates() as f64, 0.0, "");
    r.metric("deliveries_per_s", d.end_to_end_rate(), "/s");
    r.metric("least_share", least, "");
    r.notes.push(format!(
        "{events} events by plain SQL to one endpoint at /{path}; attempts per process {shares:?}"
    ));
    for k in others {
        k.stop().await?;
    }
    rig.finish(&mut r, d.received).await?;
    r.load_end = crate::machine::load_average();
    Ok(r)
}
