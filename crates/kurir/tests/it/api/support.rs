//! What the admin API tests share: a real `kurir serve` ([`TestApp`]) on port 0 over SQLite in a
//! temp dir or a fresh PostgreSQL database, a real receiver on loopback ([`Receiver`]), and
//! polling with a deadline ([`eventually`]). A body taking a [`TestApp`] runs on both backends
//! with the one `on_both_backends!` (its fixture is [`crate::support::Fixture`]).
//!
//! PostgreSQL comes from `KURIR_TEST_POSTGRES_URL` (a server where `CREATE DATABASE` is allowed).
//! Unset, PostgreSQL tests print a notice and pass, unless `CI` is set: then they fail.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::HeaderMap;
use kurir::config::{Config, RawConfig};
use kurir::store::Store;
use reqwest::{Method, StatusCode};
use serde_json::Value;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// The admin token every [`TestApp`] uses.
pub const TOKEN: &str = "test-admin-token";

pub use crate::on_both_backends;
pub use crate::support::{eventually, Backend, TestDb};

/// An app on a fresh, unmigrated database (`kurir serve` migrates it, as in production).
impl crate::support::Fixture for TestApp {
    type Guard = (Stopper, TestDb);

    async fn open(backend: Backend) -> Option<(Self, Self::Guard)> {
        let database = TestDb::unmigrated(backend).await?;
        let app = TestApp::spawn(&database).await;
        let stop = app.stopper();
        Some((app, (stop, database)))
    }

    async fn close((stop, database): Self::Guard) {
        stop.stop().await;
        drop(database);
    }
}

/// A running `kurir serve` (HTTP server, relay, dispatcher) and a client for its admin API.
pub struct TestApp {
    pub url: String,
    pub store: Store,
    client: reqwest::Client,
    shutdown: CancellationToken,
    server: Arc<Mutex<Option<tokio::task::JoinHandle<anyhow::Result<()>>>>>,
}

/// Stops a [`TestApp`] after the test has consumed it.
pub struct Stopper {
    shutdown: CancellationToken,
    server: Arc<Mutex<Option<tokio::task::JoinHandle<anyhow::Result<()>>>>>,
}

impl Stopper {
    pub async fn stop(self) {
        self.shutdown.cancel();
        let server = self.server.lock().unwrap().take();
        if let Some(server) = server {
            server
                .await
                .expect("server task")
                .expect("server stopped cleanly");
        }
    }
}

impl TestApp {
    /// Settings for tests: loopback receivers allowed, fast polling and retries.
    pub fn config(database: &TestDb, overrides: &[(&'static str, &str)]) -> Config {
        let mut flags: Vec<(&'static str, String)> = vec![
            ("database_url", database.url.clone()),
            ("data_dir", database.dir.path().display().to_string()),
            ("admin_token", TOKEN.into()),
            ("allowed_networks", "127.0.0.0/8".into()),
            ("poll_interval", "20ms".into()),
            ("retry_initial_delay", "50ms".into()),
            ("retry_max_delay", "200ms".into()),
            ("request_timeout", "2s".into()),
            ("max_body_size", "64KiB".into()),
            // Off, as in `test_delivery_config`: tests dead-letter deliveries to failing
            // receivers on purpose.
            ("circuit_failure_threshold", "0".into()),
        ];
        flags.extend(overrides.iter().map(|(k, v)| (*k, v.to_string())));
        Config::from_raw(&RawConfig::load(None, |_| None, &flags).unwrap()).unwrap()
    }

    pub async fn spawn(database: &TestDb) -> Self {
        Self::spawn_with(database, &[]).await
    }

    /// [`TestApp::spawn`] with some settings changed.
    pub async fn spawn_with(database: &TestDb, overrides: &[(&'static str, &str)]) -> Self {
        Self::start(database, overrides, None).await
    }

    /// [`TestApp::spawn`] reading time from `clock`, which the test moves.
    pub async fn spawn_with_clock(database: &TestDb, clock: kurir::clock::Clock) -> Self {
        Self::start(database, &[], Some(clock)).await
    }

    async fn start(
        database: &TestDb,
        overrides: &[(&'static str, &str)],
        clock: Option<kurir::clock::Clock>,
    ) -> Self {
        let config = Self::config(database, overrides);
        if std::env::var_os("KURIR_LOG").is_some() {
            kurir::telemetry::init();
        }
        let store = kurir::cli::open_store(&config).await.expect("open store");
        let store = match clock {
            Some(clock) => store.with_clock(clock),
            None => store,
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let shutdown = CancellationToken::new();
        let server = tokio::spawn(kurir::serve::run(
            config,
            store.clone(),
            listener,
            shutdown.clone(),
        ));
        Self {
            url,
            store,
            client: reqwest::Client::new(),
            shutdown,
            server: Arc::new(Mutex::new(Some(server))),
        }
    }

    pub fn stopper(&self) -> Stopper {
        Stopper {
            shutdown: self.shutdown.clone(),
            server: self.server.clone(),
        }
    }

    /// A request to `path` carrying the admin token.
    pub fn request(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        self.client
            .request(method, format!("{}{path}", self.url))
            .bearer_auth(TOKEN)
    }

    /// Sends `req`; the status and the body parsed as JSON (`Null` when empty).
    pub async fn send(&self, req: reqwest::RequestBuilder) -> (StatusCode, Value) {
        let resp = req.send().await.expect("request reaches the server");
        let status = resp.status();
        let bytes = resp.bytes().await.unwrap();
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|e| panic!("{status}: body is not JSON ({e}): {bytes:?}"))
        };
        (status, body)
    }

    pub async fn get(&self, path: &str) -> (StatusCode, Value) {
        self.send(self.request(Method::GET, path)).await
    }

    pub async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.send(self.request(Method::POST, path).body(body.to_string()))
            .await
    }

    pub async fn patch(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.send(self.request(Method::PATCH, path).body(body.to_string()))
            .await
    }

    pub async fn delete(&self, path: &str) -> (StatusCode, Value) {
        self.send(self.request(Method::DELETE, path)).await
    }

    /// Creates an endpoint at `url` with the extra fields of `extra`; returns its JSON.
    pub async fn create_endpoint(&self, url: &str, extra: Value) -> Value {
        let mut body = serde_json::json!({ "url": url });
        if let Value::Object(extra) = extra {
            body.as_object_mut().unwrap().extend(extra);
        }
        let (status, endpoint) = self.post("/v1/endpoints", body).await;
        assert_eq!(status, StatusCode::CREATED, "{endpoint}");
        endpoint
    }

    /// Publishes an event of `event_type` with `data`; returns its id.
    pub async fn publish(&self, event_type: &str, data: Value) -> String {
        let (status, body) = self
            .post(
                "/v1/events",
                serde_json::json!({"event_type": event_type, "data": data}),
            )
            .await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        body["event_id"].as_str().unwrap().to_owned()
    }

    /// Waits until every delivery of `event_id` is in `status` (and there is at least one).
    pub async fn wait_for_deliveries(&self, event_id: &str, status: &str) -> Value {
        eventually(
            &format!("deliveries of {event_id} to be {status}"),
            || async {
                let (_, event) = self.get(&format!("/v1/events/{event_id}")).await;
                let deliveries = event["deliveries"].as_array()?;
                (!deliveries.is_empty() && deliveries.iter().all(|d| d["status"] == status))
                    .then_some(event)
            },
        )
        .await
    }

    /// Everything stored, in a comparable form: to check that a refused request changed nothing.
    pub async fn snapshot(&self) -> String {
        let endpoints: Vec<String> = self
            .store
            .list_endpoints()
            .await
            .unwrap()
            .into_iter()
            .map(|e| {
                format!(
                    "{} {} {:?} {} {:?} {} {:?} {:?}",
                    e.id,
                    e.url,
                    e.description,
                    e.enabled,
                    e.disabled_reason,
                    e.max_in_flight,
                    e.overrides,
                    e.updated_at
                )
            })
            .collect();
        let sources: Vec<String> = self
            .store
            .list_sources()
            .await
            .unwrap()
            .into_iter()
            .map(|s| format!("{} {} {:?}", s.name, s.forward_url, s.updated_at))
            .collect();
        let events = self
            .store
            .list_events(&kurir::store::EventQuery {
                limit: 10_000,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.event_id)
            .collect::<Vec<_>>();
        let deliveries = self
            .store
            .list_deliveries(&kurir::store::DeliveryQuery {
                limit: 10_000,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_iter()
            .map(|d| {
                format!(
                    "{} {} {}",
                    d.delivery.id, d.delivery.status, d.delivery.attempt_count
                )
            })
            .collect::<Vec<_>>();
        let replays = self.store.list_replays(None, 10_000).await.unwrap().len();
        format!("{endpoints:?}\n{sources:?}\n{events:?}\n{deliveries:?}\nreplays: {replays}")
    }
}

/// One request a [`Receiver`] got.
#[derive(Clone, Debug)]
pub struct Received {
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Received {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }

    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }
}

/// A webhook receiver on loopback that records every request and answers a settable status.
#[derive(Clone)]
pub struct Receiver {
    pub url: String,
    received: Arc<Mutex<Vec<Received>>>,
    arrived: Arc<Notify>,
    status: Arc<AtomicU16>,
    script: Arc<Mutex<VecDeque<u16>>>,
}

impl Receiver {
    pub async fn start() -> Self {
        let received: Arc<Mutex<Vec<Received>>> = Arc::default();
        let arrived = Arc::new(Notify::new());
        let status = Arc::new(AtomicU16::new(200));
        let script: Arc<Mutex<VecDeque<u16>>> = Arc::default();
        let handler = {
            let (received, arrived, status) = (received.clone(), arrived.clone(), status.clone());
            let script = script.clone();
            move |headers: HeaderMap, body: Bytes| async move {
                // The status is decided before the request counts as received, so a test that
                // changes it after `wait_for(n)` never changes the answer to request n.
                let scripted = script.lock().unwrap().pop_front();
                let answer = scripted.unwrap_or_else(|| status.load(Ordering::SeqCst));
                let answer = StatusCode::from_u16(answer).unwrap();
                received.lock().unwrap().push(Received { headers, body });
                arrived.notify_waiters();
                answer
            }
        };
        let app = axum::Router::new().route("/{*path}", axum::routing::post(handler));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self {
            url,
            received,
            arrived,
            status,
            script,
        }
    }

    /// The statuses the next requests get, one each, before the settable one applies again.
    pub fn respond_next(&self, statuses: &[u16]) {
        self.script.lock().unwrap().extend(statuses);
    }

    /// The status later requests get.
    pub fn respond_with(&self, status: u16) {
        self.status.store(status, Ordering::SeqCst);
    }

    /// Everything received so far.
    pub fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }

    /// Waits until at least `n` requests have arrived; returns all of them.
    pub async fn wait_for(&self, n: usize) -> Vec<Received> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let arrived = self.arrived.notified();
            let all = self.received();
            if all.len() >= n {
                return all;
            }
            tokio::time::timeout_at(deadline, arrived)
                .await
                .unwrap_or_else(|_| {
                    panic!("timed out waiting for {n} requests; got {}", all.len())
                });
        }
    }
}
