//! `kurir serve`: corrects the process's clock to the database's ([`crate::clock`]), then runs
//! the relay, the dispatcher, the lease sweep, the inbox gateway's runner and the HTTP server
//! ([`crate::app::router`]) in one process, all stopped by one [`CancellationToken`], within a
//! bounded time ([`run`]). It builds no routes and no workers of its own: it starts them and
//! stops them.

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::admin_token::{self, AdminToken, TokenSource, ADMIN_ACTOR};
use crate::api::state::AppState;
use crate::clock::Follower;
use crate::config::Config;
use crate::dispatch::Dispatcher;
use crate::gateway::Gateway;
use crate::metrics::Metrics;
use crate::probe::Probe;
use crate::store::Store;
use crate::wake::Wakes;

/// How often histogram samples are folded into buckets between scrapes.
const METRICS_UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

/// Runs everything on `listener` until `shutdown` is cancelled, then stops within
/// `config.shutdown_timeout`: stops accepting and claiming, lets requests and deliveries in
/// flight finish, records them, releases leftover leases and closes the pool (see [`stop`]).
pub async fn run(
    config: Config,
    store: Store,
    listener: TcpListener,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let listen = listener.local_addr()?;
    let token = settle_admin_token(&config, listen)?;
    let delivery = config.delivery.clone();
    let metrics = Metrics::new();
    // Before any worker writes a time another process compares (see `crate::clock`).
    let mut clock = Follower::new(store.clone(), Some(metrics.clone()));
    clock.correct().await;
    let gateway = Gateway::new(store.clone(), &delivery)?.with_metrics(metrics.clone());
    let wakes = Wakes::announced();
    let state = AppState {
        relay_wake: wakes.relay.clone(),
        dispatch_wake: wakes.dispatcher.clone(),
        max_body_bytes: config.max_body_bytes,
        metrics_require_token: config.metrics_require_token,
        retention: config.retention,
        probe: Probe::new(&delivery, store.clock().clone()),
        portal: Arc::new(portal_config(&config, listen)),
        metrics,
        ..AppState::new(
            store.clone(),
            AdminToken::new(ADMIN_ACTOR, &token),
            gateway.clone(),
        )
    };
    let dispatcher = Arc::new(
        Dispatcher::new(store.clone(), delivery.clone(), crate::dispatch::owner_id())
            .with_metrics(state.metrics.clone()),
    );
    tracing::info!(
        backend = store.backend(),
        listen = %listen,
        owner = dispatcher.owner(),
        "kurir serving"
    );
    let workers = Workers {
        dispatcher,
        gateway,
        clock,
    };
    let tasks = spawn_workers(
        &state,
        &wakes,
        &delivery,
        config.retention,
        workers,
        &shutdown,
    );
    let server = tokio::spawn(crate::listener::serve(
        listener,
        crate::app::router(state),
        listener_limits(&config),
        shutdown.clone(),
    ));
    shutdown.cancelled().await;
    stop(server, tasks, &store, config.shutdown_timeout).await
}

/// The portal's settings with the URL its links start with: the configured one, or this
/// process's listen address (loopback for an unspecified one, which no browser can open).
fn portal_config(config: &Config, listen: std::net::SocketAddr) -> crate::config::PortalConfig {
    let mut portal = config.portal.clone();
    if portal.public_url.is_none() {
        let mut addr = listen;
        if addr.ip().is_unspecified() {
            addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
        }
        tracing::info!(
            "KURIR_PUBLIC_URL is not set: subscriber portal links start with http://{addr}"
        );
        portal.public_url = Some(format!("http://{addr}"));
    }
    portal
}

/// The HTTP listener's bounds: `config`'s, its drain within the shutdown time.
fn listener_limits(config: &Config) -> crate::listener::Limits {
    crate::listener::Limits {
        header_timeout: config.http.header_timeout,
        body_timeout: config.http.body_timeout,
        max_connections: config.http.max_connections as usize,
        drain: config.shutdown_timeout - stop_reserve(config.shutdown_timeout),
    }
}

/// The admin token to serve with (configured, read or generated), logged by where it came from.
fn settle_admin_token(config: &Config, listen: std::net::SocketAddr) -> anyhow::Result<String> {
    let (token, source) =
        admin_token::for_serving(config.admin_token.as_deref(), &config.data_dir, listen)?;
    match &source {
        TokenSource::Configured => tracing::info!("admin API token: the configured one"),
        TokenSource::File(path) => {
            tracing::info!(file = %path.display(), "admin API token read from file")
        }
        TokenSource::Generated(path) => tracing::info!(
            file = %path.display(),
            "admin API token generated; the CLI on this machine reads it from that file"
        ),
    }
    Ok(token)
}

/// The workers built before they start.
struct Workers {
    dispatcher: Arc<Dispatcher>,
    gateway: Gateway,
    clock: Follower,
}

/// Starts the relay, the cross-process wake-ups (PostgreSQL), the lease sweep, the metrics
/// upkeep, the dispatcher, the inbox gateway's runner, the retention pruner and the clock's
/// correction, each stopping at `shutdown`.
fn spawn_workers(
    state: &AppState,
    wakes: &Wakes,
    delivery: &crate::config::DeliveryConfig,
    retention: crate::config::RetentionConfig,
    workers: Workers,
    shutdown: &CancellationToken,
) -> TaskTracker {
    let Workers {
        dispatcher,
        gateway,
        clock,
    } = workers;
    let store = &state.store;
    let tasks = TaskTracker::new();
    tasks.spawn(clock.run(shutdown.clone()));
    wakes.spawn(&tasks, store, dispatcher.owner(), shutdown);
    tasks.spawn(crate::relay::run(
        store.clone(),
        delivery.batch_size,
        delivery.relay_poll_interval,
        state.relay_wake.clone(),
        crate::relay::Downstream {
            wake: state.dispatch_wake.clone(),
            births: Some(dispatcher.births()),
        },
        state.metrics.clone(),
        shutdown.clone(),
    ));
    tasks.spawn(
        state
            .metrics
            .clone()
            .upkeep(METRICS_UPKEEP_INTERVAL, shutdown.clone()),
    );
    tasks.spawn(crate::dispatch::sweep::run(
        store.clone(),
        crate::dispatch::sweep::SWEEP_INTERVAL,
        delivery.retry,
        state.metrics.clone(),
        shutdown.clone(),
    ));
    tasks.spawn(dispatcher.run(state.dispatch_wake.handle(), shutdown.clone()));
    tasks.spawn(gateway.run(shutdown.clone()));
    tasks.spawn(crate::prune::run(
        store.clone(),
        retention,
        state.metrics.clone(),
        shutdown.clone(),
    ));
    tasks.close();
    tasks
}

/// The part of the shutdown time kept for closing the database pool once the HTTP server and
/// the workers are done or cut off.
fn stop_reserve(timeout: Duration) -> Duration {
    (timeout / 5).min(Duration::from_secs(2))
}

/// Stops everything within `timeout` of now, whatever clients or the database do: the HTTP
/// server (which closes connections still open when its drain time is up) and the workers get
/// all but [`stop_reserve`] of it, closing the pool the rest. Workers still running then are
/// left behind, to end with the process: deliveries they hold are retried, by this or another
/// kurir, once their leases expire. That case is an error, so the exit status says so.
async fn stop(
    mut server: JoinHandle<()>,
    tasks: TaskTracker,
    store: &Store,
    timeout: Duration,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    let work_deadline = deadline - stop_reserve(timeout);
    let (server_done, workers_done) = tokio::join!(
        tokio::time::timeout_at(work_deadline, &mut server),
        tokio::time::timeout_at(work_deadline, tasks.wait()),
    );
    if server_done.is_err() {
        server.abort();
    }
    if workers_done.is_err() {
        tracing::error!(
            timeout_ms = timeout.as_millis() as u64,
            "workers still running at the shutdown deadline are left behind; the deliveries they \
             hold are retried once their leases expire"
        );
    }
    let closed = tokio::time::timeout_at(deadline, store.close()).await;
    if closed.is_err() {
        tracing::error!("the database pool did not close before the shutdown deadline");
    }
    if workers_done.is_err() || closed.is_err() {
        anyhow::bail!(
            "shutdown did not finish within {} (KURIR_SHUTDOWN_TIMEOUT)",
            humantime::format_duration(timeout)
        );
    }
    tracing::info!("kurir stopped");
    Ok(())
}

/// Cancels `token` on SIGINT or SIGTERM.
pub fn cancel_on_signals(token: CancellationToken) {
    tokio::spawn(async move {
        let ctrl_c = tokio::signal::ctrl_c();
        #[cfg(unix)]
        let term = async {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut s) => {
                    s.recv().await;
                }
                Err(_) => std::future::pending::<()>().await,
            }
        };
        #[cfg(not(unix))]
        let term = std::future::pending::<()>();
        tokio::select! {
            _ = ctrl_c => tracing::info!("SIGINT received; shutting down"),
            _ = term => tracing::info!("SIGTERM received; shutting down"),
        }
        token.cancel();
    });
}
