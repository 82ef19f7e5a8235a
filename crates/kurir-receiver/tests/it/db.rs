//! A fresh, migrated database per test: SQLite in a temporary directory, or a new PostgreSQL
//! database `kurir_rcv_<random>` created through `KURIR_TEST_POSTGRES_URL`, or a new MySQL/MariaDB
//! one through `KURIR_TEST_MYSQL_URL`, dropped afterwards.

use std::str::FromStr;
use std::time::Duration;

use kurir_receiver::Inbox;
use sqlx::mysql::MySqlConnectOptions;
use sqlx::pool::PoolOptions;
use sqlx::postgres::PgConnectOptions;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};
use sqlx::{Connection, Executor};

/// One test's database.
pub struct TestDb {
    /// The inbox over it, migrated.
    pub inbox: Inbox,
    cleanup: Cleanup,
}

enum Cleanup {
    Sqlite(#[allow(dead_code)] tempfile::TempDir),
    /// The database `name` on `server`, reached through `admin_url`.
    Server {
        server: Server,
        admin_url: String,
        name: String,
    },
}

/// A database server the tests create their databases on.
#[derive(Clone, Copy)]
enum Server {
    Postgres,
    Mysql,
}

impl Server {
    /// The variable naming the server's URL.
    fn url_var(self) -> &'static str {
        match self {
            Server::Postgres => "KURIR_TEST_POSTGRES_URL",
            Server::Mysql => "KURIR_TEST_MYSQL_URL",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Server::Postgres => "PostgreSQL",
            Server::Mysql => "MySQL",
        }
    }

    /// Runs one statement (creating or dropping a database) over a connection of its own.
    async fn execute(self, url: &str, sql: &str) -> Result<(), sqlx::Error> {
        match self {
            Server::Postgres => execute_once::<sqlx::PgConnection>(url, sql).await,
            Server::Mysql => execute_once::<sqlx::MySqlConnection>(url, sql).await,
        }
    }

    /// An inbox over the database `name` on the server at `url`.
    async fn inbox(self, url: &str, name: &str) -> Inbox {
        match self {
            Server::Postgres => Inbox::from(
                pool::<sqlx::Postgres>(PgConnectOptions::from_str(url).unwrap().database(name))
                    .await,
            ),
            Server::Mysql => Inbox::from(
                pool::<sqlx::MySql>(MySqlConnectOptions::from_str(url).unwrap().database(name))
                    .await,
            ),
        }
    }

    /// Drops the database `name`, even while connections to it remain (PostgreSQL's `FORCE`).
    fn drop_sql(self, name: &str) -> String {
        match self {
            Server::Postgres => format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
            Server::Mysql => format!("DROP DATABASE IF EXISTS {name}"),
        }
    }
}

async fn execute_once<C>(url: &str, sql: &str) -> Result<(), sqlx::Error>
where
    C: Connection,
    for<'c> &'c mut C: Executor<'c, Database = C::Database>,
{
    let mut conn = C::connect(url).await?;
    conn.execute(sql).await?;
    conn.close().await
}

async fn pool<DB: sqlx::Database>(
    options: <DB::Connection as Connection>::Options,
) -> sqlx::Pool<DB> {
    PoolOptions::<DB>::new()
        .max_connections(10)
        .connect_with(options)
        .await
        .unwrap()
}

impl TestDb {
    /// [`TestDb::sqlite_empty`], migrated.
    pub async fn sqlite() -> TestDb {
        let db = TestDb::sqlite_empty().await;
        db.inbox.migrate().await.unwrap();
        db
    }

    /// [`TestDb::postgres_empty`], migrated.
    pub async fn postgres() -> Option<TestDb> {
        let db = TestDb::postgres_empty().await?;
        db.inbox.migrate().await.unwrap();
        Some(db)
    }

    /// [`TestDb::mysql_empty`], migrated.
    pub async fn mysql() -> Option<TestDb> {
        let db = TestDb::mysql_empty().await?;
        db.inbox.migrate().await.unwrap();
        Some(db)
    }

    /// A SQLite file in a new temporary directory, WAL mode, with a busy timeout.
    pub async fn sqlite_empty() -> TestDb {
        let dir = tempfile::tempdir().unwrap();
        let options = SqliteConnectOptions::new()
            .filename(dir.path().join("inbox.sqlite"))
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .busy_timeout(Duration::from_secs(10));
        let pool = SqlitePoolOptions::new()
            .max_connections(8)
            .connect_with(options)
            .await
            .unwrap();
        TestDb {
            inbox: Inbox::from(pool),
            cleanup: Cleanup::Sqlite(dir),
        }
    }

    /// A new database on the server at `KURIR_TEST_POSTGRES_URL`; `None` (after a notice) when the
    /// variable is unset outside CI.
    pub async fn postgres_empty() -> Option<TestDb> {
        TestDb::server_empty(Server::Postgres).await
    }

    /// A new database on the server at `KURIR_TEST_MYSQL_URL`, as [`TestDb::postgres_empty`].
    pub async fn mysql_empty() -> Option<TestDb> {
        TestDb::server_empty(Server::Mysql).await
    }

    /// A new database `kurir_rcv_<random>` on `server`, dropped with the `TestDb`.
    async fn server_empty(server: Server) -> Option<TestDb> {
        let (var, server_name) = (server.url_var(), server.name());
        let Ok(url) = std::env::var(var) else {
            assert!(
                std::env::var_os("CI").is_none(),
                "{var} must be set in CI: the {server_name} tests cannot be skipped there"
            );
            eprintln!("notice: {var} is unset, skipping the {server_name} run of this test");
            return None;
        };
        let name = format!("kurir_rcv_{}", uuid::Uuid::now_v7().simple());
        server
            .execute(&url, &format!("CREATE DATABASE {name}"))
            .await
            .unwrap_or_else(|e| panic!("{server_name} at {var} is unreachable: {e}"));
        Some(TestDb {
            inbox: server.inbox(&url, &name).await,
            cleanup: Cleanup::Server {
                server,
                admin_url: url,
                name,
            },
        })
    }

    /// Rows stored for `(source, event_id)`.
    pub async fn count_rows(&self, source: &str, event_id: &str) -> i64 {
        let sql = "SELECT COUNT(*) FROM kurir_inbox WHERE source = $1 AND event_id = $2";
        match &self.inbox {
            Inbox::Mysql(pool) => sqlx::query_scalar(&sql.replace("$1", "?").replace("$2", "?"))
                .bind(source)
                .bind(event_id)
                .fetch_one(pool)
                .await
                .unwrap(),
            Inbox::Postgres(pool) => sqlx::query_scalar(sql)
                .bind(source)
                .bind(event_id)
                .fetch_one(pool)
                .await
                .unwrap(),
            Inbox::Sqlite(pool) => sqlx::query_scalar(sql)
                .bind(source)
                .bind(event_id)
                .fetch_one(pool)
                .await
                .unwrap(),
        }
    }

    /// The `event_type` and `headers` columns of one row, as stored.
    pub async fn stored_type_and_headers(&self, event_id: &str) -> (Option<String>, String) {
        let sql = "SELECT event_type, CAST(headers AS TEXT) FROM kurir_inbox WHERE event_id = $1";
        match &self.inbox {
            Inbox::Mysql(pool) => {
                sqlx::query_as(
                    "SELECT CAST(event_type AS CHAR), CAST(headers AS CHAR) FROM kurir_inbox \
                     WHERE event_id = ?",
                )
                .bind(event_id)
                .fetch_one(pool)
                .await
            }
            Inbox::Postgres(pool) => sqlx::query_as(sql).bind(event_id).fetch_one(pool).await,
            Inbox::Sqlite(pool) => sqlx::query_as(sql).bind(event_id).fetch_one(pool).await,
        }
        .unwrap()
    }

    /// Every row in the inbox.
    pub async fn total_rows(&self) -> i64 {
        let sql = "SELECT COUNT(*) FROM kurir_inbox";
        match &self.inbox {
            Inbox::Mysql(pool) => sqlx::query_scalar(sql).fetch_one(pool).await.unwrap(),
            Inbox::Postgres(pool) => sqlx::query_scalar(sql).fetch_one(pool).await.unwrap(),
            Inbox::Sqlite(pool) => sqlx::query_scalar(sql).fetch_one(pool).await.unwrap(),
        }
    }

    /// `postgres`, `sqlite` or `mysql`, for assertion messages.
    pub fn backend(&self) -> &'static str {
        match self.inbox {
            Inbox::Mysql(_) => "mysql",
            Inbox::Postgres(_) => "postgres",
            Inbox::Sqlite(_) => "sqlite",
        }
    }
}

impl Drop for TestDb {
    /// Drops the server's database (on a thread of its own: `Drop` cannot await).
    fn drop(&mut self) {
        let Cleanup::Server {
            server,
            admin_url,
            name,
        } = &self.cleanup
        else {
            return;
        };
        let (server, url, sql) = (*server, admin_url.clone(), server.drop_sql(name));
        let dropped = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(server.execute(&url, &sql))
        })
        .join();
        if let Ok(Err(error)) = dropped {
            eprintln!("could not drop test database {}: {error}", self.backend());
        }
    }
}
