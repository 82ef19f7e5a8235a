//! What the admin API tests share: a real `kurir serve` ([`TestApp`]) on port 0 over SQLite in a
//! temp dir or a fresh PostgreSQL or MySQL database, a real receiver on loopback ([`Receiver`]), polling
//! with a deadline ([`eventually`]), and [`on_both_backends!`], which runs a test body once per
//! backend.
//!
//! PostgreSQL comes from `KURIR_TEST_POSTGRES_URL` and MySQL/MariaDB from `KURIR_TEST_MYSQL_URL`
//! (servers where `CREATE DATABASE` is allowed). Unset, their tests print a notice and pass,
//! unless `CI` is set: then they fail.

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
use sqlx::Connection;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// The admin token every [`TestApp`] uses.
pub const TOKEN: &str = "test-admin-token";

/// Which database a test runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
    Mysql,
}

/// Runs each named `async fn name(app: TestApp)` as three tests, `name::sqlite`,
/// `name::postgres` and `name::mysql`.
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                $crate::api::support::run($crate::api::support::Backend::Sqlite, super::$name).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                $crate::api::support::run($crate::api::support::Backend::Postgres, super::$name).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn mysql() {
                $crate::api::support::run($crate::api::support::Backend::Mysql, super::$name).await
            }
        }
    )*};
}
pub(crate) use on_both_backends;

/// Starts an app on `backend`, runs `test` with it, then stops it and drops its database.
pub async fn run<F, Fut>(backend: Backend, test: F)
where
    F: FnOnce(TestApp) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let Some(database) = TestDatabase::create(backend).await else {
        return;
    };
    let app = TestApp::spawn(&database).await;
    let stop = app.stopper();
    test(app).await;
    stop.stop().await;
    database.drop().await;
}

/// A fresh database: a SQLite file in a temp dir, or a new PostgreSQL or MySQL database.
pub struct TestDatabase {
    pub url: String,
    pub dir: tempfile::TempDir,
    /// The server's URL and the database's name, to drop it with.
    pg: Option<(String, String)>,
    mysql: Option<(String, String)>,
}

impl TestDatabase {
    /// `None` when PostgreSQL is not configured and this is not CI.
    pub async fn create(backend: Backend) -> Option<Self> {
        let dir = tempfile::tempdir().expect("temp dir");
        if backend == Backend::Sqlite {
            let url = format!("sqlite://{}", dir.path().join("kurir.db").display());
            return Some(Self {
                url,
                dir,
                pg: None,
                mysql: None,
            });
        }
        if backend == Backend::Mysql {
            let admin_url = crate::support::mysql_admin_url()?;
            let name = format!("kurir_api_{}", uuid::Uuid::now_v7().simple());
            let mut conn = sqlx::MySqlConnection::connect(&admin_url)
                .await
                .unwrap_or_else(|e| panic!("cannot reach MySQL at KURIR_TEST_MYSQL_URL: {e}"));
            sqlx::query(&format!("CREATE DATABASE {name}"))
                .execute(&mut conn)
                .await
                .expect("CREATE DATABASE");
            let mut url = url::Url::parse(&admin_url).expect("KURIR_TEST_MYSQL_URL is a URL");
            url.set_path(&name);
            return Some(Self {
                url: url.to_string(),
                dir,
                pg: None,
                mysql: Some((admin_url, name)),
            });
        }
        let admin_url = match std::env::var("KURIR_TEST_POSTGRES_URL") {
            Ok(url) => url,
            Err(_) if std::env::var_os("CI").is_some() => {
                panic!("CI is set but KURIR_TEST_POSTGRES_URL is not: PostgreSQL tests cannot run")
            }
            Err(_) => {
                eprintln!("notice: KURIR_TEST_POSTGRES_URL is unset; skipping the PostgreSQL run");
                return None;
            }
        };
        let name = format!("kurir_api_{}", uuid::Uuid::now_v7().simple());
        let mut conn = sqlx::PgConnection::connect(&admin_url)
            .await
            .unwrap_or_else(|e| panic!("cannot reach PostgreSQL at KURIR_TEST_POSTGRES_URL: {e}"));
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut conn)
            .await
            .expect("CREATE DATABASE");
        let mut url = url::Url::parse(&admin_url).expect("KURIR_TEST_POSTGRES_URL is a URL");
        url.set_path(&name);
        Some(Self {
            url: url.to_string(),
            dir,
            pg: Some((admin_url, name)),
            mysql: None,
        })
    }

    /// Drops the server's database (the temp dir goes with `self`).
    pub async fn drop(self) {
        if let Some((admin_url, name)) = &self.mysql {
            if let Ok(mut conn) = sqlx::MySqlConnection::connect(admin_url).await {
                let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name}"))
                    .execute(&mut conn)
                    .await;
            }
        }
        if let Some((admin_url, name)) = &self.pg {
            if let Ok(mut conn) = sqlx::PgConnection::connect(admin_url).await {
                let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                    .execute(&mut conn)
                    .await;
            }
        }
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
    pub fn config(database: &TestDatabase, overrides: &[(&'static str, &str)]) -> Config {
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
        ];
        flags.extend(overrides.iter().map(|(k, v)| (*k, v.to_string())));
        Config::from_raw(&RawConfig::load(None, |_| None, &flags).unwrap()).unwrap()
    }

    pub async fn spawn(database: &TestDatabase) -> Self {
        Self::spawn_with(database, &[]).await
    }

    /// [`TestApp::spawn`] with some settings changed.
    pub async fn spawn_with(database: &TestDatabase, overrides: &[(&'static str, &str)]) -> Self {
        let config = Self::config(database, overrides);
        if std::env::var_os("KURIR_LOG").is_some() {
            kurir::telemetry::init();
        }
        let store = kurir::cli::open_store(&config).await.expect("open store");
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

/// Polls `check` until it returns `Some`, failing after 20 seconds.
pub async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
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
