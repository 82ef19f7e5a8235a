//! `api`: events published through kurir's HTTP API (issue 18), as teams that replace Svix
//! publish them: [`CONNECTIONS`] keep-alive connections posting `POST /v1/events` (about 300 B
//! each) as fast as kurir answers, to 1 and to 10 endpoints at the sink; then the same events in
//! `POST /v1/events/batch` requests of [`BATCH`]. Reported: events accepted/s (first answer to
//! last), deliveries/s at the sink (first answer to last receipt), delivered ÷ accepted, the
//! request's p50/p99, the raw-POST ceiling of the same run, CPU per 1,000 events, how busy the
//! whole machine's cores were from the first request to the last receipt; on PostgreSQL
//! also what its active backends waited on, sampled every [`SAMPLE_EVERY`].

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{api_event, kurir_concurrency, result, Ctx, Rig};
use crate::child::ADMIN_TOKEN;
use crate::clock::now_ns;
use crate::db::{AppPool, Backend};
use crate::report::ScenarioResult;
use crate::sink::Recorder;
use crate::stats::{percentiles, rate, Deliveries};

/// Concurrent client connections, as in the issue's comparison with Svix.
pub const CONNECTIONS: usize = 32;
/// Events per request of the batch variant.
pub const BATCH: usize = 100;
/// How often `pg_stat_activity` is sampled during a run.
const SAMPLE_EVERY: Duration = Duration::from_millis(50);

/// One request per event, or batches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Single,
    Batch(usize),
}

/// E=1 and E=10 one event per request, then E=1 in batches (or only `--endpoints`).
pub async fn run(ctx: &Ctx) -> anyhow::Result<Vec<ScenarioResult>> {
    let events = ctx.sizes.events;
    let runs = match ctx.sizes.endpoints {
        Some(e) => vec![(e, Mode::Single, events)],
        None => vec![
            (1, Mode::Single, events),
            // Ten deliveries per event: a fifth of the events keeps the run's length comparable.
            (10, Mode::Single, (events / 5).max(1)),
            (1, Mode::Batch(BATCH), events),
        ],
    };
    let mut out = Vec::new();
    for (endpoints, mode, n) in runs {
        out.push(one(ctx, n, endpoints, mode).await?);
    }
    Ok(out)
}

/// `events` events posted to kurir, each to `endpoints` endpoints.
async fn one(
    ctx: &Ctx,
    events: usize,
    endpoints: usize,
    mode: Mode,
) -> anyhow::Result<ScenarioResult> {
    let raw = ctx.raw_posts(kurir_concurrency(endpoints)).await?;
    let label = match mode {
        Mode::Single => format!("E={endpoints}, POST /v1/events"),
        Mode::Batch(b) => format!("E={endpoints}, POST /v1/events/batch of {b}"),
    };
    let mut r = result("api", label);
    let base = ctx.events(events);
    let paths: Vec<String> = (0..endpoints).map(|k| format!("e/{k}")).collect();
    let mut rig = Rig::new(ctx, base, events, &paths).await?;
    let base_url = rig.start_kurir(ctx).await?;
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = tokio::spawn(sample_waits(rig.app.clone(), sampling.clone()));
    let client = super::ceiling::kurir_like_client()?;
    let cpu_start = crate::machine::machine_cpu_ticks();
    let posted = post_all(client, base_url, rig.recorder.clone(), base, events, mode).await?;
    let expected = (events * endpoints) as u64;
    rig.wait_or_note(&mut r, expected, ctx.sizes.patience).await;
    r.record_busy(cpu_start);
    sampling.store(false, Ordering::Relaxed);
    let waits = sampler.await??;
    let d = Deliveries::collect(&rig.recorder, 0..endpoints);
    record(&mut r, &d, posted, raw, (events, endpoints), ctx.backend);
    r.metric("duplicates", rig.recorder.duplicates() as f64, "");
    record_profile(&mut r, &waits, events);
    r.notes.push(format!(
        "{CONNECTIONS} keep-alive connections; CPU figures are per 1,000 events; an event's 'commit' is when its answer arrived"
    ));
    r.rate_series = d.rate_series(d.first_commit, 0.25);
    r.latency_cdf = crate::stats::cdf(&d.latencies);
    rig.finish(&mut r, events).await?;
    r.load_end = crate::machine::load_average();
    Ok(r)
}

/// The figures and targets of one run of `events` events to `endpoints` endpoints.
fn record(
    r: &mut ScenarioResult,
    d: &Deliveries,
    posted: Posted,
    raw: f64,
    (events, endpoints): (usize, usize),
    backend: Backend,
) {
    let delivered = d.end_to_end_rate();
    let accepted = rate(
        events,
        posted.last_answer.saturating_sub(posted.first_answer),
    );
    let mut lat = posted.latencies;
    let lat = percentiles(&mut lat);
    r.metric("events", events as f64, "");
    r.metric("deliveries", d.received as f64, "");
    r.metric("accepted_events_per_s", accepted, "/s");
    r.metric("deliveries_per_s", delivered, "/s");
    let ratio = delivered / (accepted * endpoints as f64);
    r.metric("delivered_to_accepted", ratio, "");
    r.metric("request_p50", lat.p50, "ms");
    r.metric("request_p99", lat.p99, "ms");
    let e2e = d.latency();
    r.metric("answer_to_receipt_p50", e2e.p50, "ms");
    r.metric("answer_to_receipt_p99", e2e.p99, "ms");
    r.metric("raw_posts_per_s", raw, "/s");
    r.metric("ratio_to_raw_posts", delivered / raw, "");
    if endpoints == 1 && backend == Backend::Postgres {
        r.at_least("deliveries/s", delivered, 6_000.0, "/s");
        r.at_least("ratio to raw POSTs/s", delivered / raw, 0.12, "");
    }
    if endpoints > 1 {
        r.at_least("delivered ÷ accepted", ratio, 0.95, "");
    }
}

/// PostgreSQL's commits per event, waits and statements, from [`sample_waits`].
fn record_profile(r: &mut ScenarioResult, waits: &BTreeMap<String, u64>, events: usize) {
    let Some(samples) = waits.get("samples") else {
        return;
    };
    let commits = waits.get("transactions committed").copied().unwrap_or(0);
    r.metric(
        "postgres_commits_per_event",
        commits as f64 / events as f64,
        "",
    );
    r.notes.push(format!(
        "PostgreSQL's active backends, {samples} samples every {SAMPLE_EVERY:?}: waits: {}",
        summary(waits, "wait")
    ));
    r.notes
        .push(format!("statements: {}", summary(waits, "statement")));
}

/// What the clients saw.
struct Posted {
    first_answer: u64,
    last_answer: u64,
    /// Each request's time, ns.
    latencies: Vec<u64>,
}

/// Posts events `base .. base + count` from [`CONNECTIONS`] clients, recording when each event's
/// answer arrived as its commit.
async fn post_all(
    client: reqwest::Client,
    base_url: String,
    recorder: Arc<Recorder>,
    base: u64,
    count: usize,
    mode: Mode,
) -> anyhow::Result<Posted> {
    let per_request = match mode {
        Mode::Single => 1,
        Mode::Batch(b) => b,
    };
    let requests = count.div_ceil(per_request);
    let cursor = Arc::new(AtomicU64::new(0));
    let latencies = Arc::new(Mutex::new(Vec::with_capacity(requests)));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..CONNECTIONS {
        let (client, base_url, recorder, cursor, latencies) = (
            client.clone(),
            base_url.clone(),
            recorder.clone(),
            cursor.clone(),
            latencies.clone(),
        );
        tasks.spawn(async move {
            loop {
                let c = cursor.fetch_add(1, Ordering::Relaxed) as usize;
                if c >= requests {
                    return anyhow::Ok(());
                }
                let first = base + (c * per_request) as u64;
                let last = base + ((c + 1) * per_request).min(count) as u64;
                let t = now_ns();
                post(&client, &base_url, mode, first..last).await?;
                let at = now_ns();
                latencies.lock().unwrap().push(at - t);
                for n in first..last {
                    recorder.committed(n, at);
                }
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    let commits =
        (0..count).filter_map(|i| recorder.commit_of((base - recorder.base()) as usize + i));
    let (first_answer, last_answer) =
        commits.fold((u64::MAX, 0), |(lo, hi), t| (lo.min(t), hi.max(t)));
    let latencies = std::mem::take(&mut *latencies.lock().unwrap());
    Ok(Posted {
        first_answer,
        last_answer,
        latencies,
    })
}

/// One request: events `ids`, alone or as a batch; every event must be accepted.
async fn post(
    client: &reqwest::Client,
    base_url: &str,
    mode: Mode,
    ids: std::ops::Range<u64>,
) -> anyhow::Result<()> {
    let (url, body) = match mode {
        Mode::Single => (format!("{base_url}/v1/events"), api_event(ids.start)),
        Mode::Batch(_) => {
            let items: Vec<String> = ids.map(api_event).collect();
            (
                format!("{base_url}/v1/events/batch"),
                format!(r#"{{"events":[{}]}}"#, items.join(",")),
            )
        }
    };
    let resp = client
        .post(url)
        .bearer_auth(ADMIN_TOKEN)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await?;
    let status = resp.status();
    let text = resp.text().await?;
    anyhow::ensure!(status.is_success(), "the API answered {status}: {text}");
    if let Mode::Batch(_) = mode {
        anyhow::ensure!(
            !text.contains(r#""error""#),
            "an event of the batch was refused: {text}"
        );
    }
    Ok(())
}

/// Counts, every [`SAMPLE_EVERY`] while `running`, what the database's active backends wait on
/// (`wait …`: `wait_event_type:wait_event`, or `CPU` when none) and run (`statement …`: the
/// start of the query), plus the transactions committed meanwhile; empty on other backends
/// than PostgreSQL.
async fn sample_waits(
    app: AppPool,
    running: Arc<AtomicBool>,
) -> anyhow::Result<BTreeMap<String, u64>> {
    let mut counts = BTreeMap::new();
    let AppPool::Postgres(pool) = app else {
        return Ok(counts);
    };
    let commits = "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()";
    let first: i64 = sqlx::query_scalar(commits).fetch_one(&pool).await?;
    let mut samples = 0u64;
    while running.load(Ordering::Relaxed) {
        let rows: Vec<(Option<String>, Option<String>, String)> = sqlx::query_as(
            "SELECT wait_event_type, wait_event, left(regexp_replace(query, '\\s+', ' ', 'g'), 48) \
             FROM pg_stat_activity \
             WHERE datname = current_database() AND state = 'active' AND pid <> pg_backend_pid()",
        )
        .fetch_all(&pool)
        .await?;
        for (kind, event, query) in rows {
            let wait = match (kind, event) {
                (Some(k), Some(e)) => format!("{k}:{e}"),
                _ => "CPU".to_owned(),
            };
            *counts.entry(format!("wait {wait}")).or_default() += 1;
            *counts.entry(format!("statement {query}")).or_default() += 1;
        }
        samples += 1;
        tokio::time::sleep(SAMPLE_EVERY).await;
    }
    let last: i64 = sqlx::query_scalar(commits).fetch_one(&pool).await?;
    // Statistics reach pg_stat_database up to a second late: a floor, not an exact count.
    counts.insert(
        "transactions committed".into(),
        (last - first).max(0) as u64,
    );
    counts.insert("samples".into(), samples);
    Ok(counts)
}

/// One kind of [`sample_waits`]' counts (`wait` or `statement`), most frequent first.
fn summary(counts: &BTreeMap<String, u64>, kind: &str) -> String {
    let mut v: Vec<(&str, u64)> = counts
        .iter()
        .filter_map(|(k, n)| Some((k.strip_prefix(kind)?.strip_prefix(' ')?, *n)))
        .collect();
    v.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
    let parts: Vec<String> = v.iter().map(|(k, n)| format!("{k} {n}")).collect();
    parts.join(", ")
}
