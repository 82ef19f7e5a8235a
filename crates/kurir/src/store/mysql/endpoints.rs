//! Changing endpoints on MySQL and MariaDB: each change writes only its own columns.

use std::time::Duration;

use kurir_core::secret::Secret;
use sqlx::{MySql, QueryBuilder, Row};

use super::{MySqlStore, ENDPOINT_COLUMNS};
use crate::endpoint::{Endpoint, EndpointId};
use crate::store::rows::EndpointRow;
use crate::store::{now_millis, rotated_secrets, ColumnValue, Result};

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
        for (column, value) in changes {
            q.push(", ").push(*column).push(" = ");
            match value.clone() {
                ColumnValue::Text(v) | ColumnValue::Json(v) => q.push_bind(v),
                ColumnValue::NullableText(v) => q.push_bind(v),
                ColumnValue::Bool(v) => q.push_bind(v),
                ColumnValue::Int(v) => q.push_bind(v),
            };
        }
        // A tombstone (a deleted endpoint) is no endpoint: never changed, never revived.
        q.push(" WHERE deleted_at IS NULL AND id = ")
            .push_bind(id.as_str());
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
        let row = sqlx::query(
            "SELECT CAST(secret AS CHAR) AS secret, \
                 CAST(previous_secrets AS CHAR) AS previous_secrets \
             FROM kurir_endpoints WHERE id = ? AND deleted_at IS NULL FOR UPDATE",
        )
        .bind(id.as_str())
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let previous = rotated_secrets(
            id.as_str(),
            &self.secrets.open(row.try_get("secret")?)?,
            &self.secrets.open_list(row.try_get("previous_secrets")?)?,
            grace,
            now_millis(),
        )?;
        sqlx::query(
            "UPDATE kurir_endpoints SET secret = ?, previous_secrets = ?, \
                 updated_at = UTC_TIMESTAMP(3) WHERE id = ?",
        )
        .bind(self.secrets.seal(new.expose()))
        .bind(self.secrets.seal_list(&previous)?)
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
