//! Changing endpoints on MySQL and MariaDB: each change writes only its own columns.

use std::time::Duration;

use kurir_core::secret::Secret;
use sqlx::{MySql, QueryBuilder};

use super::{MySqlStore, ENDPOINT_COLUMNS};
use crate::endpoint::{Endpoint, EndpointId};
use crate::store::rows::EndpointRow;
use crate::store::{now_millis, push_changes, rotated_sealed, ColumnValue, Result};

impl MySqlStore {
    /// One transaction: the update writing only `changes` (and `updated_at`), which locks the
    /// row, then the row as stored, read under that lock.
    pub(in crate::store) async fn update_endpoint(
        &self,
        id: &EndpointId,
        changes: &[(&'static str, ColumnValue)],
    ) -> Result<Option<Endpoint>> {
        let mut q =
            QueryBuilder::<MySql>::new("UPDATE kurir_endpoints SET updated_at = UTC_TIMESTAMP(3)");
        push_changes(&mut q, changes, "", id.as_str());
        let mut tx = self.pool.begin().await?;
        q.build().execute(&mut *tx).await?;
        let row: Option<EndpointRow> = sqlx::query_as(&format!(
            "SELECT {ENDPOINT_COLUMNS} FROM kurir_endpoints WHERE id = ? AND deleted_at IS NULL"
        ))
        .bind(id.as_str())
        .fetch_optional(&mut *tx)
        .await?;
        tx.commit().await?;
        row.map(|r| r.into_endpoint(&self.secrets)).transpose()
    }

    /// One transaction: reads the secrets `FOR UPDATE` (concurrent rotations take turns), then
    /// writes `secret`, `previous_secrets` and `updated_at`.
    pub(in crate::store) async fn rotate_secret(
        &self,
        id: &EndpointId,
        new: &Secret,
        grace: Duration,
    ) -> Result<Option<Endpoint>> {
        let mut tx = self.pool.begin().await?;
        let stored = sqlx::query_as(
            "SELECT CAST(secret AS CHAR), CAST(previous_secrets AS CHAR) \
             FROM kurir_endpoints WHERE id = ? AND deleted_at IS NULL FOR UPDATE",
        )
        .bind(id.as_str())
        .fetch_optional(&mut *tx)
        .await?;
        let Some(stored) = stored else {
            return Ok(None);
        };
        let previous = rotated_sealed(&self.secrets, id.as_str(), stored, grace, now_millis())?;
        sqlx::query(
            "UPDATE kurir_endpoints SET secret = ?, previous_secrets = ?, \
                 updated_at = UTC_TIMESTAMP(3) WHERE id = ?",
        )
        .bind(self.secrets.seal(new.expose()))
        .bind(previous)
        .bind(id.as_str())
        .execute(&mut *tx)
        .await?;
        let row: EndpointRow = sqlx::query_as(&format!(
            "SELECT {ENDPOINT_COLUMNS} FROM kurir_endpoints WHERE id = ?"
        ))
        .bind(id.as_str())
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Some(row.into_endpoint(&self.secrets)?))
    }
}
