//! [`AppState`]: what every HTTP handler shares (the admin API, the dashboard, the inbox gateway's
//! routes and `GET /metrics`). It lives at the bottom of the HTTP layer so that the handlers and
//! the router that mounts them ([`crate::app`]) both depend on it, and it on none of them.

use std::sync::Arc;

use crate::admin_token::AdminToken;
use crate::gateway::Gateway;
use crate::ingest::Ingest;
use crate::metrics::Metrics;
use crate::probe::Probe;
use crate::store::Store;
use crate::wake::{Channel, Wake};

/// What the HTTP handlers share.
#[derive(Clone)]
pub struct AppState {
    /// How long finished history is kept (shown by `GET /v1/stats`).
    pub retention: crate::config::RetentionConfig,
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
    /// Group commit of `POST /v1/events`.
    pub ingest: Ingest,
    /// Endpoint checks: the URL warning and the test event, with this process's delivery settings.
    pub probe: Arc<Probe>,
    /// The subscriber portal's settings (`public_url` filled in from the listen address by
    /// [`crate::serve`] when it is not configured).
    pub portal: Arc<crate::config::PortalConfig>,
}

impl AppState {
    /// State for `store`, `admin` and `gateway`, with fresh wake-ups (this process's only) and
    /// the default body limit. Starts the publish writers ([`Ingest::start`]), so it must be
    /// called on a Tokio runtime.
    pub fn new(store: Store, admin: AdminToken, gateway: Gateway) -> Self {
        Self {
            ingest: Ingest::start(store.clone()),
            probe: Probe::new(
                &crate::config::DeliveryConfig::default(),
                store.clock().clone(),
            ),
            store,
            admin: Arc::new(admin),
            gateway,
            relay_wake: Wake::new(Channel::Outbox),
            dispatch_wake: Wake::new(Channel::Deliveries),
            max_body_bytes: 256 * 1024,
            metrics: Metrics::new(),
            metrics_require_token: false,
            retention: crate::config::RetentionConfig::default(),
            portal: Arc::default(),
        }
    }
}
