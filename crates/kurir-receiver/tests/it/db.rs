//! A fresh, migrated database per test: SQLite in a temporary directory, or a new PostgreSQL
//! database `kurir_rcv_<random>` created through `KURIR_TEST_POSTGRES_URL`, or a new MySQL/MariaDB
//! one through `KURIR_TEST_MYSQL_URL`, dropped afterwards.

use std::str::FromStr;
use std::time::Duration;

use kurir_receiver::Inbox;
use sqlx::mysql::{MySqlConnectOptions, MySqlPoolOptions};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};
use sqlx::{Connection, Executor};

const PG_URL_VAR: &str = "KURIR_TEST_POSTGRES_URL";
const MYSQL_URL_VAR: &str = "KURIR_TEST_MYSQL_URL";

/// One test's database.
pub struct TestDb {
    /// The inbox over it, migrated.
    pub inbox: Inbox,
    cleanup: Cleanup,
}

enum Cleanup {
    Sqlite(#[allow(dead_code)] tempfile::TempDir),
    Postgres {
        admin: Box<PgConnectOptions>,
        name: String,
    },
    Mysql {
        admin: Box<MySqlConnectOptions>,
        name: String,
    },
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

    /// A new database on the server at `KURIR_TEST_MYSQL_URL`; `None` (after a notice) when the
    /// variable is unset outside CI.
    pub async fn mysql_empty() -> Option<TestDb> {
        let Ok(url) = std::env::var(MYSQL_URL_VAR) else {
            assert!(
                std::env::var_os("CI").is_none(),
                "{MYSQL_URL_VAR} must be set in CI: the MySQL tests cannot be skipped there"
            );
            eprintln!("notice: {MYSQL_URL_VAR} is unset, skipping the MySQL run of this test");
            return None;
        };
        let admin = MySqlConnectOptions::from_str(&url).unwrap();
        let name = format!("kurir_rcv_{}", uuid::Uuid::now_v7().simple());
        let mut conn = sqlx::MySqlConnection::connect_with(&admin)
            .await
            .unwrap_or_else(|e| panic!("MySQL at {MYSQL_URL_VAR} is unreachable: {e}"));
        conn.execute(format!("CREATE DATABASE {name}").as_str())
            .await
            .unwrap();
        conn.close().await.unwrap();
        let pool = MySqlPoolOptions::new()
            .max_connections(10)
            .connect_with(admin.clone().database(&name))
            .await
            .unwrap();
        Some(TestDb {
            inbox: Inbox::from(pool),
            cleanup: Cleanup::Mysql {
                admin: Box::new(admin),
                name,
            },
        })
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
        let Ok(url) = std::env::var(PG_URL_VAR) else {
            assert!(
                std::env::var_os("CI").is_none(),
                "{PG_URL_VAR} must be set in CI: the PostgreSQL tests cannot be skipped there"
            );
            eprintln!("notice: {PG_URL_VAR} is unset, skipping the PostgreSQL run of this test");
            return None;
        };
        let admin = PgConnectOptions::from_str(&url).unwrap();
        let name = format!("kurir_rcv_{}", uuid::Uuid::now_v7().simple());
        let mut conn = sqlx::PgConnection::connect_with(&admin)
            .await
            .unwrap_or_else(|e| panic!("PostgreSQL at {PG_URL_VAR} is unreachable: {e}"));
        conn.execute(format!("CREATE DATABASE {name}").as_str())
            .await
            .unwrap();
        conn.close().await.unwrap();
        let pool = PgPoolOptions::new()
            .max_connections(10)
            .connect_with(admin.clone().database(&name))
            .await
            .unwrap();
        Some(TestDb {
            inbox: Inbox::from(pool),
            cleanup: Cleanup::Postgres {
                admin: Box::new(admin),
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
        if let Cleanup::Mysql { admin, name } = &self.cleanup {
            let (admin, name) = (admin.as_ref().clone(), name.clone());
            let dropped = std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                runtime.block_on(async {
                    let mut conn = sqlx::MySqlConnection::connect_with(&admin).await?;
                    conn.execute(format!("DROP DATABASE IF EXISTS {name}").as_str())
                        .await?;
                    conn.close().await
                })
            })
            .join();
            if let Ok(Err(error)) = dropped {
                eprintln!("could not drop test database mysql: {error}");
            }
            return;
        }
        let Cleanup::Postgres { admin, name } = &self.cleanup else {
            return;
        };
        let (admin, name) = (admin.as_ref().clone(), name.clone());
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let mut conn = sqlx::PgConnection::connect_with(&admin).await?;
                conn.execute(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)").as_str())
                    .await?;
                conn.close().await
            })
        })
        .join();
        if let Ok(Err(error)) = dropped {
            eprintln!("could not drop test database {}: {error}", self.backend());
        }
    }
}
