//! Changing endpoints on PostgreSQL: each change writes only its own columns.

use std::time::Duration;

use kurir_core::secret::Secret;
use sqlx::{Postgres, QueryBuilder};

use super::{PgStore, ENDPOINT_COLUMNS};
use crate::endpoint::{Endpoint, EndpointId};
use crate::store::rows::EndpointRow;
use crate::store::{now_millis, push_changes, rotated_sealed, ColumnValue, Result};

impl PgStore {
    /// One statement writing only `changes` (and `updated_at`); it waits for the row's lock
    /// like any update, and answers the row as stored.
    pub(in crate::store) async fn update_endpoint(
        &self,
        id: &EndpointId,
        changes: &[(&'static str, ColumnValue)],
    ) -> Result<Option<Endpoint>> {
        let mut q = QueryBuilder::<Postgres>::new("UPDATE kurir_endpoints SET updated_at = now()");
        push_changes(&mut q, changes, "::json", id.as_str());
        q.push(" RETURNING ").push(ENDPOINT_COLUMNS);
        let row: Option<EndpointRow> = q.build_query_as().fetch_optional(&self.pool).await?;
        row.map(|r| r.into_endpoint(&self.secrets)).transpose()
    }

    /// One transaction: reads the secrets `FOR UPDATE` (a concurrent rotation or update of the
    /// row waits), then writes `secret`, `previous_secrets` and `updated_at`.
    pub(in crate::store) async fn rotate_secret(
        &self,
        id: &EndpointId,
        new: &Secret,
        grace: Duration,
    ) -> Result<Option<Endpoint>> {
        let mut tx = self.pool.begin().await?;
        let stored = sqlx::query_as(
            "SELECT secret, previous_secrets::text FROM kurir_endpoints \
             WHERE id = $1 AND deleted_at IS NULL FOR UPDATE",
        )
        .bind(id.as_str())
        .fetch_optional(&mut *tx)
        .await?;
        let Some(stored) = stored else {
            return Ok(None);
        };
        let previous = rotated_sealed(&self.secrets, id.as_str(), stored, grace, now_millis())?;
        let sql = format!(
            "UPDATE kurir_endpoints SET secret = $2, previous_secrets = $3::json, \
             updated_at = now() WHERE id = $1 RETURNING {ENDPOINT_COLUMNS}"
        );
        let row: EndpointRow = sqlx::query_as(&sql)
            .bind(id.as_str())
            .bind(self.secrets.seal(new.expose()))
            .bind(previous)
            .fetch_one(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(Some(row.into_endpoint(&self.secrets)?))
    }
}
