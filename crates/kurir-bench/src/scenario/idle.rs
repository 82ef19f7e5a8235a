//! `idle`: what kurir costs while nothing happens, and how late the first event after a quiet
//! spell arrives (issue 11, item 8).
//!
//! One endpoint at the sink and one inbox source, so every loop (relay, claim, lease sweep,
//! inbox runner) has something to look for. After the processes settle, a window of
//! `--duration` seconds: on PostgreSQL the database's committed transactions
//! (`pg_stat_database.xact_commit`; an idle kurir runs each statement as its own transaction)
//! and kurir's CPU, with 1 and then 3 processes; on SQLite, one process (one per file), CPU
//! only. Then, several times, a quiet spell and one plain SQL `INSERT`: its commit→receipt.

use std::time::{Duration, Instant};

use kurir::inbox_source::NewSource;

use super::{result, Ctx, Rig, Via};
use crate::child::UnderTest;
use crate::clock::now_ns;
use crate::db::Backend;
use crate::report::ScenarioResult;
use crate::stats::Deliveries;

/// Events sent one at a time after quiet spells.
const FIRST_EVENTS: usize = 5;

/// The bound on an idle process.
const MOST_STATEMENTS_PER_S: f64 = 5.0;

/// The bound on the first event after a long idle.
const FIRST_EVENT_MS: f64 = 1000.0;

/// Idle figures with 1 process, and on the servers (PostgreSQL, MySQL) with 3.
pub async fn run(ctx: &Ctx) -> anyhow::Result<Vec<ScenarioResult>> {
    let counts: &[usize] = match ctx.backend {
        Backend::Postgres | Backend::Mysql => &[1, 3],
        Backend::Sqlite => &[1],
    };
    let mut out = Vec::new();
    for &processes in counts {
        out.push(idle(ctx, processes).await?);
    }
    Ok(out)
}

async fn idle(ctx: &Ctx, processes: usize) -> anyhow::Result<ScenarioResult> {
    let mut r = result("idle", format!("{processes} idle process(es)"));
    let window = ctx.sizes.duration;
    // Long enough for every loop to have slowed down to its slowest poll.
    let quiet = (window / 3).clamp(Duration::from_secs(1), Duration::from_secs(10));
    // And for the start-up's transactions to be counted before the window opens: a backend
    // that went idle within a second of its last report reports up to 10 s later.
    let settle = if window >= Duration::from_secs(10) {
        quiet + Duration::from_secs(10)
    } else {
        quiet
    };
    let base = ctx.events(FIRST_EVENTS);
    let rig = Rig::new(ctx, base, FIRST_EVENTS, &["e/0".to_owned()]).await?;
    add_inbox_source(&rig).await?;
    let mut kurirs = Vec::new();
    for _ in 0..processes {
        kurirs.push(UnderTest::kurir(&rig.db.url, &ctx.dir, &[]).await?);
    }
    tokio::time::sleep(settle).await;

    idle_cost(&mut r, &rig, &kurirs, window).await?;

    first_events_after_quiet(&rig, base, quiet).await?;
    let d = Deliveries::collect_events(&rig.recorder, 0..FIRST_EVENTS, 0..1);
    let ms: Vec<f64> = d.latencies.iter().map(|ns| *ns as f64 / 1e6).collect();
    let max = ms.iter().copied().fold(0.0, f64::max);
    r.metric("first_event_after_quiet_max", max, "ms");
    r.metric(
        "first_event_after_quiet_mean",
        ms.iter().sum::<f64>() / ms.len().max(1) as f64,
        "ms",
    );
    r.at_most(
        "first event after a quiet spell, max",
        max,
        FIRST_EVENT_MS,
        "ms",
    );
    r.notes.push(format!(
        "{processes} process(es) idle for {window:?} after {settle:?} to settle; then {} single \
         plain SQL INSERTs, each after {quiet:?} of quiet: {:?} ms",
        FIRST_EVENTS,
        ms.iter().map(|m| m.round()).collect::<Vec<_>>()
    ));
    if d.received < FIRST_EVENTS {
        r.notes.push(format!(
            "only {} of {FIRST_EVENTS} events arrived",
            d.received
        ));
    }
    let mut peak = 0u64;
    for k in kurirs {
        peak = peak.max(k.stop().await?.peak_rss_bytes);
    }
    r.metric("peak_rss", peak as f64 / 1e6, "MB");
    r.load_end = crate::machine::load_average();
    // No kurir of the rig's own: only the check that no event was lost is added.
    rig.finish(&mut r, 0).await?;
    Ok(r)
}

/// Writes [`FIRST_EVENTS`] events one by one, each after `quiet`, and waits for each to arrive
/// (30 s at most).
async fn first_events_after_quiet(rig: &Rig, base: u64, quiet: Duration) -> anyhow::Result<()> {
    for i in 0..FIRST_EVENTS {
        tokio::time::sleep(quiet).await;
        let n = base + i as u64;
        super::write(&rig.app, &Via::Sql, n..n + 1).await?;
        rig.recorder.committed(n, now_ns());
        let deadline = Instant::now() + Duration::from_secs(30);
        while rig.recorder.received() < (i + 1) as u64 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    Ok(())
}

/// What `kurirs` cost while idle for `window`: CPU and database statements per second.
async fn idle_cost(
    r: &mut ScenarioResult,
    rig: &Rig,
    kurirs: &[UnderTest],
    window: Duration,
) -> anyhow::Result<()> {
    let cpu = |kurirs: &[UnderTest]| kurirs.iter().map(|k| k.sample().cpu_seconds).sum::<f64>();
    let (tx_before, cpu_before) = (rig.db.transactions().await?, cpu(kurirs));
    tokio::time::sleep(window).await;
    let (tx_after, cpu_after) = (rig.db.transactions().await?, cpu(kurirs));
    let secs = window.as_secs_f64();
    let cpu_percent = (cpu_after - cpu_before) / secs * 100.0 / kurirs.len() as f64;
    r.metric("cpu_percent_of_a_core_per_process", cpu_percent, "%");
    if let (Some(before), Some(after)) = (tx_before, tx_after) {
        let per_s = (after - before) as f64 / secs;
        r.metric("statements_per_s", per_s, "/s");
        r.metric(
            "statements_per_s_per_process",
            per_s / kurirs.len() as f64,
            "/s",
        );
        r.at_most(
            "idle statements/s per process",
            per_s / kurirs.len() as f64,
            MOST_STATEMENTS_PER_S,
            "/s",
        );
    }
    Ok(())
}

/// An inbox source forwarding to the sink, so the inbox runner has a source to claim for.
async fn add_inbox_source(rig: &Rig) -> anyhow::Result<()> {
    let store = rig.db.store().await?;
    let created = NewSource {
        name: "idle".into(),
        scheme: "kurir".into(),
        secrets: vec![kurir_core::Secret::generate().expose().to_owned().into()],
        tolerance_seconds: None,
        forward_url: format!("{}/inbox", rig.sink.url()),
    }
    .validate(chrono::Utc::now())?;
    store.create_source(&created.source).await?;
    store.close().await;
    Ok(())
}
