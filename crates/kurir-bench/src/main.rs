//! `kurir-bench`: measures kurir against the limits of the machine it runs on, in the same run
//! (issue 7). See `BENCHMARKS.md` at the repository root for results and how to read them.
//!
//! # Layout
//!
//! - [`scenario`]: `ceiling`, `throughput`, `latency`, `backlog`, `isolation`, `inbox`, `idle`,
//!   `soak`, `api`, `endpoints`, `subscribers`, `scale-out`, `app-cost`, `delivery-cost`, `noisy`, `chaos`, and the rig they share (fresh database, sink, endpoints, kurir under test).
//! - [`child`]: the process under test: this executable re-entered as `kurir serve`, so its
//!   memory and CPU are measured on their own.
//! - [`sink`]: the loopback HTTP sink that records when each delivery arrived.
//! - [`db`]: fresh databases, the benchmark as the application (enqueue, plain SQL, preload),
//!   table sizes.
//! - [`stats`], [`report`], [`chart`]: figures, the table and JSON, SVG charts.
//! - [`machine`], [`clock`]: load average, `/proc` readings, the one monotonic clock.

mod chart;
mod child;
mod clock;
mod db;
mod machine;
mod report;
mod scenario;
mod sink;
mod stats;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, ValueEnum};

use db::Backend;
use report::{DatabaseRun, Report, ScenarioResult};
use scenario::{Ctx, Sizes};

/// Benchmarks kurir: throughput, latency, deep backlog, slow-endpoint isolation and the inbox,
/// each compared with this machine's limits measured in the same run.
#[derive(Debug, Parser)]
#[command(name = "kurir-bench", version)]
struct Args {
    /// What to run.
    #[arg(value_enum)]
    scenario: Scenario,
    /// Database to run on.
    #[arg(long, value_enum, default_value = "postgres")]
    db: DbChoice,
    /// PostgreSQL server; a fresh database is created on it per scenario and dropped after.
    #[arg(
        long,
        env = "KURIR_BENCH_DATABASE_URL",
        default_value = "postgres://root@127.0.0.1:5432/postgres"
    )]
    database_url: String,
    /// MySQL or MariaDB server, used the same way.
    #[arg(
        long,
        env = "KURIR_BENCH_MYSQL_URL",
        default_value = "mysql://root@127.0.0.1:3306/test"
    )]
    mysql_url: String,
    /// Events per throughput run [default: 50000].
    #[arg(long)]
    events: Option<usize>,
    /// Endpoints for `throughput` and `api` [default: both 1 and 10].
    #[arg(long)]
    endpoints: Option<usize>,
    /// Pending deliveries for `backlog` [default: 1000000 on PostgreSQL, 200000 on SQLite and
    /// MySQL].
    #[arg(long)]
    backlog: Option<usize>,
    /// Seconds per steady-rate phase of `latency`, and of the idle window of `idle`
    /// [default: 30].
    #[arg(long)]
    duration: Option<u64>,
    /// Tiny sizes, a few seconds per scenario: checks that the harness works, measures nothing.
    #[arg(long)]
    smoke: bool,
    /// Print JSON instead of the table.
    #[arg(long)]
    json: bool,
    /// Also write the JSON report to this file.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Write SVG charts into this directory.
    #[arg(long, value_name = "DIR")]
    charts: Option<PathBuf>,
    /// Working directory for logs and SQLite files [default: a new one under the temp dir,
    /// removed after a successful run].
    #[arg(long, value_name = "DIR")]
    work_dir: Option<PathBuf>,
    /// The first event's number. The partners of `noisy` and `chaos` choose which requests fail
    /// by event number, so a run's choices depend on the events before it: `all` numbers on from
    /// the scenarios before; this repeats another run's choices.
    #[arg(long, default_value_t = 1)]
    first_event: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Scenario {
    Ceiling,
    Throughput,
    Latency,
    Backlog,
    Isolation,
    Inbox,
    Idle,
    Soak,
    Prune,
    Ordered,
    Api,
    Endpoints,
    Subscribers,
    ScaleOut,
    AppCost,
    DeliveryCost,
    Noisy,
    Chaos,
    All,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum DbChoice {
    Postgres,
    Sqlite,
    Mysql,
    /// PostgreSQL and SQLite.
    Both,
    /// PostgreSQL, SQLite and MySQL.
    All,
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().collect();
    let outcome = match argv.get(1).map(String::as_str) {
        Some(child::KURIR_ARG) => run_kurir(&argv[2..]),
        _ => run_bench(Args::parse()),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kurir-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Exactly what the `kurir` binary's `main` does.
fn run_kurir(args: &[String]) -> anyhow::Result<()> {
    use clap::Parser as _;
    let cli = kurir::cli::Cli::parse_from(
        std::iter::once("kurir".to_owned()).chain(args.iter().cloned()),
    );
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(async {
            kurir::telemetry::init();
            kurir::cli::main(cli).await
        })
}

fn sizes(args: &Args, backend: Backend) -> Sizes {
    let smoke = args.smoke;
    let events = args.events.unwrap_or(if smoke { 300 } else { 50_000 });
    Sizes {
        events,
        endpoints: args.endpoints,
        duration: Duration::from_secs(args.duration.unwrap_or(if smoke { 2 } else { 30 })),
        backlog: args.backlog.unwrap_or(match (smoke, backend) {
            (true, _) => 2_000,
            (false, Backend::Postgres) => 1_000_000,
            (false, Backend::Sqlite | Backend::Mysql) => 200_000,
        }),
        ceiling: Duration::from_secs(if smoke { 1 } else { 5 }),
        inbox_requests: if smoke { 300 } else { 20_000 },
        isolation_events: if smoke { 100 } else { (events / 5).max(100) },
        prune_rows: if smoke { 3_000 } else { 1_000_000 },
        ordered_events: if smoke { 300 } else { 20_000 },
        patience: Duration::from_secs(if smoke { 60 } else { 1200 }),
        chaos: if smoke {
            Duration::from_secs(6)
        } else {
            Duration::from_secs(args.duration.unwrap_or(30) * 8)
        },
    }
}

fn run_bench(args: Args) -> anyhow::Result<()> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(bench(args))
}

async fn bench(args: Args) -> anyhow::Result<()> {
    clock::now_ns();
    let (work_dir, temporary) = match &args.work_dir {
        Some(d) => (d.clone(), false),
        None => (
            std::env::temp_dir().join(format!("kurir-bench-{}", std::process::id())),
            true,
        ),
    };
    std::fs::create_dir_all(&work_dir)?;
    let mut report = Report {
        command: std::env::args().collect::<Vec<_>>().join(" "),
        started_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        cores: machine::cores(),
        load_start: machine::load_average(),
        load_end: Default::default(),
        kurir_version: kurir_version(),
        smoke: args.smoke,
        databases: Vec::new(),
    };
    let backends = match args.db {
        DbChoice::Postgres => vec![Backend::Postgres],
        DbChoice::Sqlite => vec![Backend::Sqlite],
        DbChoice::Mysql => vec![Backend::Mysql],
        DbChoice::Both => vec![Backend::Postgres, Backend::Sqlite],
        DbChoice::All => vec![Backend::Postgres, Backend::Sqlite, Backend::Mysql],
    };
    for backend in backends {
        report
            .databases
            .push(bench_database(&args, backend, &work_dir).await?);
    }
    report.load_end = machine::load_average();
    write_report(&args, &report)?;
    if temporary {
        let _ = std::fs::remove_dir_all(&work_dir);
    }
    if args.smoke {
        // Every scenario ran to the end (a failure stops the run with an error before this).
        let ran: usize = report.databases.iter().map(|d| d.results.len()).sum();
        println!("smoke: {ran} passed, 0 failed");
    }
    Ok(())
}

/// Runs the chosen scenarios on one database, in `work_dir`.
async fn bench_database(
    args: &Args,
    backend: Backend,
    work_dir: &std::path::Path,
) -> anyhow::Result<DatabaseRun> {
    let server_url = match backend {
        Backend::Mysql => &args.mysql_url,
        Backend::Postgres | Backend::Sqlite => &args.database_url,
    };
    let ctx = Ctx::new(
        backend,
        server_url.clone(),
        work_dir.join(backend.name()),
        sizes(args, backend),
        args.first_event,
    );
    std::fs::create_dir_all(&ctx.dir)?;
    let version = db::server_version(backend, server_url).await?;
    eprintln!("kurir-bench: {} ({version})", backend.name());
    let mut results: Vec<ScenarioResult> = Vec::new();
    for s in scenarios(args.scenario) {
        eprintln!("kurir-bench:   {s:?} …");
        let done = run_scenario(&ctx, s).await.with_context(|| {
            format!(
                "{s:?} on {} (logs in {})",
                backend.name(),
                ctx.dir.display()
            )
        })?;
        results.extend(done);
    }
    Ok(DatabaseRun {
        backend: backend.name(),
        version,
        results,
    })
}

/// Writes the report where `args` asks: a JSON file, charts, and standard output.
fn write_report(args: &Args, report: &Report) -> anyhow::Result<()> {
    let json = serde_json::to_string_pretty(report)?;
    if let Some(out) = &args.out {
        std::fs::write(out, &json)?;
    }
    if let Some(dir) = &args.charts {
        for f in chart::write(report, dir)? {
            eprintln!("kurir-bench: chart {}", f.display());
        }
    }
    if args.json {
        println!("{json}");
    } else {
        print!("{}", report.table());
    }
    Ok(())
}

fn scenarios(s: Scenario) -> Vec<Scenario> {
    match s {
        Scenario::All => vec![
            Scenario::Ceiling,
            Scenario::Throughput,
            Scenario::Latency,
            Scenario::Backlog,
            Scenario::Isolation,
            Scenario::Inbox,
            Scenario::Idle,
            Scenario::Soak,
            Scenario::Prune,
            Scenario::Ordered,
            Scenario::Api,
            Scenario::Endpoints,
            Scenario::Subscribers,
            Scenario::ScaleOut,
            Scenario::AppCost,
            Scenario::DeliveryCost,
            Scenario::Noisy,
            Scenario::Chaos,
        ],
        one => vec![one],
    }
}

async fn run_scenario(ctx: &Ctx, s: Scenario) -> anyhow::Result<Vec<ScenarioResult>> {
    match s {
        Scenario::Ceiling => scenario::ceiling::run(ctx).await,
        Scenario::Throughput => scenario::throughput::run(ctx).await,
        Scenario::Latency => scenario::latency::run(ctx).await,
        Scenario::Backlog => scenario::backlog::run(ctx).await,
        Scenario::Isolation => scenario::isolation::run(ctx).await,
        Scenario::Inbox => scenario::inbox::run(ctx).await,
        Scenario::Idle => scenario::idle::run(ctx).await,
        Scenario::Soak => scenario::soak::run(ctx).await,
        Scenario::Prune => scenario::prune::run(ctx).await,
        Scenario::Ordered => scenario::ordered::run(ctx).await,
        Scenario::Api => scenario::api::run(ctx).await,
        Scenario::Endpoints => scenario::endpoints::run(ctx).await,
        Scenario::Subscribers => scenario::subscribers::run(ctx).await,
        Scenario::ScaleOut => scenario::scale_out::run(ctx).await,
        Scenario::AppCost => scenario::app_cost::run(ctx).await,
        Scenario::DeliveryCost => scenario::delivery_cost::run(ctx).await,
        Scenario::Noisy => scenario::noisy::run(ctx).await,
        Scenario::Chaos => scenario::chaos::run(ctx).await,
        Scenario::All => unreachable!("expanded by scenarios()"),
    }
}

/// kurir's version, with the commit when run from a git checkout.
fn kurir_version() -> String {
    let version = env!("CARGO_PKG_VERSION");
    let commit = std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    match commit {
        Some(c) if !c.is_empty() => format!("{version} ({c})"),
        _ => version.to_owned(),
    }
}
