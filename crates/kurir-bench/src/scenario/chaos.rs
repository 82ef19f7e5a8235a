//! `chaos` (issue 32, item 6): the soak that found issue 32, kept so anyone can rerun it on any
//! database. Three `kurir serve` processes share one database; a writer inserts events by plain
//! SQL at a bounded rate; three partners take every event (healthy; 30 % random `500`s; 10 %
//! answers after 3 s); and a fault comes every period, in turn:
//!
//! 1. SIGKILL of one process, then a restart;
//! 2. the partners refusing connections (listener closed, connections cut) for half a period;
//! 3. SIGSTOP of one process for half a period, then SIGCONT.
//!
//! A database restart is not among them: the database server is shared with whatever else runs
//! on the machine (other tests, other benchmarks), so the scenario does not stop it.
//!
//! After the writer stops, the run waits for every delivery, then prints what was written and
//! delivered, each duplicate classified by the window of docs/reliability.md that explains it,
//! what was lost (dead-lettered, or never fanned out) and stuck (neither delivered nor lost when
//! the patience ran out), and the longest gap between two deliveries per partner while the
//! writer ran. A lost or stuck event fails the run.
//!
//! The timeouts, lease margin, retry delays and breaker cool-down are shortened so that what a
//! killed process held comes back within seconds: the run is about faults, not about waiting.

mod partner;

pub use partner::{Partners, Shape};

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kurir::endpoint::NewEndpoint;
use tokio_util::sync::CancellationToken;

use super::{result, Ctx};
use crate::child::UnderTest;
use crate::clock::now_ns;
use crate::db::{each_pool, AppPool};
use crate::report::ScenarioResult;
use crate::sink::event_id;

/// kurir processes sharing the database.
const PROCESSES: usize = 3;

/// Partners: healthy, 30 % `500`s, 10 % slow answers.
const PARTNERS: usize = 3;

/// How long a run writes, how often a fault comes, how fast events go in, how slow the slow
/// partner's answers are.
#[derive(Clone, Debug)]
struct Plan {
    length: Duration,
    period: Duration,
    rate: f64,
    slow: Duration,
}

/// `ctx.sizes.chaos` of writing: 200 events/s, 3-s answers and a fault every 40 s (or every
/// quarter of the length, when shorter), as in the issue. The smoke (under 30 s) writes 40
/// events/s and answers slowly in 1 s, so that leases, which grow with the response timeout,
/// come back within it.
fn plan(ctx: &Ctx) -> Plan {
    let length = ctx.sizes.chaos;
    let period = Duration::from_secs(40).min(length / 4);
    if length >= Duration::from_secs(30) {
        Plan {
            length,
            period,
            rate: 200.0,
            slow: Duration::from_secs(3),
        }
    } else {
        Plan {
            length,
            period,
            rate: 40.0,
            slow: Duration::from_secs(1),
        }
    }
}

const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
const LEASE_MARGIN: Duration = Duration::from_secs(1);

impl Plan {
    /// The partners, in the shapes.
    fn shapes(&self) -> Vec<Shape> {
        vec![
            Shape::Healthy,
            Shape::Failing(30),
            Shape::Slow(10, self.slow),
        ]
    }

    /// Long enough for the slow answers, short enough to keep leases short.
    fn request_timeout(&self) -> Duration {
        self.slow + Duration::from_secs(1)
    }

    /// The lease these settings make (`kurir::dispatch`'s: the margin, and the timeouts for
    /// the waiting rounds and the attempt).
    fn lease(&self) -> Duration {
        LEASE_MARGIN
            + (CONNECT_TIMEOUT + self.request_timeout()) * (1 + kurir::dispatch::WAITING_ROUNDS)
    }

    /// The settings every process runs with: short enough that a killed process's leases come
    /// back within the run, and that no delivery is dead-lettered by the faults alone.
    fn settings(&self) -> Vec<(&'static str, String)> {
        let ms = |d: Duration| format!("{}ms", d.as_millis());
        let mut s: Vec<(&str, String)> = vec![
            ("KURIR_CONNECT_TIMEOUT", ms(CONNECT_TIMEOUT)),
            ("KURIR_REQUEST_TIMEOUT", ms(self.request_timeout())),
            ("KURIR_LEASE_MARGIN", ms(LEASE_MARGIN)),
            ("KURIR_RETRY_INITIAL_DELAY", "200ms".into()),
            ("KURIR_RETRY_MAX_DELAY", "2s".into()),
            ("KURIR_RETRY_MAX_ATTEMPTS", "50".into()),
            ("KURIR_CIRCUIT_COOLDOWN", "1s".into()),
        ];
        s.extend(super::with_encryption_key());
        s
    }
}

/// A fault that happened: what, to which process, from when to when (on [`now_ns`]'s clock).
#[derive(Clone, Debug)]
struct Fault {
    kind: FaultKind,
    from_ns: u64,
    to_ns: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FaultKind {
    Kill,
    Refuse,
    Stop,
}

/// One chaos run.
pub async fn run(ctx: &Ctx) -> anyhow::Result<Vec<ScenarioResult>> {
    let plan = plan(ctx);
    let mut r = result(
        "chaos",
        format!(
            "{PROCESSES} processes, {} events/s, a fault every {:?}",
            plan.rate, plan.period
        ),
    );
    let db = ctx.database().await?;
    let partners = Partners::start(plan.shapes()).await?;
    let endpoints = create_endpoints(&db, &partners).await?;
    let app = db.app_pool(WRITERS as u32).await?;
    let started = Instant::now();
    let mut processes = start_all(ctx, &plan, &db.url).await?;
    let startup = started.elapsed();
    let base = ctx.events(max_events(&plan));
    let run =
        write_under_faults(ctx, &plan, &db.url, &app, base, &partners, &mut processes).await?;
    let drained = drain(&partners, run.written as usize, ctx.sizes.patience).await;
    let drain_time = (now_ns() - run.to_ns) as f64 / 1e9;
    let outcome = Outcome::collect(&app, &partners, &endpoints, base, run.written).await?;
    let duplicates = classify(&app, &partners, &endpoints, &run, plan.lease()).await?;
    stop_all(processes).await?;
    report(&mut r, &plan, &run, &partners, &outcome, &duplicates);
    r.notes.push(format!(
        "the processes started in {startup:.1?}; {} {drain_time:.1} s after the writer stopped",
        if drained {
            "every delivery had arrived"
        } else {
            "the wait gave up"
        }
    ));
    partners.stop();
    app.close().await;
    r.load_end = crate::machine::load_average();
    anyhow::ensure!(
        outcome.lost + outcome.stuck == 0,
        "{} events lost and {} deliveries stuck of {} events written (logs in {}); {:?}",
        outcome.lost,
        outcome.stuck,
        run.written,
        ctx.dir.display(),
        r.notes
    );
    db.remove().await?;
    Ok(vec![r])
}

/// Starts the processes together.
async fn start_all(ctx: &Ctx, plan: &Plan, database_url: &str) -> anyhow::Result<Vec<UnderTest>> {
    let mut starting = tokio::task::JoinSet::new();
    for i in 0..PROCESSES {
        let (dir, url, settings) = (
            process_dir(ctx, i),
            database_url.to_owned(),
            plan.settings(),
        );
        starting.spawn(async move { UnderTest::kurir(&url, &dir, &settings).await });
    }
    let mut processes = Vec::new();
    while let Some(process) = starting.join_next().await {
        processes.push(process??);
    }
    Ok(processes)
}

/// Stops the processes together (SIGTERM).
async fn stop_all(processes: Vec<UnderTest>) -> anyhow::Result<()> {
    let mut stopping = tokio::task::JoinSet::new();
    for p in processes {
        stopping.spawn(p.stop());
    }
    while let Some(stopped) = stopping.join_next().await {
        stopped??;
    }
    Ok(())
}

/// What the writing phase did.
struct Written {
    /// Events committed, from the run's base.
    written: u64,
    faults: Vec<Fault>,
    from_ns: u64,
    to_ns: u64,
}

/// Writes events from `base` for the plan's length while the faults rotate.
async fn write_under_faults(
    ctx: &Ctx,
    plan: &Plan,
    database_url: &str,
    app: &AppPool,
    base: u64,
    partners: &Partners,
    processes: &mut [UnderTest],
) -> anyhow::Result<Written> {
    let stop_writing = CancellationToken::new();
    let writer = tokio::spawn(write(app.clone(), base, plan.rate, stop_writing.clone()));
    let from_ns = now_ns();
    let faults = rotate_faults(ctx, database_url, plan, partners, processes).await;
    stop_writing.cancel();
    let written = writer.await??;
    Ok(Written {
        written,
        faults: faults?,
        from_ns,
        to_ns: now_ns(),
    })
}

/// The most events a run can write (room in the records).
fn max_events(plan: &Plan) -> usize {
    (plan.length.as_secs_f64() * plan.rate) as usize + 1_000
}

async fn create_endpoints(
    db: &crate::db::Database,
    partners: &Partners,
) -> anyhow::Result<Vec<String>> {
    let store = db.store().await?;
    let mut ids = Vec::new();
    for k in 0..PARTNERS {
        let e = store
            .create_endpoint(NewEndpoint::new(partners.url(k)))
            .await?;
        ids.push(e.id.as_str().to_owned());
    }
    store.close().await;
    Ok(ids)
}

async fn start(ctx: &Ctx, plan: &Plan, database_url: &str, i: usize) -> anyhow::Result<UnderTest> {
    UnderTest::kurir(database_url, &process_dir(ctx, i), &plan.settings()).await
}

fn process_dir(ctx: &Ctx, i: usize) -> std::path::PathBuf {
    ctx.dir.join(format!("chaos-p{i}"))
}

/// Writers inserting at once, each on its own connection: every autocommitted `INSERT` waits
/// for its commit to be flushed, so a few connections alone cannot keep the rate.
const WRITERS: usize = 16;

/// Inserts events from `base` by plain SQL at `rate`, from [`WRITERS`] connections, until
/// `stop`; returns how many, all committed from `base` on. An insert that fails is tried again
/// (the same event), as an application would, and one taken is finished after `stop`.
async fn write(app: AppPool, base: u64, rate: f64, stop: CancellationToken) -> anyhow::Result<u64> {
    let start = tokio::time::Instant::now();
    let cursor = Arc::new(AtomicU64::new(0));
    let mut writers = tokio::task::JoinSet::new();
    for _ in 0..WRITERS {
        let (app, cursor, stop) = (app.clone(), Arc::clone(&cursor), stop.clone());
        writers.spawn(async move {
            while !stop.is_cancelled() {
                let n = cursor.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep_until(start + Duration::from_secs_f64(n as f64 / rate)).await;
                insert(&app, base + n).await?;
            }
            anyhow::Ok(())
        });
    }
    while let Some(done) = writers.join_next().await {
        done??;
    }
    Ok(cursor.load(Ordering::Relaxed))
}

/// Inserts event `n`, trying again after a failure, up to 100 times.
async fn insert(app: &AppPool, n: u64) -> anyhow::Result<()> {
    let mut failures = 0;
    loop {
        match app.insert_plain(n, None).await {
            Ok(()) => return Ok(()),
            Err(e) if failures >= 100 => {
                anyhow::bail!("inserting event {n} failed 100 times in a row: {e}")
            }
            Err(_) => {
                failures += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Brings a fault every `plan.period` while the writer runs, in turn (see the module docs);
/// returns what happened when.
async fn rotate_faults(
    ctx: &Ctx,
    database_url: &str,
    plan: &Plan,
    partners: &Partners,
    processes: &mut [UnderTest],
) -> anyhow::Result<Vec<Fault>> {
    let started = Instant::now();
    let hold = plan.period / 2;
    let mut faults = Vec::new();
    for i in 0.. {
        let at = plan.period * (i + 1);
        if at + hold > plan.length {
            break;
        }
        tokio::time::sleep(at.saturating_sub(started.elapsed())).await;
        let kind = [FaultKind::Kill, FaultKind::Refuse, FaultKind::Stop][i as usize % 3];
        let victim = (i as usize / 3) % processes.len();
        let from_ns = now_ns();
        match kind {
            FaultKind::Kill => {
                processes[victim].signal("KILL")?;
                let fresh = start(ctx, plan, database_url, victim).await?;
                std::mem::replace(&mut processes[victim], fresh)
                    .kill()
                    .await?;
            }
            FaultKind::Refuse => {
                partners.refuse();
                tokio::time::sleep(hold).await;
                partners.resume().await?;
            }
            FaultKind::Stop => {
                processes[victim].signal("STOP")?;
                tokio::time::sleep(hold).await;
                processes[victim].signal("CONT")?;
            }
        }
        faults.push(Fault {
            kind,
            from_ns,
            to_ns: now_ns(),
        });
    }
    tokio::time::sleep(plan.length.saturating_sub(started.elapsed())).await;
    Ok(faults)
}

/// Waits until every partner has every one of `written` events, or `patience` passes; whether
/// they all arrived.
async fn drain(partners: &Partners, written: usize, patience: Duration) -> bool {
    let deadline = Instant::now() + patience;
    loop {
        if (0..PARTNERS).all(|k| partners.delivered(k) >= written) {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Written, delivered, lost and stuck.
struct Outcome {
    delivered: usize,
    lost: u64,
    stuck: u64,
    dead_lettered: u64,
    not_fanned_out: u64,
}

impl Outcome {
    async fn collect(
        app: &AppPool,
        partners: &Partners,
        endpoints: &[String],
        base: u64,
        written: u64,
    ) -> anyhow::Result<Self> {
        let mut delivered = 0;
        let mut missing = 0u64;
        for k in 0..endpoints.len() {
            partners.answered(k, |a| {
                let got = (base..base + written)
                    .filter(|n| a.by_event().contains_key(n))
                    .count();
                delivered += got;
                missing += written - got as u64;
            });
        }
        let dead_lettered = count(
            app,
            "SELECT count(*) FROM kurir_deliveries WHERE status = 'dead_letter'",
        )
        .await? as u64;
        let not_fanned_out = app.lost_events().await? as u64;
        let lost = dead_lettered + not_fanned_out;
        Ok(Self {
            delivered,
            lost,
            stuck: missing.saturating_sub(lost),
            dead_lettered,
            not_fanned_out,
        })
    }
}

async fn count(app: &AppPool, sql: &str) -> anyhow::Result<i64> {
    Ok(each_pool!(app, pool => sqlx::query_scalar(sql).fetch_one(pool).await?))
}

/// Why a delivery arrived twice: the window of docs/reliability.md ("Exactly when a duplicate
/// can happen") that explains its first copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Window {
    /// 1: the process that sent it was killed before recording it.
    Killed,
    /// 4: kurir recorded the attempt as failed (the answer did not reach it, or came late).
    AnswerLost,
    /// 6: the process that sent it was stopped past its lease, and another took it.
    Stalled,
    /// None of them: a defect.
    Unexplained,
}

impl Window {
    fn key(self) -> &'static str {
        match self {
            Self::Killed => "duplicates_1_killed_before_recording",
            Self::AnswerLost => "duplicates_4_answer_lost_or_late",
            Self::Stalled => "duplicates_6_stalled_past_the_lease",
            Self::Unexplained => "duplicates_unexplained",
        }
    }
}

/// Every duplicate, by window. For each delivery a partner answered `200` more than once, the
/// first such answer's attempt is looked up: recorded as failed means the answer was lost on
/// the way back (4); not recorded at all means its process stopped before recording it, killed
/// (1) or stopped (6) around the time of the answer; recorded as a success means nothing
/// explains it.
async fn classify(
    app: &AppPool,
    partners: &Partners,
    endpoints: &[String],
    run: &Written,
    lease: Duration,
) -> anyhow::Result<Duplicates> {
    let recorded = recorded_attempts(app).await?;
    let mut duplicates = Duplicates::default();
    for (k, endpoint) in endpoints.iter().enumerate() {
        partners.answered(k, |a| {
            for (n, answers) in a.by_event() {
                if answers.len() < 2 {
                    continue;
                }
                let &(attempt, at_ns) = answers.iter().min_by_key(|(_, at)| *at).unwrap();
                let attempts = recorded.get(&(event_id(*n), endpoint.clone()));
                let first = attempts.and_then(|all| all.iter().find(|(a, _)| *a == attempt));
                let window = match first {
                    Some((_, Some(code))) if (200..300).contains(code) => Window::Unexplained,
                    Some(_) => Window::AnswerLost,
                    None => fault_around(&run.faults, lease, at_ns),
                };
                *duplicates.by_window.entry(window).or_insert(0) += (answers.len() - 1) as u64;
                if window == Window::Unexplained && duplicates.samples.len() < 5 {
                    let since = |t: u64| t.saturating_sub(run.from_ns) as f64 / 1e9;
                    let answered: Vec<String> = answers
                        .iter()
                        .map(|(a, t)| format!("attempt {a} at {:.1}s", since(*t)))
                        .collect();
                    duplicates.samples.push(format!(
                        "ev-{n} to partner {k}: answered 200 to {}; recorded {:?}",
                        answered.join(", "),
                        attempts.cloned().unwrap_or_default()
                    ));
                }
            }
        });
    }
    Ok(duplicates)
}

/// Duplicates by window, and a few that no window explains, described.
#[derive(Default)]
struct Duplicates {
    by_window: BTreeMap<Window, u64>,
    samples: Vec<String>,
}

/// Which fault explains an attempt answered at `at_ns` that its process never recorded.
fn fault_around(faults: &[Fault], lease: Duration, at_ns: u64) -> Window {
    let lease = lease.as_nanos() as u64;
    let near = |f: &&Fault| at_ns + lease >= f.from_ns && at_ns <= f.to_ns;
    match faults.iter().filter(near).map(|f| f.kind).next() {
        Some(FaultKind::Kill) => Window::Killed,
        Some(FaultKind::Stop) => Window::Stalled,
        Some(FaultKind::Refuse) | None => Window::Unexplained,
    }
}

/// Every recorded attempt: (event id, endpoint id) → (attempt, status code) in order.
type Recorded = HashMap<(String, String), Vec<(u32, Option<i32>)>>;

/// Every recorded attempt (see [`Recorded`]).
async fn recorded_attempts(app: &AppPool) -> anyhow::Result<Recorded> {
    // MySQL keeps the ids as binary strings.
    let sql = match app {
        AppPool::Mysql(_) => {
            "SELECT CONVERT(d.event_id USING utf8mb4), CONVERT(d.endpoint_id USING utf8mb4), \
             a.attempt, a.status_code \
             FROM kurir_attempts a JOIN kurir_deliveries d ON d.id = a.delivery_id \
             ORDER BY a.id"
        }
        AppPool::Postgres(_) | AppPool::Sqlite(_) => {
            "SELECT d.event_id, d.endpoint_id, a.attempt, a.status_code \
             FROM kurir_attempts a JOIN kurir_deliveries d ON d.id = a.delivery_id \
             ORDER BY a.id"
        }
    };
    let rows: Vec<(String, String, i32, Option<i32>)> =
        each_pool!(app, pool => sqlx::query_as(sql).fetch_all(pool).await?);
    let mut recorded = Recorded::new();
    for (event, endpoint, attempt, code) in rows {
        recorded
            .entry((event, endpoint))
            .or_default()
            .push((attempt as u32, code));
    }
    Ok(recorded)
}

/// The longest time, in seconds, between two deliveries `answered` got from `from_ns` to `to_ns`.
fn longest_gap(answered: &partner::Answered, from_ns: u64, to_ns: u64) -> f64 {
    let mut times: Vec<u64> = answered
        .by_event()
        .values()
        .flatten()
        .map(|(_, at)| *at)
        .filter(|at| (from_ns..=to_ns).contains(at))
        .collect();
    times.sort_unstable();
    let gaps = times.windows(2).map(|w| w[1] - w[0]);
    let edges = [
        times.first().map_or(to_ns - from_ns, |t| t - from_ns),
        times.last().map_or(0, |t| to_ns - t),
    ];
    gaps.chain(edges).max().unwrap_or(0) as f64 / 1e9
}

fn report(
    r: &mut ScenarioResult,
    plan: &Plan,
    run: &Written,
    partners: &Partners,
    outcome: &Outcome,
    duplicates: &Duplicates,
) {
    let written = run.written;
    r.metric("written", written as f64, "events");
    r.metric(
        "deliveries_expected",
        (written * PARTNERS as u64) as f64,
        "",
    );
    r.metric("delivered", outcome.delivered as f64, "");
    let total: u64 = duplicates.by_window.values().sum();
    r.metric("duplicates", total as f64, "");
    for w in [
        Window::Killed,
        Window::AnswerLost,
        Window::Stalled,
        Window::Unexplained,
    ] {
        r.metric(
            w.key(),
            *duplicates.by_window.get(&w).unwrap_or(&0) as f64,
            "",
        );
    }
    r.metric("lost", outcome.lost as f64, "");
    r.metric("stuck", outcome.stuck as f64, "");
    r.at_most("events lost", outcome.lost as f64, 0.0, "");
    r.at_most("deliveries stuck", outcome.stuck as f64, 0.0, "");
    r.at_most(
        "duplicates no documented window explains",
        *duplicates.by_window.get(&Window::Unexplained).unwrap_or(&0) as f64,
        0.0,
        "",
    );
    for k in 0..PARTNERS {
        let gap = partners.answered(k, |a| longest_gap(a, run.from_ns, run.to_ns));
        r.metric(&format!("longest_gap_partner_{k}"), gap, "s");
    }
    let kinds: Vec<String> = run
        .faults
        .iter()
        .map(|f| format!("{:?} {:.1}s", f.kind, (f.to_ns - f.from_ns) as f64 / 1e9))
        .collect();
    r.notes.push(format!(
        "{:?} of writing at {}/s; slow answers {:?}; faults: {}; lease {:?}",
        plan.length,
        plan.rate,
        plan.slow,
        kinds.join(", "),
        plan.lease()
    ));
    for sample in &duplicates.samples {
        r.notes.push(format!("unexplained duplicate: {sample}"));
    }
    if outcome.lost > 0 {
        r.notes.push(format!(
            "lost: {} deliveries dead-lettered, {} events never fanned out",
            outcome.dead_lettered, outcome.not_fanned_out
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unrecorded_attempt_is_explained_by_the_fault_around_it() {
        let s = 1_000_000_000u64;
        let lease = Duration::from_secs(5);
        let faults = [
            Fault {
                kind: FaultKind::Kill,
                from_ns: 100 * s,
                to_ns: 101 * s,
            },
            Fault {
                kind: FaultKind::Stop,
                from_ns: 200 * s,
                to_ns: 220 * s,
            },
        ];
        assert_eq!(fault_around(&faults, lease, 99 * s), Window::Killed);
        assert_eq!(fault_around(&faults, lease, 210 * s), Window::Stalled);
        assert_eq!(fault_around(&faults, lease, 150 * s), Window::Unexplained);
    }
}
