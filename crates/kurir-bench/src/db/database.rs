//! A fresh database per scenario: created on the server (or as a file), dropped after.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use anyhow::Context;
use sqlx::mysql::{MySqlConnectOptions, MySqlPoolOptions};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::Connection;

use super::{AppPool, Backend};

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A fresh database for one scenario.
pub struct Database {
    /// Its backend.
    pub backend: Backend,
    /// Its URL, for kurir.
    pub url: String,
    server_url: String,
    name: String,
}

impl Database {
    /// Creates an empty database: on PostgreSQL a new database on the server at `server_url`,
    /// on SQLite a new file in `dir`.
    pub async fn create(backend: Backend, server_url: &str, dir: &Path) -> anyhow::Result<Self> {
        let name = format!(
            "kurir_bench_{}_{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let url = match backend {
            Backend::Postgres => {
                let mut admin = sqlx::PgConnection::connect(server_url)
                    .await
                    .with_context(|| "cannot connect to PostgreSQL (see --database-url)")?;
                sqlx::query(&format!("CREATE DATABASE {name}"))
                    .execute(&mut admin)
                    .await?;
                admin.close().await?;
                let mut url = url::Url::parse(server_url)?;
                url.set_path(&format!("/{name}"));
                url.to_string()
            }
            Backend::Sqlite => {
                let path: PathBuf = dir.join(format!("{name}.db"));
                format!("sqlite://{}", path.display())
            }
            Backend::Mysql => {
                let mut admin = sqlx::MySqlConnection::connect(server_url)
                    .await
                    .with_context(|| "cannot connect to MySQL (see --mysql-url)")?;
                sqlx::query(&format!("CREATE DATABASE {name}"))
                    .execute(&mut admin)
                    .await?;
                admin.close().await?;
                let mut url = url::Url::parse(server_url)?;
                url.set_path(&format!("/{name}"));
                url.to_string()
            }
        };
        Ok(Self {
            backend,
            url,
            server_url: server_url.to_owned(),
            name,
        })
    }

    /// Removes the database (PostgreSQL: `DROP DATABASE … WITH (FORCE)`; SQLite: the files).
    pub async fn remove(self) -> anyhow::Result<()> {
        match self.backend {
            Backend::Postgres => {
                let mut admin = sqlx::PgConnection::connect(&self.server_url).await?;
                sqlx::query(&format!(
                    "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                    self.name
                ))
                .execute(&mut admin)
                .await?;
                admin.close().await?;
            }
            Backend::Sqlite => {
                let path = self.url.trim_start_matches("sqlite://");
                for suffix in ["", "-wal", "-shm"] {
                    let _ = std::fs::remove_file(format!("{path}{suffix}"));
                }
            }
            Backend::Mysql => {
                let mut admin = sqlx::MySqlConnection::connect(&self.server_url).await?;
                sqlx::query(&format!("DROP DATABASE IF EXISTS {}", self.name))
                    .execute(&mut admin)
                    .await?;
                admin.close().await?;
            }
        }
        Ok(())
    }

    /// Transactions committed or rolled back in this database so far, as the server counts
    /// them (`pg_stat_database`, read from another database so the reading is not counted;
    /// each backend reports at most about a second late). `None` on SQLite, and on MySQL, which
    /// counts commits per server, not per database.
    pub async fn transactions(&self) -> anyhow::Result<Option<i64>> {
        if self.backend != Backend::Postgres {
            return Ok(None);
        }
        let mut admin = sqlx::PgConnection::connect(&self.server_url).await?;
        let n: i64 = sqlx::query_scalar(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = $1",
        )
        .bind(&self.name)
        .fetch_one(&mut admin)
        .await?;
        admin.close().await?;
        Ok(Some(n))
    }

    /// kurir's store on this database, migrated (kurir's and the receiver's tables).
    pub async fn store(&self) -> anyhow::Result<kurir::store::Store> {
        let store = kurir::store::Store::connect(&self.url).await?;
        store.migrate().await?;
        Ok(store)
    }

    /// A connection pool of `size` for the benchmark acting as the application.
    pub async fn app_pool(&self, size: u32) -> anyhow::Result<AppPool> {
        Ok(match self.backend {
            Backend::Postgres => AppPool::Postgres(
                PgPoolOptions::new()
                    .max_connections(size)
                    .min_connections(size)
                    .connect_with(PgConnectOptions::from_str(&self.url)?)
                    .await?,
            ),
            Backend::Sqlite => AppPool::Sqlite(
                SqlitePoolOptions::new()
                    .max_connections(size)
                    .connect_with(
                        SqliteConnectOptions::from_str(&self.url)?
                            .create_if_missing(true)
                            .journal_mode(SqliteJournalMode::Wal)
                            .synchronous(SqliteSynchronous::Full)
                            .busy_timeout(Duration::from_secs(30)),
                    )
                    .await?,
            ),
            // The server's own defaults (REPEATABLE READ), as an application's pool has them.
            Backend::Mysql => AppPool::Mysql(
                MySqlPoolOptions::new()
                    .max_connections(size)
                    .min_connections(size)
                    .connect_with(MySqlConnectOptions::from_str(&self.url)?)
                    .await?,
            ),
        })
    }
}
