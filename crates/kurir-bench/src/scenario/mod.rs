//! The scenarios of issue 7 (and issue 11's `idle`, issue 16's `soak`, issue 32's `chaos` and `noisy`), one module each, and what they share: the [`Ctx`] of a run and the
//! [`Rig`] (fresh database, sink, endpoints, kurir under test) most of them stand up.

pub mod api;
pub mod app_cost;
pub mod backlog;
pub mod ceiling;
pub mod chaos;
pub mod delivery_cost;
pub mod endpoints;
pub mod idle;
pub mod inbox;
pub mod isolation;
pub mod latency;
pub mod noisy;
pub mod ordered;
pub mod prune;
pub mod scale_out;
pub mod soak;
pub mod subscribers;
pub mod throughput;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kurir::endpoint::NewEndpoint;

use crate::child::{UnderTest, ADMIN_TOKEN};
use crate::clock::now_ns;
use crate::db::{AppPool, Backend, Database, EVENT_TYPE, PAYLOAD};
use crate::machine::{self, ProcSample};
use crate::report::ScenarioResult;
use crate::sink::{event_id, Recorder, Sink};

/// The key kurir encrypts stored secrets with in the scenarios that set it, and the harness
/// creates endpoints with: processes sharing a database need the same one, and endpoints
/// created with it need no sealing at kurir's start.
pub const ENCRYPTION_KEY: &str = "a3VyaXItYmVuY2gtc2NhbGUtb3V0LWtleS0zMmJ5dGU=";

/// The settings that give kurir [`ENCRYPTION_KEY`].
pub fn with_encryption_key() -> [(&'static str, String); 1] {
    [("KURIR_ENCRYPTION_KEY", ENCRYPTION_KEY.to_owned())]
}

/// kurir's default cap on concurrent requests to one endpoint (`max_in_flight`).
pub const PER_ENDPOINT: usize = kurir::endpoint::DEFAULT_MAX_IN_FLIGHT as usize;
/// kurir's default cap on concurrent requests per process (`KURIR_MAX_CONCURRENCY`).
pub const PER_PROCESS: usize = 256;

/// How many requests kurir has in flight at most with `endpoints` endpoints, by default.
pub fn kurir_concurrency(endpoints: usize) -> usize {
    (endpoints * PER_ENDPOINT).min(PER_PROCESS)
}

/// Sizes of a run.
#[derive(Clone, Debug)]
pub struct Sizes {
    /// Events per throughput run.
    pub events: usize,
    /// Only this endpoint count in `throughput` (default: 1 and 10).
    pub endpoints: Option<usize>,
    /// Length of each steady-rate phase of `latency`.
    pub duration: Duration,
    /// Pending deliveries of `backlog`.
    pub backlog: usize,
    /// Length of each ceiling measurement.
    pub ceiling: Duration,
    /// Signed requests of `inbox`.
    pub inbox_requests: usize,
    /// Events of each `isolation` run (each goes to 10 endpoints).
    pub isolation_events: usize,
    /// Old rows (events, deliveries, attempts) that `prune` seeds for kurir to prune.
    pub prune_rows: usize,
    /// The most events of an `ordered` run (the one with 10,000 aggregates).
    pub ordered_events: usize,
    /// Longest wait for deliveries before a scenario gives up.
    pub patience: Duration,
    /// How long `chaos` writes (and brings faults).
    pub chaos: Duration,
}

/// Figures one scenario leaves for another in the same run.
#[derive(Debug, Default)]
pub struct Shared {
    /// Raw POSTs/s by concurrency (from `ceiling`).
    pub raw_posts: BTreeMap<usize, f64>,
    /// Deliveries/s with one endpoint (from `throughput`).
    pub throughput_one: Option<f64>,
}

/// One database's run.
pub struct Ctx {
    /// The backend.
    pub backend: Backend,
    /// The server to create databases on (PostgreSQL's or MySQL's).
    pub server_url: String,
    /// Where logs and SQLite files go.
    pub dir: PathBuf,
    /// Sizes.
    pub sizes: Sizes,
    /// Carried between scenarios.
    pub shared: Mutex<Shared>,
    next_event: AtomicU64,
}

impl Ctx {
    /// A context for `backend`, whose first event is numbered `first_event`.
    pub fn new(
        backend: Backend,
        server_url: String,
        dir: PathBuf,
        sizes: Sizes,
        first_event: u64,
    ) -> Self {
        Self {
            backend,
            server_url,
            dir,
            sizes,
            shared: Mutex::default(),
            next_event: AtomicU64::new(first_event),
        }
    }

    /// Reserves `n` event numbers, unique in this run.
    pub fn events(&self, n: usize) -> u64 {
        self.next_event.fetch_add(n as u64, Ordering::Relaxed)
    }

    /// A fresh database.
    pub async fn database(&self) -> anyhow::Result<Database> {
        Database::create(self.backend, &self.server_url, &self.dir).await
    }

    /// Raw POSTs/s at `concurrency`, measured now unless `ceiling` already did in this run.
    pub async fn raw_posts(&self, concurrency: usize) -> anyhow::Result<f64> {
        if let Some(v) = self.shared.lock().unwrap().raw_posts.get(&concurrency) {
            return Ok(*v);
        }
        let v = ceiling::raw_posts(concurrency, self.sizes.ceiling).await?;
        self.shared.lock().unwrap().raw_posts.insert(concurrency, v);
        Ok(v)
    }
}

/// Adds to each of `runs` its `deliveries_per_s` divided by the first run's, as `key`: the
/// figure that counts on this shared machine is the ratio within one run.
pub fn ratio_to_first(runs: &mut [ScenarioResult], key: &str) {
    let first = runs.first().and_then(|r| r.get("deliveries_per_s"));
    let first = first.unwrap_or(0.0).max(f64::MIN_POSITIVE);
    for r in runs {
        let rate = r.get("deliveries_per_s").unwrap_or(0.0);
        r.metric(key, rate / first, "");
    }
}

/// A started result with its load average taken.
pub fn result(scenario: &'static str, label: impl Into<String>) -> ScenarioResult {
    ScenarioResult {
        scenario,
        label: label.into(),
        load_start: machine::load_average(),
        ..Default::default()
    }
}

/// Everything a delivery scenario stands up: a fresh database with `endpoints` endpoints at
/// the sink, the application's pool, and (once started) kurir.
pub struct Rig {
    /// The database.
    pub db: Database,
    /// The application's pool.
    pub app: AppPool,
    /// What the sink saw.
    pub recorder: Arc<Recorder>,
    /// The sink.
    pub sink: Sink,
    /// kurir, once started.
    pub kurir: Option<UnderTest>,
    /// Endpoint ids, in index order.
    pub endpoint_ids: Vec<String>,
    /// kurir's resource use when the measurement started.
    pub before: ProcSample,
    /// PostgreSQL's and this process's CPU seconds when kurir started.
    pub cpu_before: (f64, f64),
    backend: Backend,
}

impl Rig {
    /// A fresh database with one endpoint per path (`e/0`, `slow/9`, …) and room for `events`
    /// events from `base`.
    pub async fn new(
        ctx: &Ctx,
        base: u64,
        events: usize,
        paths: &[String],
    ) -> anyhow::Result<Self> {
        let db = ctx.database().await?;
        let recorder = Recorder::new(base, events, paths.len());
        let sink = Sink::start(recorder.clone()).await?;
        let store = db.store().await?;
        let mut endpoint_ids = Vec::new();
        for path in paths {
            let e = store
                .create_endpoint(NewEndpoint::new(format!("{}/{path}", sink.url())))
                .await?;
            endpoint_ids.push(e.id.as_str().to_owned());
        }
        store.close().await;
        let app = db.app_pool(8).await?;
        Ok(Self {
            db,
            app,
            recorder,
            sink,
            kurir: None,
            endpoint_ids,
            before: ProcSample::default(),
            cpu_before: (0.0, 0.0),
            backend: ctx.backend,
        })
    }

    /// Starts kurir with default settings; returns its base URL.
    pub async fn start_kurir(&mut self, ctx: &Ctx) -> anyhow::Result<String> {
        self.start_kurir_with(ctx, &[]).await
    }

    /// Starts kurir with `settings` (environment variables) added; returns its base URL.
    pub async fn start_kurir_with(
        &mut self,
        ctx: &Ctx,
        settings: &[(&str, String)],
    ) -> anyhow::Result<String> {
        let k = UnderTest::kurir(&self.db.url, &ctx.dir, settings).await?;
        self.before = k.sample();
        self.cpu_before = (machine::postgres_cpu_seconds(), machine::own_cpu_seconds());
        let base_url = k.base_url.clone();
        self.kurir = Some(k);
        Ok(base_url)
    }

    /// Waits until the sink has `count` first deliveries, or `patience` passes; `false` then.
    pub async fn wait_for(&self, count: u64, patience: Duration) -> bool {
        let deadline = Instant::now() + patience;
        while self.recorder.received() < count {
            if Instant::now() > deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        true
    }

    /// [`Rig::wait_for`] `count` deliveries; a note in `r` if they did not all arrive.
    pub async fn wait_or_note(&self, r: &mut ScenarioResult, count: u64, patience: Duration) {
        if !self.wait_for(count, patience).await {
            r.notes.push(format!(
                "gave up after {patience:?}: {} of {count} deliveries arrived",
                self.recorder.received()
            ));
        }
    }

    /// Adds to `r` the target that no event was lost (see [`AppPool::lost_events`]).
    pub async fn record_lost_events(&self, r: &mut ScenarioResult) -> anyhow::Result<()> {
        let lost = self.app.lost_events().await?;
        r.at_most("events lost", lost as f64, 0.0, "");
        Ok(())
    }

    /// Stops kurir and adds its peak RSS and CPU per 1,000 `units` to `r`, and whether an event
    /// was lost; drops the database.
    pub async fn finish(mut self, r: &mut ScenarioResult, units: usize) -> anyhow::Result<()> {
        if let Some(k) = self.kurir.take() {
            let (pg, own) = (machine::postgres_cpu_seconds(), machine::own_cpu_seconds());
            let last = k.stop().await?;
            add_process_figures(r, self.before, last, units);
            if units > 0 {
                let per_1000 = |s: f64| s / units as f64 * 1000.0;
                if self.backend == Backend::Postgres {
                    r.metric(
                        "postgres_cpu_s_per_1000",
                        per_1000(pg - self.cpu_before.0),
                        "s",
                    );
                }
                r.metric(
                    "harness_cpu_s_per_1000",
                    per_1000(own - self.cpu_before.1),
                    "s",
                );
            }
        }
        self.record_lost_events(r).await?;
        self.sink.stop();
        self.app.close().await;
        self.db.remove().await
    }
}

/// Peak RSS, CPU seconds per 1,000 units, and the RSS target.
pub fn add_process_figures(
    r: &mut ScenarioResult,
    before: ProcSample,
    last: ProcSample,
    units: usize,
) {
    let peak_mb = last.peak_rss_bytes as f64 / 1e6;
    let cpu = (last.cpu_seconds - before.cpu_seconds).max(0.0);
    r.metric("peak_rss", peak_mb, "MB");
    r.metric("cpu_seconds", cpu, "s");
    if units > 0 {
        r.metric("cpu_s_per_1000", cpu / units as f64 * 1000.0, "s");
    }
    r.at_most("peak RSS", peak_mb, 150.0, "MB");
}

/// How events reach the outbox.
#[derive(Clone)]
pub enum Via {
    /// `kurir::outbox::enqueue` in the application's transaction.
    Rust,
    /// The same, the events spread over this many aggregates (event `n` is about `n % a`).
    Grouped(u64),
    /// One plain SQL `INSERT` per event, autocommitted, on the application's own connection.
    Sql,
    /// The same, each event addressed to one of this many subscribers
    /// ([`subscribers::subscriber_id`]), picked at random.
    SqlToSubscribers(u64),
    /// `POST /v1/events` on kurir's admin API.
    Api(reqwest::Client, String),
}

/// How to produce events.
#[derive(Clone, Copy, Debug)]
pub struct Pace {
    /// Events per transaction (Rust only).
    pub tx_size: usize,
    /// Concurrent producers (connections).
    pub producers: usize,
    /// Events per second, or as fast as possible.
    pub rate: Option<f64>,
}

/// Writes events `base .. base + count` as `pace` says, recording each commit; returns the
/// enqueue rate (events/s from the first commit to the last).
pub async fn produce(
    app: &AppPool,
    via: &Via,
    recorder: &Arc<Recorder>,
    base: u64,
    count: usize,
    pace: Pace,
) -> anyhow::Result<f64> {
    let chunk = match via {
        Via::Rust | Via::Grouped(_) => pace.tx_size.max(1),
        Via::Sql | Via::SqlToSubscribers(_) | Via::Api(..) => 1,
    };
    let chunks = count.div_ceil(chunk);
    let cursor = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..pace.producers.max(1) {
        let (app, via, recorder, cursor) =
            (app.clone(), via.clone(), recorder.clone(), cursor.clone());
        tasks.spawn(async move {
            loop {
                let c = cursor.fetch_add(1, Ordering::Relaxed) as usize;
                if c >= chunks {
                    return anyhow::Ok(());
                }
                if let Some(rate) = pace.rate {
                    let due = start + Duration::from_secs_f64((c * chunk) as f64 / rate);
                    tokio::time::sleep_until(due.into()).await;
                }
                let first = base + (c * chunk) as u64;
                let last = (base + ((c + 1) * chunk).min(count) as u64).max(first);
                write(&app, &via, first..last).await?;
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
    let firsts =
        (0..count).filter_map(|i| recorder.commit_of((base - recorder.base()) as usize + i));
    let (lo, hi) = firsts.fold((u64::MAX, 0), |(lo, hi), t| (lo.min(t), hi.max(t)));
    Ok(crate::stats::rate(count, hi.saturating_sub(lo)))
}

/// The body of `POST /v1/events` for event `n`: about 300 bytes, as the application's events.
pub fn api_event(n: u64) -> String {
    format!(
        r#"{{"event_type":"{EVENT_TYPE}","event_id":"{}","aggregate_type":"order","aggregate_id":"{n}","data":{PAYLOAD}}}"#,
        event_id(n)
    )
}

async fn write(app: &AppPool, via: &Via, ids: std::ops::Range<u64>) -> anyhow::Result<()> {
    match via {
        Via::Rust => app.enqueue(ids, None).await,
        Via::Grouped(a) => app.enqueue(ids, Some(*a)).await,
        Via::Sql => {
            for n in ids {
                app.insert_plain(n, None).await?;
            }
            Ok(())
        }
        Via::SqlToSubscribers(count) => {
            for n in ids {
                // A multiplicative hash of the event number: spread like random picks, and the
                // same in every run.
                let s = n.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
                let id = subscribers::subscriber_id(s % count);
                app.insert_plain(n, Some(&id)).await?;
            }
            Ok(())
        }
        Via::Api(client, base_url) => {
            for n in ids {
                let body = api_event(n);
                let resp = client
                    .post(format!("{base_url}/v1/events"))
                    .bearer_auth(ADMIN_TOKEN)
                    .header("content-type", "application/json")
                    .body(body)
                    .send()
                    .await?;
                anyhow::ensure!(
                    resp.status().is_success(),
                    "POST /v1/events answered {}",
                    resp.status()
                );
            }
            Ok(())
        }
    }
}
