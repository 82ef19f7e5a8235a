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
            Backend::Sqlite => {
                let path: PathBuf = dir.join(format!("{name}.db"));
                format!("sqlite://{}", path.display())
            }
            server => {
                on_server(server, server_url, &format!("CREATE DATABASE {name}")).await?;
                database_url(server_url, &name)?
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
            Backend::Sqlite => {
                let path = self.url.trim_start_matches("sqlite://");
                for suffix in ["", "-wal", "-shm"] {
                    let _ = std::fs::remove_file(format!("{path}{suffix}"));
                }
            }
            server => {
                // PostgreSQL's FORCE: kurir's pool may still hold connections to it.
                let force = if server == Backend::Postgres {
                    " WITH (FORCE)"
                } else {
                    ""
                };
                let drop = format!("DROP DATABASE IF EXISTS {}{force}", self.name);
                on_server(server, &self.server_url, &drop).await?;
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

/// Runs one statement (creating or dropping a scenario's database) on the `backend` server at
/// `server_url`, over a connection of its own.
async fn on_server(backend: Backend, server_url: &str, sql: &str) -> anyhow::Result<()> {
    match backend {
        Backend::Postgres => {
            let hint = "PostgreSQL (see --database-url)";
            execute_once::<sqlx::PgConnection>(server_url, sql, hint).await
        }
        Backend::Mysql => {
            execute_once::<sqlx::MySqlConnection>(server_url, sql, "MySQL (see --mysql-url)").await
        }
        Backend::Sqlite => anyhow::bail!("SQLite has no server to run `{sql}` on"),
    }
}

/// `server` names the server in the error when it cannot be reached (with the flag giving its
/// URL).
async fn execute_once<C>(server_url: &str, sql: &str, server: &str) -> anyhow::Result<()>
where
    C: Connection,
    for<'c> &'c mut C: sqlx::Executor<'c, Database = C::Database>,
{
    let mut admin = C::connect(server_url)
        .await
        .with_context(|| format!("cannot connect to {server}"))?;
    sqlx::raw_sql(sql).execute(&mut admin).await?;
    admin.close().await?;
    Ok(())
}

/// `server_url` naming the database `name`.
fn database_url(server_url: &str, name: &str) -> anyhow::Result<String> {
    let mut url = url::Url::parse(server_url)?;
    url.set_path(&format!("/{name}"));
    Ok(url.to_string())
}
