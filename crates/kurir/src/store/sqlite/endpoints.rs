//! Changing endpoints on SQLite: each change writes only its own columns.

use std::time::Duration;

use kurir_core::secret::Secret;
use sqlx::{QueryBuilder, Sqlite};

use super::{SqliteStore, ENDPOINT_COLUMNS};
use crate::endpoint::{Endpoint, EndpointId};
use crate::store::rows::EndpointRow;
use crate::store::{now_millis, push_changes, rotated_sealed, sqlite_ts, ColumnValue, Result};

impl SqliteStore {
    /// One statement writing only `changes` (and `updated_at`), under SQLite's write lock;
    /// answers the row as stored.
    pub(in crate::store) async fn update_endpoint(
        &self,
        id: &EndpointId,
        changes: &[(&'static str, ColumnValue)],
    ) -> Result<Option<Endpoint>> {
        let mut q = QueryBuilder::<Sqlite>::new("UPDATE kurir_endpoints SET updated_at = ");
        q.push_bind(sqlite_ts(now_millis()));
        push_changes(&mut q, changes, "", id.as_str());
        q.push(" RETURNING ").push(ENDPOINT_COLUMNS);
        let row: Option<EndpointRow> = q.build_query_as().fetch_optional(&self.pool).await?;
        row.map(|r| r.into_endpoint(&self.secrets)).transpose()
    }

    /// One `BEGIN IMMEDIATE` transaction (the write lock first, so no other writer comes in
    /// between the read and the write): reads the secrets, then writes `secret`,
    /// `previous_secrets` and `updated_at`.
    pub(in crate::store) async fn rotate_secret(
        &self,
        id: &EndpointId,
        new: &Secret,
        grace: Duration,
    ) -> Result<Option<Endpoint>> {
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        let stored = sqlx::query_as(
            "SELECT secret, previous_secrets FROM kurir_endpoints \
             WHERE id = ?1 AND deleted_at IS NULL",
        )
        .bind(id.as_str())
        .fetch_optional(&mut *tx)
        .await?;
        let Some(stored) = stored else {
            return Ok(None);
        };
        let now = now_millis();
        let previous = rotated_sealed(&self.secrets, id.as_str(), stored, grace, now)?;
        let sql = format!(
            "UPDATE kurir_endpoints SET secret = ?2, previous_secrets = ?3, updated_at = ?4 \
             WHERE id = ?1 RETURNING {ENDPOINT_COLUMNS}"
        );
        let row: EndpointRow = sqlx::query_as(&sql)
            .bind(id.as_str())
            .bind(self.secrets.seal(new.expose()))
            .bind(previous)
            .bind(sqlite_ts(now))
            .fetch_one(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(Some(row.into_endpoint(&self.secrets)?))
    }
}
