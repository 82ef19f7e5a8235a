//! `kurir serve`: the relay, the dispatcher, the lease sweep, the inbox gateway's runner and the
//! HTTP server (health, metrics, the admin API, the inbox gateway's routes) in one process, all
//! stopped by one [`CancellationToken`].

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::admin_token::{self, AdminToken, TokenSource, ADMIN_ACTOR};
use crate::config::Config;
use crate::dispatch::Dispatcher;
use crate::gateway::Gateway;
use crate::metrics::Metrics;
use crate::store::Store;
use crate::wake::{Channel, Wake, Wakes};

/// How often each process sweeps expired leases. Every lease is at least `lease_margin` (30 s by
/// default) long, so this is a small part of it; an idle process pays one statement per sweep.
const SWEEP_INTERVAL: Duration = Duration::from_secs(2);

/// How often histogram samples are folded into buckets between scrapes.
const METRICS_UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

/// What the HTTP handlers share.
#[derive(Clone)]
pub struct AppState {
    /// The store.
    pub store: Store,
    /// The admin API's token.
    pub admin: Arc<AdminToken>,
    /// Wakes the relays (an event was published).
    pub relay_wake: Wake,
    /// Wakes the dispatchers (deliveries were replayed).
    pub dispatch_wake: Wake,
    /// Largest admin API request body, in bytes.
    pub max_body_bytes: usize,
    /// This process's metrics registry.
    pub metrics: Metrics,
    /// Whether `GET /metrics` needs the admin token.
    pub metrics_require_token: bool,
    /// The inbox gateway: the sources its runner serves, and the runner's wake-up.
    pub gateway: Gateway,
}

impl AppState {
    /// State for `store`, `admin` and `gateway`, with fresh wake-ups (this process's only) and
    /// the default body limit.
    pub fn new(store: Store, admin: AdminToken, gateway: Gateway) -> Self {
        Self {
            store,
            admin: Arc::new(admin),
            gateway,
            relay_wake: Wake::new(Channel::Outbox),
            dispatch_wake: Wake::new(Channel::Deliveries),
            max_body_bytes: 256 * 1024,
            metrics: Metrics::new(),
            metrics_require_token: false,
        }
    }
}

/// The HTTP routes: health checks, metrics, the inbox gateway and the admin API.
pub fn app(state: AppState) -> Router {
    let require_token = state.metrics_require_token;
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .merge(crate::gateway::routes::router())
        .with_state(state.clone())
        .merge(crate::metrics::scrape::router(state.clone(), require_token))
        .merge(crate::api::router(state))
}

async fn readyz(State(state): State<AppState>) -> (StatusCode, &'static str) {
    match state.store.ping().await {
        Ok(()) => (StatusCode::OK, "ready"),
        Err(e) => {
            tracing::warn!(error = %e, "readiness check failed");
            (StatusCode::SERVICE_UNAVAILABLE, "database unreachable")
        }
    }
}

/// A unique lease owner for this process: pid plus a UUIDv7, so a restarted process never
/// mistakes its predecessor's leases for its own.
pub fn owner_id() -> String {
    format!(
        "kurir-{}-{}",
        std::process::id(),
        uuid::Uuid::now_v7().simple()
    )
}

/// Runs everything on `listener` until `shutdown` is cancelled, then drains: stops claiming,
/// lets requests in flight finish, records them and releases leftover leases.
pub async fn run(
    config: Config,
    store: Store,
    listener: TcpListener,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let listen = listener.local_addr()?;
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
    let delivery = config.delivery.clone();
    let gateway = Gateway::new(store.clone(), &delivery)?;
    let wakes = Wakes::announced();
    let state = AppState {
        max_body_bytes: config.max_body_bytes,
        metrics_require_token: config.metrics_require_token,
        relay_wake: wakes.relay.clone(),
        dispatch_wake: wakes.dispatcher.clone(),
        ..AppState::new(
            store.clone(),
            AdminToken::new(ADMIN_ACTOR, &token),
            gateway.clone(),
        )
    };
    let metrics = state.metrics.clone();
    let dispatcher = Arc::new(
        Dispatcher::new(store.clone(), delivery.clone(), owner_id()).with_metrics(metrics.clone()),
    );
    tracing::info!(
        backend = store.backend(),
        listen = %listen,
        owner = dispatcher.owner(),
        "kurir serving"
    );
    let tasks = tokio_util::task::TaskTracker::new();
    wakes.spawn(&tasks, &store, dispatcher.owner(), &shutdown);
    tasks.spawn(crate::relay::run(
        store.clone(),
        delivery.batch_size,
        delivery.relay_poll_interval,
        wakes.relay.clone(),
        wakes.dispatcher.clone(),
        metrics.clone(),
        shutdown.clone(),
    ));
    tasks.spawn(metrics.upkeep(METRICS_UPKEEP_INTERVAL, shutdown.clone()));
    tasks.spawn(crate::relay::sweep_leases(
        store.clone(),
        SWEEP_INTERVAL,
        shutdown.clone(),
    ));
    tasks.spawn(dispatcher.run(wakes.dispatcher.handle(), shutdown.clone()));
    tasks.spawn(gateway.run(shutdown.clone()));
    let server_shutdown = shutdown.clone();
    let server = axum::serve(listener, app(state))
        .with_graceful_shutdown(async move { server_shutdown.cancelled().await });
    let served = server.await;
    shutdown.cancel();
    tasks.close();
    tasks.wait().await;
    store.close().await;
    tracing::info!("kurir stopped");
    served.map_err(Into::into)
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
