//! The rate-limited endpoints' buckets as every process shares them: one `kurir_endpoint_rates`
//! row per endpoint (migration 0008), holding `kurir_core::rate::Bucket`.
//!
//! Written compare-and-set on the row's `version`, like the circuits ([`super::breaker`]):
//! processes taking from one bucket at the same moment take turns without holding a lock, so
//! the limit holds across all of them together.

use chrono::{DateTime, Utc};
use kurir_core::rate::Bucket;

use super::breaker::compare_and_set;
use super::sql::{execute_on, query_as_on, Sql};
use super::{Result, Store, StoreError};

const ONE: Sql = Sql {
    postgres: "SELECT tat_us, halvings, throttled_until_ms, version \
        FROM kurir_endpoint_rates WHERE endpoint_id = $1",
    sqlite: "SELECT tat_us, halvings, throttled_until_ms, version \
        FROM kurir_endpoint_rates WHERE endpoint_id = ?1",
    mysql: "SELECT tat_us, halvings, throttled_until_ms, version \
        FROM kurir_endpoint_rates WHERE endpoint_id = $1",
};
/// `version` is the one expected (the row gets the next).
const INSERT: Sql = Sql {
    postgres: "INSERT INTO kurir_endpoint_rates \
        (endpoint_id, tat_us, halvings, throttled_until_ms, version) \
        VALUES ($1, $2, $3, $4, $5 + 1) ON CONFLICT (endpoint_id) DO NOTHING",
    sqlite: "INSERT INTO kurir_endpoint_rates \
        (endpoint_id, tat_us, halvings, throttled_until_ms, version) \
        VALUES (?1, ?2, ?3, ?4, ?5 + 1) ON CONFLICT (endpoint_id) DO NOTHING",
    mysql: "INSERT IGNORE INTO kurir_endpoint_rates \
        (endpoint_id, tat_us, halvings, throttled_until_ms, version) \
        VALUES ($1, $2, $3, $4, $5 + 1)",
};
const UPDATE: Sql = Sql {
    postgres: "UPDATE kurir_endpoint_rates SET tat_us = $2, halvings = $3, \
        throttled_until_ms = $4, version = $5 + 1 WHERE endpoint_id = $1 AND version = $5",
    sqlite: "UPDATE kurir_endpoint_rates SET tat_us = ?2, halvings = ?3, \
        throttled_until_ms = ?4, version = ?5 + 1 WHERE endpoint_id = ?1 AND version = ?5",
    mysql: "UPDATE kurir_endpoint_rates SET tat_us = $2, halvings = $3, \
        throttled_until_ms = $4, version = $5 + 1 WHERE endpoint_id = $1 AND version = $5",
};

impl Store {
    /// One endpoint's bucket and the row's version, if it has a row. No locks.
    pub async fn bucket(&self, endpoint_id: &str) -> Result<Option<(Bucket, i64)>> {
        let row: Option<(i64, i32, Option<i64>, i64)> =
            query_as_on!(self, ONE, fetch_optional, endpoint_id)?;
        let Some((tat_us, halvings, until_ms, version)) = row else {
            return Ok(None);
        };
        let corrupt = || StoreError::Corrupt {
            table: "kurir_endpoint_rates",
            message: format!("a time of {endpoint_id}"),
        };
        let bucket = Bucket {
            tat: DateTime::from_timestamp_micros(tat_us).ok_or_else(corrupt)?,
            halvings: u32::try_from(halvings).unwrap_or(0),
            throttled_until: until_ms
                .map(|ms| DateTime::<Utc>::from_timestamp_millis(ms).ok_or_else(corrupt))
                .transpose()?,
        };
        Ok(Some((bucket, version)))
    }

    /// Writes `bucket` if the row is still at `version` (`None`: no row yet); whether it was
    /// written. One statement.
    pub async fn save_bucket(
        &self,
        endpoint_id: &str,
        bucket: &Bucket,
        version: Option<i64>,
    ) -> Result<bool> {
        let sql = if version.is_some() { UPDATE } else { INSERT };
        let written = execute_on!(
            self,
            sql,
            endpoint_id,
            bucket.tat.timestamp_micros(),
            i32::try_from(bucket.halvings).unwrap_or(i32::MAX),
            bucket.throttled_until.map(|t| t.timestamp_millis()),
            version.unwrap_or(0),
        )?;
        Ok(written == 1)
    }

    /// Reads `endpoint_id`'s bucket (full without a row), lets `change` modify it and writes it
    /// back, compare-and-set: when another process wrote the row in between, reads it again and
    /// re-applies `change`. Returns what `change` answered.
    pub async fn update_bucket<T>(
        &self,
        endpoint_id: &str,
        mut change: impl FnMut(&mut Bucket) -> T,
    ) -> Result<T> {
        let (_, answer) = compare_and_set(
            "kurir_endpoint_rates",
            endpoint_id,
            || self.bucket(endpoint_id),
            |b: Bucket, version| async move { self.save_bucket(endpoint_id, &b, version).await },
            || Bucket::new(self.clock().now_millis()),
            |b| Some(change(b)),
        )
        .await?;
        Ok(answer.expect("change always answers"))
    }
}
