//! Test support: fresh databases on both backends, a recording HTTP receiver on loopback, a
//! hostile one on raw TCP, a TCP proxy that can cut connections, a kurir server in-process or as
//! the real binary, a clock the test moves, and condition waits with deadlines.

pub mod clock;
pub mod connections;
pub mod dispatcher;
pub mod hostile;
pub mod process;
pub mod proxy;
pub mod receiver;

use std::future::Future;
use std::time::Duration;

use kurir::config::{Config, DeliveryConfig};
use kurir::store::Store;
use kurir_core::retry::RetryPolicy;
use tokio_util::sync::CancellationToken;

/// Runs each named `async fn name(db: TestDb)` on the database servers that several processes
/// or transactions can write to at once, PostgreSQL and MySQL/MariaDB, as `name::postgres` and
/// `name::mysql` (SQLite has one writer at a time).
#[macro_export]
macro_rules! on_shared_servers {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                if let Some(db) = $crate::support::TestDb::postgres().await {
                    super::$name(db).await
                }
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn mysql() {
                if let Some(db) = $crate::support::TestDb::mysql().await {
                    super::$name(db).await
                }
            }
        }
    )*};
}

/// Runs each named `async fn name(fixture)` once per backend, as `name::sqlite`,
/// `name::postgres` and `name::mysql`. The fixture is whatever the function takes, a [`TestDb`] or a
/// [`crate::api::support::TestApp`] (see [`Fixture`]); `with runner;` first hands each backend
/// to `runner(backend, body)` instead of [`run`]. A new backend is one more test here and one
/// more [`Backend`].
#[macro_export]
macro_rules! on_both_backends {
    (with $run:path; $($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                $run($crate::support::Backend::Sqlite, super::$name).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                $run($crate::support::Backend::Postgres, super::$name).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn mysql() {
                $run($crate::support::Backend::Mysql, super::$name).await
            }
        }
    )*};
    ($($name:ident),* $(,)?) => {
        $crate::on_both_backends!(with $crate::support::run; $($name),*);
    };
}

/// What a test body runs against, set up on one backend and taken down after it.
pub trait Fixture: Sized {
    /// What must outlive the body (and is taken down after it).
    type Guard;
    /// Sets up on `backend`; `None` when that backend is not configured (a server outside CI).
    fn open(backend: Backend) -> impl Future<Output = Option<(Self, Self::Guard)>>;
    /// Takes down what `open` set up.
    fn close(guard: Self::Guard) -> impl Future<Output = ()>;
}

impl Fixture for TestDb {
    type Guard = ();

    async fn open(backend: Backend) -> Option<(Self, ())> {
        let db = Self::unmigrated(backend).await?;
        db.store.migrate().await.expect("migrate");
        Some((db, ()))
    }

    async fn close((): ()) {}
}

/// Runs `test` on a fresh fixture on `backend`, then takes the fixture down.
pub async fn run<T, F, Fut>(backend: Backend, test: F)
where
    T: Fixture,
    F: FnOnce(T) -> Fut,
    Fut: Future<Output = ()>,
{
    let Some((fixture, guard)) = T::open(backend).await else {
        return;
    };
    test(fixture).await;
    T::close(guard).await;
}

/// Which database a test runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
    Mysql,
}

/// A fresh, migrated database that is removed when the test ends, and a temp dir (the SQLite
/// file's, and a data dir for an app on either backend).
pub struct TestDb {
    pub backend: Backend,
    pub url: String,
    pub store: Store,
    pub dir: tempfile::TempDir,
    /// The server's URL and the test database's name, to drop it with.
    server_db: Option<(String, String)>,
}

/// The MySQL or MariaDB server tests use: `KURIR_TEST_MYSQL_URL` (`.ci/run` sets
/// `mysql://root@127.0.0.1:3306/test`). Without it, MySQL tests are skipped with a notice,
/// except under CI (`CI` set), where that is a failure.
pub fn mysql_admin_url() -> Option<String> {
    server_url("KURIR_TEST_MYSQL_URL", "MySQL")
}

/// The PostgreSQL server tests use: `KURIR_TEST_POSTGRES_URL`, skipped or failing without it as
/// [`mysql_admin_url`] says.
pub fn postgres_admin_url() -> Option<String> {
    server_url("KURIR_TEST_POSTGRES_URL", "PostgreSQL")
}

fn server_url(var: &str, server: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var_os("CI").is_some() => {
            panic!("CI is set but {var} is not: {server} tests must run in CI")
        }
        _ => {
            eprintln!("notice: {var} is not set; skipping a {server} test");
            None
        }
    }
}

impl TestDb {
    pub async fn sqlite() -> Self {
        let db = Self::sqlite_unmigrated().await;
        db.store.migrate().await.expect("migrate sqlite");
        db
    }

    pub async fn postgres() -> Option<Self> {
        let db = Self::server_unmigrated(Backend::Postgres).await?;
        db.store.migrate().await.expect("migrate postgres");
        Some(db)
    }

    pub async fn mysql() -> Option<Self> {
        let db = Self::server_unmigrated(Backend::Mysql).await?;
        db.store.migrate().await.expect("migrate mysql");
        Some(db)
    }

    /// A fresh database on `backend` without kurir's tables (`None`: its server not configured).
    pub async fn unmigrated(backend: Backend) -> Option<Self> {
        match backend {
            Backend::Sqlite => Some(Self::sqlite_unmigrated().await),
            server => Self::server_unmigrated(server).await,
        }
    }

    /// A new database `kurir_test_<uuid>` on the PostgreSQL or MySQL server the tests use,
    /// dropped with the `TestDb` (`None`: that server is not configured).
    async fn server_unmigrated(backend: Backend) -> Option<Self> {
        let admin = match backend {
            Backend::Postgres => postgres_admin_url()?,
            Backend::Mysql => mysql_admin_url()?,
            Backend::Sqlite => unreachable!("SQLite needs no server"),
        };
        let name = format!("kurir_test_{}", uuid::Uuid::now_v7().simple());
        let admin_store = Store::connect(&admin)
            .await
            .unwrap_or_else(|e| panic!("the {backend:?} test server is unreachable: {e}"));
        let create = format!("CREATE DATABASE {name}");
        match &admin_store {
            Store::Postgres(pg) => sqlx::query(&create).execute(pg.pool()).await.map(drop),
            Store::Mysql(my) => sqlx::query(&create).execute(my.pool()).await.map(drop),
            Store::Sqlite(_) => unreachable!("a server URL opened a SQLite file"),
        }
        .expect("create test database");
        admin_store.close().await;
        let url = with_database(&admin, &name);
        let store = Store::connect(&url).await.expect("connect test database");
        Some(Self {
            backend,
            url,
            store,
            dir: tempfile::tempdir().expect("temp dir"),
            server_db: Some((admin, name)),
        })
    }

    async fn sqlite_unmigrated() -> Self {
        Self::sqlite_in(tempfile::tempdir().expect("temp dir")).await
    }

    /// An unmigrated SQLite database in `dir` (one on a file system of the test's choosing).
    pub async fn sqlite_in(dir: tempfile::TempDir) -> Self {
        let url = format!("sqlite://{}", dir.path().join("kurir.db").display());
        let store = Store::connect(&url).await.expect("open sqlite");
        Self {
            backend: Backend::Sqlite,
            url,
            store,
            dir,
            server_db: None,
        }
    }

    /// A second, independent connection pool to the same database.
    pub async fn connect_again(&self) -> Store {
        Store::connect(&self.url).await.expect("connect again")
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let Some((admin, name)) = self.server_db.take() else {
            return;
        };
        // Dropping needs async I/O; do it on a runtime of its own so Drop works anywhere.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            rt.block_on(async {
                let store = Store::connect(&admin).await.ok()?;
                match &store {
                    Store::Postgres(pg) => {
                        let sql = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
                        let _ = sqlx::query(&sql).execute(pg.pool()).await;
                    }
                    Store::Mysql(my) => {
                        let sql = format!("DROP DATABASE IF EXISTS {name}");
                        let _ = sqlx::query(&sql).execute(my.pool()).await;
                    }
                    Store::Sqlite(_) => {}
                }
                store.close().await;
                Some(())
            })
        })
        .join();
    }
}

fn with_database(url: &str, name: &str) -> String {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(b, q)| (b, Some(q)));
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let base = match base.rfind('/') {
        Some(i) if i > scheme_end => &base[..i],
        _ => base,
    };
    match query {
        Some(q) => format!("{base}/{name}?{q}"),
        None => format!("{base}/{name}"),
    }
}

/// Delivery settings for tests: loopback allowed, tiny retry delays without jitter, fast polls.
pub fn test_delivery_config() -> DeliveryConfig {
    DeliveryConfig {
        connect_timeout: Duration::from_secs(2),
        request_timeout: Duration::from_secs(5),
        retry: RetryPolicy {
            initial_delay: Duration::from_millis(20),
            max_delay: Duration::from_millis(200),
            max_attempts: 10,
            jitter: 0.0,
        },
        allowed_networks: kurir::config::parse_networks("127.0.0.0/8,::1/128").unwrap(),
        max_concurrency: 64,
        batch_size: 100,
        poll_interval: Duration::from_millis(10),
        relay_poll_interval: Duration::from_millis(10),
        lease_margin: Duration::from_secs(30),
        // Off: the tests that count attempts to a failing receiver predate it; the breaker's
        // own tests turn it on.
        breaker: kurir_core::BreakerPolicy {
            failure_threshold: 0,
            cooldown: Duration::from_secs(30),
        },
        endpoint_disable_after: Duration::from_secs(5 * 86_400),
    }
}

/// A kurir server running in this process on 127.0.0.1:0.
pub struct TestServer {
    /// Where its HTTP server listens.
    #[allow(dead_code)]
    pub addr: std::net::SocketAddr,
    shutdown: CancellationToken,
    handle: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl TestServer {
    pub async fn start(db: &TestDb, delivery: DeliveryConfig) -> Self {
        if std::env::var_os("KURIR_LOG").is_some() {
            kurir::telemetry::init();
        }
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let config = Config {
            database_url: db.url.clone(),
            data_dir: std::env::temp_dir(),
            listen: addr,
            admin_token: Some("test-token".into()),
            encryption_key: None,
            max_body_bytes: 256 * 1024,
            metrics_require_token: false,
            event_catalog: Default::default(),
            delivery,
            http: Default::default(),
            shutdown_timeout: kurir::config::DEFAULT_SHUTDOWN_TIMEOUT,
            retention: Default::default(),
            portal: Default::default(),
        };
        let store = db.connect_again().await;
        let shutdown = CancellationToken::new();
        let handle = tokio::spawn(kurir::serve::run(config, store, listener, shutdown.clone()));
        Self {
            addr,
            shutdown,
            handle,
        }
    }

    /// Graceful shutdown; returns once everything has stopped.
    pub async fn stop(self) {
        self.shutdown.cancel();
        self.handle
            .await
            .expect("server task")
            .expect("server result");
    }
}

/// Polls `check` every 10 ms until it yields a value; panics after 30 s naming `what`.
pub async fn eventually<T, F, Fut>(what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    eventually_within(Duration::from_secs(30), what, check).await
}

/// [`eventually`], panicking after `patience`.
pub async fn eventually_within<T, F, Fut>(patience: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + patience;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// [`eventually`] for a test without a runtime, blocking its thread: `check`'s first `Some`,
/// or `None` once `patience` has passed.
pub fn poll_blocking<T>(patience: Duration, mut check: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = std::time::Instant::now() + patience;
    loop {
        if let Some(v) = check() {
            return Some(v);
        }
        if std::time::Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Enqueues `n` events of `event_type` in one transaction of the caller kind (the Rust API).
pub async fn enqueue_events(store: &Store, event_type: &str, n: usize) -> Vec<String> {
    use kurir::outbox::NewEvent;
    let events = (0..n).map(|i| {
        NewEvent::json(event_type, &serde_json::json!({"n": i, "note": "hello"}))
            .unwrap()
            .aggregate("order", i.to_string())
    });
    enqueue_all(store, events.collect()).await
}

/// Enqueues `events`, in order, in one transaction of the caller kind (the Rust API); their ids.
pub async fn enqueue_all(store: &Store, events: Vec<kurir::outbox::NewEvent>) -> Vec<String> {
    use kurir::outbox::enqueue;
    let mut ids = Vec::with_capacity(events.len());
    macro_rules! run {
        ($pool:expr) => {{
            let mut tx = $pool.begin().await.unwrap();
            for ev in events {
                ids.push(enqueue(&mut tx, ev).await.unwrap().to_string());
            }
            tx.commit().await.unwrap();
        }};
    }
    match store {
        Store::Postgres(pg) => run!(pg.pool()),
        Store::Sqlite(sq) => run!(sq.pool()),
        Store::Mysql(my) => run!(my.pool()),
    }
    ids
}

/// The one integer `sql` answers (a count, an id), on whichever database `store` is.
pub async fn scalar(store: &Store, sql: &str) -> i64 {
    match store {
        Store::Postgres(pg) => sqlx::query_scalar(sql).fetch_one(pg.pool()).await.unwrap(),
        Store::Sqlite(sq) => sqlx::query_scalar(sql).fetch_one(sq.pool()).await.unwrap(),
        Store::Mysql(my) => sqlx::query_scalar(sql).fetch_one(my.pool()).await.unwrap(),
    }
}

/// Sessions of `pg`'s database waiting for a lock: how a test knows a statement it started is
/// queued behind a lock the test holds.
pub async fn pg_lock_waiters(pg: &kurir::store::PgStore) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
         WHERE NOT l.granted AND a.datname = current_database()",
    )
    .fetch_one(pg.pool())
    .await
    .unwrap()
}

/// Sessions of `store`'s database waiting for a row lock (PostgreSQL), or in the middle of a
/// statement (MySQL/MariaDB): how a test knows a statement it started is queued behind a lock
/// the test holds, its own sessions being between statements. MariaDB's `INNODB_TRX`, which
/// tells lock waits apart, lagged by seconds and left transactions out while other databases
/// were busy.
pub async fn lock_waiters(store: &Store) -> i64 {
    match store {
        Store::Postgres(pg) => pg_lock_waiters(pg).await,
        Store::Mysql(_) => {
            scalar(
                store,
                "SELECT COUNT(*) FROM information_schema.PROCESSLIST \
                 WHERE DB = DATABASE() AND ID <> CONNECTION_ID() AND COMMAND <> 'Sleep'",
            )
            .await
        }
        Store::Sqlite(_) => unreachable!("SQLite has one writer: nothing waits for a row lock"),
    }
}
