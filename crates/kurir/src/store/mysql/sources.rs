//! The inbox gateway's sources on MySQL and MariaDB (see [`crate::store::sources`]). Each write
//! is one statement, locking the one row it writes; reads take no lock.

use sqlx::mysql::MySqlRow;
use sqlx::Row;

use super::MySqlStore;
use crate::gateway::source::InboxSource;
use crate::store::sources::{secrets_json, SourceRow};
use crate::store::Result;

const SOURCE_COLUMNS: &str = "CAST(name AS CHAR) AS name, CAST(scheme AS CHAR) AS scheme, \
    CAST(secrets AS CHAR) AS secrets, tolerance_seconds, CAST(forward_url AS CHAR) AS forward_url, \
    CAST(forward_secret AS CHAR) AS forward_secret, \
    CAST(read_token_sha256 AS CHAR) AS read_token_sha256, created_at, updated_at";

impl MySqlStore {
    /// Inserts unless the name exists; the primary key decides between concurrent creators.
    pub(in crate::store) async fn insert_source(&self, s: &InboxSource) -> Result<bool> {
        let done = sqlx::query(
            "INSERT INTO kurir_inbox_sources (name, scheme, secrets, tolerance_seconds, \
                 forward_url, forward_secret, read_token_sha256, created_at, updated_at) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(&s.name)
        .bind(s.scheme.as_str())
        .bind(secrets_json(s))
        .bind(i64::from(s.tolerance_seconds))
        .bind(&s.forward_url)
        .bind(s.forward_secret.expose())
        .bind(&s.read_token_sha256)
        .bind(s.created_at.naive_utc())
        .bind(s.created_at.naive_utc())
        .execute(&self.pool)
        .await;
        match done {
            Ok(_) => Ok(true),
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// A read.
    pub(in crate::store) async fn get_source(&self, name: &str) -> Result<Option<InboxSource>> {
        let sql = format!("SELECT {SOURCE_COLUMNS} FROM kurir_inbox_sources WHERE name = ?");
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
            sqlx::query_scalar("SELECT CAST(name AS CHAR) FROM kurir_inbox_sources ORDER BY name")
                .fetch_all(&self.pool)
                .await?,
        )
    }

    /// One statement, locking the row.
    pub(in crate::store) async fn save_source(&self, s: &InboxSource) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE kurir_inbox_sources SET scheme = ?, secrets = ?, tolerance_seconds = ?, \
                 forward_url = ?, updated_at = ? \
             WHERE name = ?",
        )
        .bind(s.scheme.as_str())
        .bind(secrets_json(s))
        .bind(i64::from(s.tolerance_seconds))
        .bind(&s.forward_url)
        .bind(s.updated_at.naive_utc())
        .bind(&s.name)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// One statement, locking the row.
    pub(in crate::store) async fn delete_source(&self, name: &str) -> Result<bool> {
        let done = sqlx::query("DELETE FROM kurir_inbox_sources WHERE name = ?")
            .bind(name)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() == 1)
    }
}

fn source_row(r: &MySqlRow) -> Result<SourceRow> {
    Ok(SourceRow {
        name: r.try_get("name")?,
        scheme: r.try_get("scheme")?,
        secrets: r.try_get("secrets")?,
        tolerance_seconds: r.try_get("tolerance_seconds")?,
        forward_url: r.try_get("forward_url")?,
        forward_secret: r.try_get("forward_secret")?,
        read_token_sha256: r.try_get("read_token_sha256")?,
        created_at: r.try_get("created_at")?,
        updated_at: r.try_get("updated_at")?,
    })
}
