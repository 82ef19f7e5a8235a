//! The inbox gateway: kurir's receiving side for applications in any language. A partner POSTs
//! to `/inbox/{source}`; kurir verifies the request under the source's scheme, stores the event
//! once in `kurir_inbox`, answers at once, and forwards the event to the source's `forward_url`,
//! signed with the `kurir` scheme and retried with backoff until it is answered 2xx (or `410`,
//! which fails it for good; see [`forward`]).
//!
//! All of it is kurir-receiver's machinery (verification, the inbox store, the runner and its
//! processor) with kurir's parts plugged in: sources from `kurir_inbox_sources` ([`crate::inbox_source`]),
//! forwards through the dispatcher's HTTP client ([`forward`]), and two routes ([`routes`]).
//! Every forward attempt is also kept in the event's history (`store::inbox_history`), which
//! outlives a retry's reset of the inbox row.
//! Managing sources is the admin API's (`/v1/inbox/sources`).
//!
//! The runner claims only the events of kurir's own sources ([`SourceSet`]), so an application
//! may share `kurir_inbox` with kurir-receiver in its own process.

pub mod forward;
pub mod routes;

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use kurir_receiver::{
    CancellationToken, ConfigError, Failure, InboxEvent, Processor, Runner, SourceSet, Waker,
};

use crate::config::DeliveryConfig;
use crate::metrics::Metrics;
use crate::store::inbox_history::InboxAttempt;
use crate::store::Store;
use crate::webhook_client::{Timeouts, WebhookClient};
use forward::{ForwardError, Forwarder};

/// How often the set of sources is re-read, to notice sources created or deleted by another
/// kurir process sharing the database. This process's own changes apply at once.
pub const SOURCE_REFRESH_INTERVAL: Duration = Duration::from_secs(5);

/// The gateway's shared parts: the sources its runner serves and the runner itself. Cheap to
/// clone.
#[derive(Clone, Debug)]
pub struct Gateway {
    store: Store,
    sources: SourceSet,
    runner: Runner,
    /// Counts every forward attempt, once set ([`Gateway::with_metrics`]).
    metrics: Arc<OnceLock<Metrics>>,
}

impl Gateway {
    /// A gateway over `store` that forwards with the delivery settings of `config`: its
    /// timeouts, SSRF exemptions, retry policy and poll interval (growing while idle, up to
    /// [`crate::wake::INBOX_SLOWEST_POLL`]). Nothing runs until
    /// [`Gateway::run`].
    pub fn new(store: Store, config: &DeliveryConfig) -> Result<Self, ConfigError> {
        let timeouts = Timeouts {
            connect: config.connect_timeout,
            response: config.request_timeout,
        };
        let http = WebhookClient::new(
            config.allowed_networks.clone(),
            config.max_concurrency as usize,
        )
        .with_clock(store.clock().clone());
        let forwarder = Arc::new(Forwarder::new(store.clone(), http, timeouts));
        // The lease outlives the longest forward, as a delivery's does.
        let lease = config.connect_timeout + config.request_timeout + config.lease_margin;
        let metrics: Arc<OnceLock<Metrics>> = Arc::default();
        let counted = Arc::clone(&metrics);
        let history = store.clone();
        let processor = Processor::with_failures(move |event| {
            let forwarder = Arc::clone(&forwarder);
            let metrics = Arc::clone(&counted);
            let history = history.clone();
            async move {
                let (started_at, started) = (history.clock().now(), Instant::now());
                let result = forwarder.forward(&event).await;
                let elapsed = started.elapsed();
                if let Some(metrics) = metrics.get() {
                    metrics.record_forward(&event.source, forward_outcome(&result), elapsed);
                }
                record_attempt(&history, &event, started_at, elapsed, &result).await;
                result.map(drop).map_err(Failure::from)
            }
        })
        .retry_policy(config.retry)?
        .lease(lease)?;
        let sources = SourceSet::default();
        let runner = Runner::new(store.inbox(), processor)
            .sources(sources.clone())
            .batch_size(config.batch_size.min(config.max_concurrency))
            .poll_interval(config.poll_interval)
            .max_poll_interval(crate::wake::INBOX_SLOWEST_POLL);
        Ok(Self {
            store,
            sources,
            runner,
            metrics,
        })
    }

    /// Counts every forward attempt in `metrics` (without, forwards are only recorded in the
    /// inbox rows).
    pub fn with_metrics(self, metrics: Metrics) -> Self {
        let _ = self.metrics.set(metrics);
        self
    }

    /// The sources the runner serves; the admin API adds and removes them as they change.
    pub fn sources(&self) -> &SourceSet {
        &self.sources
    }

    /// Wakes the runner: an event was just stored.
    pub fn waker(&self) -> Waker {
        self.runner.waker()
    }

    /// Runs the forwarding runner until `shutdown`, re-reading the source list every
    /// [`SOURCE_REFRESH_INTERVAL`]. Attempts in flight at shutdown finish and are recorded.
    pub async fn run(self, shutdown: CancellationToken) {
        self.refresh_sources().await;
        let runner = tokio::spawn(self.runner.clone().run(shutdown.clone()));
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep(SOURCE_REFRESH_INTERVAL) => self.refresh_sources().await,
            }
        }
        if let Err(e) = runner.await {
            tracing::error!(error = %e, "inbox gateway runner stopped abnormally");
        }
    }

    async fn refresh_sources(&self) {
        match self.store.source_names().await {
            Ok(names) => self.sources.replace(names),
            Err(e) => {
                tracing::warn!(error = %e, "reading the inbox sources failed; keeping the last list")
            }
        }
    }
}

/// Keeps one forward attempt in the event's history, before the runner records its outcome on
/// the inbox row (a retry later resets that row; the history stays). A failure to record is
/// logged and does not change the forward's outcome: the partner's event matters more than
/// its history.
async fn record_attempt(
    store: &Store,
    event: &InboxEvent,
    started_at: DateTime<Utc>,
    elapsed: Duration,
    result: &Result<u16, ForwardError>,
) {
    let attempt = InboxAttempt {
        attempt: event.attempt,
        started_at,
        duration_ms: i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX),
        status_code: match result {
            Ok(status) => Some(*status),
            Err(e) => e.status_code(),
        },
        error: result.as_ref().err().map(ToString::to_string),
    };
    if let Err(e) = store
        .record_inbox_attempt(&event.source, &event.event_id, &attempt)
        .await
    {
        tracing::warn!(source = %event.source, event_id = %event.event_id, error = %e,
            "recording an inbox forward attempt failed");
    }
}

/// The `outcome` label of one forward attempt.
fn forward_outcome(result: &Result<u16, ForwardError>) -> &'static str {
    match result {
        Ok(_) => "forwarded",
        Err(ForwardError::Status { .. } | ForwardError::Gone) => "rejected",
        Err(ForwardError::Post(_)) => "unreachable",
        Err(ForwardError::SourceGone(_) | ForwardError::Store(_)) => "error",
    }
}
