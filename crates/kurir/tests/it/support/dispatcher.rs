//! A dispatcher of its own, as one kurir process runs it, for tests that need several
//! processes on one database without the binary.

use std::sync::Arc;
use std::time::Duration;

use kurir::config::DeliveryConfig;
use kurir::dispatch::Dispatcher;
use kurir::metrics::Metrics;
use kurir::store::Store;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// A running dispatcher, until [`Process::stop`].
pub struct Process {
    pub wake: Arc<Notify>,
    pub shutdown: CancellationToken,
    task: tokio::task::JoinHandle<()>,
    pub metrics: Metrics,
}

impl Process {
    pub fn start(store: &Store, config: DeliveryConfig, owner: &str) -> Self {
        let metrics = Metrics::new();
        let dispatcher =
            Dispatcher::new(store.clone(), config, owner.to_owned()).with_metrics(metrics.clone());
        let (wake, shutdown) = (Arc::new(Notify::new()), CancellationToken::new());
        let task = tokio::spawn(Arc::new(dispatcher).run(wake.clone(), shutdown.clone()));
        Self {
            wake,
            shutdown,
            task,
            metrics,
        }
    }

    /// The value of one counter line of its metrics, e.g.
    /// `kurir_deliveries_handed_back_total{reason="lease"}` (0 when absent).
    pub fn counter(&self, line: &str) -> f64 {
        let prefix = format!("{line} ");
        self.metrics
            .render()
            .lines()
            .find_map(|l| l.strip_prefix(prefix.as_str())?.parse().ok())
            .unwrap_or(0.0)
    }

    /// How many deliveries it handed back for `reason`.
    pub fn handed_back(&self, reason: &str) -> f64 {
        self.counter(&format!(
            "kurir_deliveries_handed_back_total{{reason=\"{reason}\"}}"
        ))
    }

    pub async fn stop(self) {
        self.shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(30), self.task)
            .await
            .expect("the dispatcher stops")
            .unwrap();
    }
}
