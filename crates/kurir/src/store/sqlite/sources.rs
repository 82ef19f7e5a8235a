//! The inbox gateway's sources on SQLite (see [`crate::store::sources`]). Each write is one
//! statement under the database's write lock; reads take a snapshot.

use sqlx::sqlite::SqliteRow;
use sqlx::Row;

use super::SqliteStore;
use crate::gateway::source::InboxSource;
use crate::store::rows::Ts;
use crate::store::sources::{secrets_json, SourceRow};
use crate::store::{sqlite_ts, Result};

const SOURCE_COLUMNS: &str = "name, scheme, secrets, tolerance_seconds, forward_url, \
    forward_secret, read_token_sha256, created_at, updated_at";

impl SqliteStore {
    /// Inserts unless the name exists; the primary key decides between concurrent creators.
    pub(in crate::store) async fn insert_source(&self, s: &InboxSource) -> Result<bool> {
        let done = sqlx::query(
            "INSERT INTO kurir_inbox_sources (name, scheme, secrets, tolerance_seconds, \
                 forward_url, forward_secret, read_token_sha256, created_at, updated_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?8) ON CONFLICT (name) DO NOTHING",
        )
        .bind(&s.name)
        .bind(s.scheme.as_str())
        .bind(secrets_json(s))
        .bind(i64::from(s.tolerance_seconds))
        .bind(&s.forward_url)
        .bind(s.forward_secret.expose())
        .bind(&s.read_token_sha256)
        .bind(sqlite_ts(s.created_at))
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// A read.
    pub(in crate::store) async fn get_source(&self, name: &str) -> Result<Option<InboxSource>> {
        let sql = format!("SELECT {SOURCE_COLUMNS} FROM kurir_inbox_sources WHERE name = ?1");
        let row = sqlx::query(&sql)
            .bind(name)
            .fetch_optional(&self.pool)
            .await?;
        row.map(|r| source_row(&r)?.into_source()).transpose()
    }

    /// A read.
    pub(in crate::store) async fn list_sources(&self) -> Result<Vec<InboxSource>> {
        let sql =
            format!("SELECT {SOURCE_COLUMNS} FROM kurir_inbox_sources ORDER BY created_at, name");
        let rows = sqlx::query(&sql).fetch_all(&self.pool).await?;
        rows.iter().map(|r| source_row(r)?.into_source()).collect()
    }

    /// A read.
    pub(in crate::store) async fn source_names(&self) -> Result<Vec<String>> {
        Ok(
            sqlx::query_scalar("SELECT name FROM kurir_inbox_sources ORDER BY name")
                .fetch_all(&self.pool)
                .await?,
        )
    }

    /// One statement under the write lock.
    pub(in crate::store) async fn save_source(&self, s: &InboxSource) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE kurir_inbox_sources SET scheme = ?2, secrets = ?3, tolerance_seconds = ?4, \
                 forward_url = ?5, updated_at = ?6 \
             WHERE name = ?1",
        )
        .bind(&s.name)
        .bind(s.scheme.as_str())
        .bind(secrets_json(s))
        .bind(i64::from(s.tolerance_seconds))
        .bind(&s.forward_url)
        .bind(sqlite_ts(s.updated_at))
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// One statement under the write lock.
    pub(in crate::store) async fn delete_source(&self, name: &str) -> Result<bool> {
        let done = sqlx::query("DELETE FROM kurir_inbox_sources WHERE name = ?1")
            .bind(name)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() == 1)
    }
}

fn source_row(r: &SqliteRow) -> Result<SourceRow> {
    Ok(SourceRow {
        name: r.try_get("name")?,
        scheme: r.try_get("scheme")?,
        secrets: r.try_get("secrets")?,
        tolerance_seconds: r.try_get("tolerance_seconds")?,
        forward_url: r.try_get("forward_url")?,
        forward_secret: r.try_get("forward_secret")?,
        read_token_sha256: r.try_get("read_token_sha256")?,
        created_at: r.try_get::<Ts, _>("created_at")?.0,
        updated_at: r.try_get::<Ts, _>("updated_at")?.0,
    })
}
