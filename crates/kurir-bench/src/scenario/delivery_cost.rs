//! `delivery-cost` (issue 27, item 4): the machine's CPU per delivered event, and delivered/s
//! against the application's own insert-only ceiling, both in one run.
//!
//! Events go in through plain SQL (transactions of [`PER_TX`] README-shaped `INSERT`s from
//! [`WRITERS`] connections) and through the API (`POST /v1/events`, one event per request from
//! the `api` scenario's connections), to E=1 and E=10 fast endpoints at the sink. A delivery's
//! cost is the CPU of the kurir process plus the database's work that is not the application's:
//! see [`meter`] for how each server's processes or threads are told apart. The application's
//! own `INSERT`s are measured alone, the same transactions with kurir not running, before the
//! delivery runs and after them: their rate is the ceiling the machine gives the application,
//! and their database CPU per event the application's own cost.
//!
//! On PostgreSQL the rows kurir wrote per delivery are counted from `pg_stat_user_tables`, read
//! once kurir has stopped (a backend reports its counts at the latest as it exits), and the
//! statements it ran per delivery from `pg_stat_statements` when the server loads it.

mod meter;
mod statements;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use meter::{Meter, Owner, Shares};

use super::{produce, result, Ctx, Pace, Rig, Via};
use crate::clock::now_ns;
use crate::db::{each_pool, AppPool, Backend, EVENT_TYPE, PAYLOAD};
use crate::machine;
use crate::report::ScenarioResult;
use crate::sink::{event_id, Recorder};
use crate::stats::Deliveries;

/// `INSERT`s per application transaction.
pub const PER_TX: usize = 10;
/// The application's connections writing at once.
pub const WRITERS: usize = 4;
/// The application's pool (the rig's).
const APP_POOL: u32 = 8;
/// The scenario's name in the report.
const NAME: &str = "delivery-cost";

/// How events reach kurir.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Path {
    Sql,
    Api,
}

/// The two ceilings around the four delivery runs, then the ratios between them.
pub async fn run(ctx: &Ctx) -> anyhow::Result<Vec<ScenarioResult>> {
    let events = ctx.sizes.events;
    // A smoke run (a few hundred events) checks the harness: E=1 only, one ceiling.
    let smoke = events <= 1_000;
    let mut ceilings = vec![ceiling(ctx, events, "before").await?];
    let mut runs = Vec::new();
    for (path, e) in [
        (Path::Sql, 1),
        (Path::Sql, 10),
        (Path::Api, 1),
        (Path::Api, 10),
    ] {
        if smoke && e > 1 {
            continue;
        }
        // Ten deliveries per event: a fifth of the events keeps the run's length comparable.
        let n = if e == 1 { events } else { (events / 5).max(1) };
        runs.push(one(ctx, path, e, n).await?);
    }
    if !smoke {
        ceilings.push(ceiling(ctx, events, "after").await?);
    }
    compare(&mut runs, &ceilings, ctx.backend);
    let after = if smoke { None } else { ceilings.pop() };
    let mut out = ceilings;
    out.extend(runs);
    out.extend(after);
    Ok(out)
}

/// Adds to each delivery run the ceiling and the application's own cost of the same run, the
/// ratio, and the targets.
fn compare(runs: &mut [ScenarioResult], ceilings: &[ScenarioResult], backend: Backend) {
    // The higher of the two ceilings: the ratio is not flattered by a slow moment of the
    // machine's during one of them.
    let ceiling = ceilings
        .iter()
        .filter_map(|c| c.get("events_per_s"))
        .fold(0.0, f64::max);
    let alone: Vec<f64> = (ceilings.iter())
        .filter_map(|c| c.get("app_insert_core_ms_per_event"))
        .collect();
    let alone = alone.iter().sum::<f64>() / alone.len().max(1) as f64;
    for r in runs {
        let delivered = r.get("events_delivered_per_s").unwrap_or(0.0);
        let ratio = delivered / ceiling.max(f64::MIN_POSITIVE);
        r.metric("insert_ceiling_events_per_s", ceiling, "/s");
        r.metric("ratio_to_insert_ceiling", ratio, "");
        r.metric("app_insert_alone_core_ms_per_event", alone, "core-ms");
        if backend == Backend::Postgres && r.label == "SQL E=1" {
            let cost = r.get("core_ms_per_delivery").unwrap_or(f64::INFINITY);
            r.at_most(
                "kurir + its database work per delivery",
                cost,
                0.15,
                "core-ms",
            );
            r.at_least("delivered/s ÷ insert-only ceiling", ratio, 0.5, "");
        }
    }
}

/// The application's transactions alone, kurir not running: events/s and their database CPU.
async fn ceiling(ctx: &Ctx, events: usize, when: &str) -> anyhow::Result<ScenarioResult> {
    let mut r = result(NAME, format!("insert-only ceiling ({when})"));
    let base = ctx.events(events);
    let rig = Rig::new(ctx, base, events, &["e/0".to_owned()]).await?;
    let monitor = rig.db.app_pool(1).await?;
    let meter = Meter::start(monitor.clone(), &rig.app, APP_POOL).await?;
    let (own, busy) = (machine::own_cpu_seconds(), machine::machine_cpu_ticks());
    let rate = write_sql(&rig.app, &rig.recorder, base, events).await?;
    let shares = meter.stop().await?;
    let harness_ms = (machine::own_cpu_seconds() - own) * 1000.0;
    r.record_busy(busy);
    r.metric("events", events as f64, "");
    r.metric("events_per_s", rate, "/s");
    let per_event = |ms: f64| ms / events.max(1) as f64;
    let app_ms = match ctx.backend {
        // In-process: the application's SQLite work is the harness's.
        Backend::Sqlite => harness_ms,
        Backend::Postgres | Backend::Mysql => shares.core_ms(Owner::Writer),
    };
    r.metric("app_insert_core_ms_per_event", per_event(app_ms), "core-ms");
    r.metric(
        "harness_core_ms_per_event",
        per_event(harness_ms),
        "core-ms",
    );
    note_unread(&mut r, &shares);
    r.notes.push(format!(
        "transactions of {PER_TX} plain SQL INSERTs from {WRITERS} connections, kurir not running; \
         app_insert: the database's CPU for them (SQLite: the harness process)"
    ));
    monitor.close().await;
    rig.finish(&mut r, 0).await?;
    r.load_end = machine::load_average();
    Ok(r)
}

/// `events` events through `path` to `endpoints` endpoints while kurir runs.
async fn one(
    ctx: &Ctx,
    path: Path,
    endpoints: usize,
    events: usize,
) -> anyhow::Result<ScenarioResult> {
    let name = match path {
        Path::Sql => "SQL",
        Path::Api => "API",
    };
    let mut r = result(NAME, format!("{name} E={endpoints}"));
    let base = ctx.events(events);
    let paths: Vec<String> = (0..endpoints).map(|k| format!("e/{k}")).collect();
    let mut rig = Rig::new(ctx, base, events, &paths).await?;
    let base_url = rig.start_kurir(ctx).await?;
    let monitor = rig.db.app_pool(1).await?;
    let counts_before = Counts::read(&monitor).await?;
    let meter = Meter::start(monitor.clone(), &rig.app, APP_POOL).await?;
    let kurir_cpu = || rig.kurir.as_ref().map_or(0.0, |k| k.sample().cpu_seconds);
    let (kurir_before, own, busy) = (
        kurir_cpu(),
        machine::own_cpu_seconds(),
        machine::machine_cpu_ticks(),
    );
    send(&rig, path, base_url, base, events).await?;
    let expected = (events * endpoints) as u64;
    rig.wait_or_note(&mut r, expected, ctx.sizes.patience).await;
    // Until kurir has recorded every delivery: its completions are part of the cost.
    wait_recorded(&mut r, &monitor, expected, ctx.sizes.patience).await?;
    let shares = meter.stop().await?;
    let kurir_ms = (kurir_cpu() - kurir_before) * 1000.0;
    let harness_ms = (machine::own_cpu_seconds() - own) * 1000.0;
    r.record_busy(busy);
    let d = Deliveries::collect(&rig.recorder, 0..endpoints);
    let rate = d.end_to_end_rate();
    r.metric("events", events as f64, "");
    r.metric("deliveries", d.received as f64, "");
    r.metric("duplicates", rig.recorder.duplicates() as f64, "");
    r.metric("deliveries_per_s", rate, "/s");
    r.metric("events_delivered_per_s", rate / endpoints as f64, "/s");
    record_cost(&mut r, &shares, kurir_ms, harness_ms, d.received, events);
    if let Some(k) = rig.kurir.take() {
        k.stop().await?;
    }
    if let AppPool::Postgres(pool) = &monitor {
        wait_backends_gone(pool, &shares.harness_ids, ctx.sizes.patience).await?;
        let app_transactions = match path {
            Path::Sql => events.div_ceil(PER_TX) as i64,
            Path::Api => 0,
        };
        (counts_before.record(&mut r, &monitor, app_transactions, d.received)).await?;
    }
    r.notes.push(match path {
        Path::Sql => format!(
            "{events} events in transactions of {PER_TX} plain SQL INSERTs from {WRITERS} connections"
        ),
        Path::Api => format!(
            "{events} events, one per POST /v1/events, from {} connections; the INSERTs are kurir's",
            super::api::CONNECTIONS
        ),
    });
    monitor.close().await;
    rig.finish(&mut r, 0).await?;
    r.load_end = machine::load_average();
    Ok(r)
}

/// Writes events `base .. base + events` through `path`.
async fn send(
    rig: &Rig,
    path: Path,
    base_url: String,
    base: u64,
    events: usize,
) -> anyhow::Result<()> {
    match path {
        Path::Sql => write_sql(&rig.app, &rig.recorder, base, events).await?,
        Path::Api => {
            let via = Via::Api(super::ceiling::kurir_like_client()?, base_url);
            let pace = Pace {
                tx_size: 1,
                producers: super::api::CONNECTIONS,
                rate: None,
            };
            produce(&rig.app, &via, &rig.recorder, base, events, pace).await?
        }
    };
    Ok(())
}

/// PostgreSQL's counts of rows and statements, read before a run and after kurir stopped.
struct Counts {
    rows: Vec<(String, [i64; 4])>,
    statements: Option<statements::Counts>,
}

impl Counts {
    async fn read(monitor: &AppPool) -> anyhow::Result<Self> {
        let statements = match monitor {
            AppPool::Postgres(pool) => statements::read(pool).await?,
            _ => None,
        };
        Ok(Self {
            rows: table_writes(monitor).await?,
            statements,
        })
    }

    /// Adds to `r` what was written and run since `self` was read, per delivery.
    async fn record(
        self,
        r: &mut ScenarioResult,
        monitor: &AppPool,
        app_transactions: i64,
        deliveries: usize,
    ) -> anyhow::Result<()> {
        let after = Self::read(monitor).await?;
        record_writes(r, &self.rows, &after.rows, deliveries);
        if let (Some(before), Some(after)) = (self.statements, after.statements) {
            statements::record(r, &before, &after, app_transactions, deliveries);
        }
        Ok(())
    }
}

/// The CPU figures of a delivery run, per delivery.
fn record_cost(
    r: &mut ScenarioResult,
    shares: &Shares,
    kurir_ms: f64,
    harness_ms: f64,
    deliveries: usize,
    events: usize,
) {
    let per = |ms: f64| ms / deliveries.max(1) as f64;
    let db_ms = shares.core_ms(Owner::Kurir);
    r.metric("core_ms_per_delivery", per(kurir_ms + db_ms), "core-ms");
    r.metric(
        "kurir_process_core_ms_per_delivery",
        per(kurir_ms),
        "core-ms",
    );
    r.metric("kurir_db_core_ms_per_delivery", per(db_ms), "core-ms");
    let writer = shares.core_ms(Owner::Writer) / events.max(1) as f64;
    r.metric("app_insert_core_ms_per_event", writer, "core-ms");
    r.metric(
        "autovacuum_core_ms_per_delivery",
        per(shares.core_ms(Owner::Vacuum)),
        "core-ms",
    );
    let server = per(shares.core_ms(Owner::Server));
    r.metric("db_server_shared_core_ms_per_delivery", server, "core-ms");
    r.metric("harness_core_ms_per_delivery", per(harness_ms), "core-ms");
    note_unread(r, shares);
    r.notes.push(
        "core_ms_per_delivery: the kurir process plus the database's work for kurir's own \
         connections (SQLite: in kurir's process); apart: the application's INSERTs (the \
         writer's connections), autovacuum, the server's shared processes (WAL writer, \
         checkpointer; MySQL: its background threads), the harness (sink and writers)"
            .to_owned(),
    );
}

fn note_unread(r: &mut ScenarioResult, shares: &Shares) {
    if let Some(why) = &shares.unread {
        r.notes.push(format!("database CPU not read: {why}"));
    }
}

/// Events `base .. base + count` in transactions of [`PER_TX`] plain SQL `INSERT`s from
/// [`WRITERS`] connections, each commit recorded; returns events/s, first commit to last.
async fn write_sql(
    app: &AppPool,
    recorder: &Arc<Recorder>,
    base: u64,
    count: usize,
) -> anyhow::Result<f64> {
    let chunks = count.div_ceil(PER_TX);
    let cursor = Arc::new(AtomicU64::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..WRITERS {
        let (app, recorder, cursor) = (app.clone(), recorder.clone(), cursor.clone());
        tasks.spawn(async move {
            loop {
                let c = cursor.fetch_add(1, Ordering::Relaxed) as usize;
                if c >= chunks {
                    return anyhow::Ok(());
                }
                let first = base + (c * PER_TX) as u64;
                let last = base + ((c + 1) * PER_TX).min(count) as u64;
                insert_tx(&app, first..last).await?;
                let at = now_ns();
                for n in first..last {
                    recorder.committed(n, at);
                }
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    let offset = (base - recorder.base()) as usize;
    let commits = (0..count).filter_map(|i| recorder.commit_of(offset + i));
    let (lo, hi) = commits.fold((u64::MAX, 0), |(lo, hi), t| (lo.min(t), hi.max(t)));
    Ok(crate::stats::rate(count, hi.saturating_sub(lo)))
}

/// One application transaction of the README's `INSERT`, one per event of `ids` (the event id
/// given, so the sink knows each delivery).
async fn insert_tx(app: &AppPool, ids: std::ops::Range<u64>) -> anyhow::Result<()> {
    let values = match app {
        AppPool::Postgres(_) => "($1, $2, 'order', $3, $4::json)",
        AppPool::Sqlite(_) => "(?1, ?2, 'order', ?3, ?4)",
        AppPool::Mysql(_) => "(?, ?, 'order', ?, ?)",
    };
    let sql = format!(
        "INSERT INTO kurir_outbox (event_id, event_type, aggregate_type, aggregate_id, payload) \
         VALUES {values}"
    );
    each_pool!(app, pool => {
        let mut tx = pool.begin().await?;
        for n in ids {
            sqlx::query(&sql)
                .bind(event_id(n))
                .bind(EVENT_TYPE)
                .bind(n.to_string())
                .bind(PAYLOAD)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
    });
    Ok(())
}

/// Waits until kurir has recorded `expected` deliveries as sent; a note in `r` if it does not
/// within `patience`.
async fn wait_recorded(
    r: &mut ScenarioResult,
    monitor: &AppPool,
    expected: u64,
    patience: Duration,
) -> anyhow::Result<()> {
    let sql = "SELECT count(*) FROM kurir_deliveries WHERE status = 'sent'";
    let deadline = Instant::now() + patience;
    loop {
        let sent: i64 = each_pool!(monitor, pool => sqlx::query_scalar(sql).fetch_one(pool).await?);
        if sent as u64 >= expected {
            return Ok(());
        }
        if Instant::now() > deadline {
            r.notes.push(format!(
                "gave up after {patience:?}: {sent} of {expected} deliveries recorded as sent"
            ));
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until no connection but the harness's own (`harness`, backend pids) is left on the
/// database: kurir's backends have exited, and with that reported their row counts.
async fn wait_backends_gone(
    pool: &sqlx::PgPool,
    harness: &[i64],
    patience: Duration,
) -> anyhow::Result<()> {
    let sql = "SELECT count(*) FROM pg_stat_activity \
               WHERE datname = current_database() AND backend_type = 'client backend' \
                 AND pid <> ALL($1)";
    let harness: Vec<i32> = harness.iter().map(|&p| p as i32).collect();
    let deadline = Instant::now() + patience;
    while sqlx::query_scalar::<_, i64>(sql)
        .bind(&harness)
        .fetch_one(pool)
        .await?
        > 0
    {
        anyhow::ensure!(Instant::now() < deadline, "kurir's connections outlived it");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// Per kurir table: rows inserted, updated (of them HOT) and deleted so far (PostgreSQL);
/// empty elsewhere.
async fn table_writes(monitor: &AppPool) -> anyhow::Result<Vec<(String, [i64; 4])>> {
    let AppPool::Postgres(pool) = monitor else {
        return Ok(Vec::new());
    };
    let rows: Vec<(String, i64, i64, i64, i64)> = sqlx::query_as(
        "SELECT relname::text, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del \
         FROM pg_stat_user_tables WHERE relname LIKE 'kurir%' ORDER BY relname",
    )
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(t, i, u, h, d)| (t, [i, u, h, d]))
        .collect())
}

/// Rows kurir wrote per delivery between `before` and `after`, all tables but the outbox's
/// inserts (the application's, or on the API path kurir's ingest of the event itself), and
/// the tables one by one in a note.
fn record_writes(
    r: &mut ScenarioResult,
    before: &[(String, [i64; 4])],
    after: &[(String, [i64; 4])],
    deliveries: usize,
) {
    let per = |n: i64| n as f64 / deliveries.max(1) as f64;
    let mut total = 0;
    let mut parts = Vec::new();
    for (table, a) in after {
        let b = (before.iter().find(|(t, _)| t == table)).map_or([0; 4], |(_, b)| *b);
        let [ins, upd, hot, del] = [0, 1, 2, 3].map(|i| a[i] - b[i]);
        let ins_by_kurir = if table == "kurir_outbox" { 0 } else { ins };
        total += ins_by_kurir + upd + del;
        if ins + upd + del > 0 {
            parts.push(format!(
                "{table}: {:.2} inserted, {:.2} updated ({:.2} HOT), {:.2} deleted",
                per(ins),
                per(upd),
                per(hot),
                per(del)
            ));
        }
    }
    r.metric("row_writes_per_delivery", per(total), "");
    r.notes.push(format!(
        "rows per delivery (pg_stat_user_tables, read after kurir stopped; outbox inserts not \
         counted in row_writes_per_delivery): {}",
        parts.join("; ")
    ));
}
