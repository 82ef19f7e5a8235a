//! The rate-limited endpoints' buckets as every process shares them: one `kurir_endpoint_rates`
//! row per endpoint (migration 0008), holding `kurir_core::rate::Bucket`.
//!
//! Written compare-and-set on the row's `version`, like the circuits ([`super::breaker`]):
//! processes taking from one bucket at the same moment take turns without holding a lock, so
//! the limit holds across all of them together.

use std::sync::LazyLock;

use chrono::{DateTime, Utc};
use kurir_core::rate::Bucket;

use super::breaker::{compare_and_set, sqlite};
use super::{now_millis, Result, Store, StoreError};

const ONE: &str = "SELECT tat_us, halvings, throttled_until_ms, version \
    FROM kurir_endpoint_rates WHERE endpoint_id = $1";
const INSERT: &str = "INSERT INTO kurir_endpoint_rates \
    (endpoint_id, tat_us, halvings, throttled_until_ms, version) VALUES ($1, $2, $3, $4, $5 + 1) \
    ON CONFLICT (endpoint_id) DO NOTHING";
const UPDATE: &str = "UPDATE kurir_endpoint_rates SET tat_us = $2, halvings = $3, \
    throttled_until_ms = $4, version = $5 + 1 WHERE endpoint_id = $1 AND version = $5";

static ONE_SQLITE: LazyLock<String> = LazyLock::new(|| sqlite(ONE));
static INSERT_SQLITE: LazyLock<String> = LazyLock::new(|| sqlite(INSERT));
static UPDATE_SQLITE: LazyLock<String> = LazyLock::new(|| sqlite(UPDATE));

impl Store {
    /// One endpoint's bucket and the row's version, if it has a row. No locks.
    pub async fn bucket(&self, endpoint_id: &str) -> Result<Option<(Bucket, i64)>> {
        let row: Option<(i64, i32, Option<i64>, i64)> = match self {
            Store::Postgres(s) => {
                sqlx::query_as(ONE)
                    .bind(endpoint_id)
                    .fetch_optional(s.pool())
                    .await?
            }
            Store::Sqlite(s) => {
                sqlx::query_as(&ONE_SQLITE)
                    .bind(endpoint_id)
                    .fetch_optional(s.pool())
                    .await?
            }
        };
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
        let sql = match (self, version) {
            (Store::Postgres(_), None) => INSERT,
            (Store::Postgres(_), Some(_)) => UPDATE,
            (Store::Sqlite(_), None) => INSERT_SQLITE.as_str(),
            (Store::Sqlite(_), Some(_)) => UPDATE_SQLITE.as_str(),
        };
        macro_rules! bind_all {
            ($q:expr) => {
                $q.bind(endpoint_id)
                    .bind(bucket.tat.timestamp_micros())
                    .bind(i32::try_from(bucket.halvings).unwrap_or(i32::MAX))
                    .bind(bucket.throttled_until.map(|t| t.timestamp_millis()))
                    .bind(version.unwrap_or(0))
            };
        }
        let written = match self {
            Store::Postgres(s) => bind_all!(sqlx::query(sql))
                .execute(s.pool())
                .await?
                .rows_affected(),
            Store::Sqlite(s) => bind_all!(sqlx::query(sql))
                .execute(s.pool())
                .await?
                .rows_affected(),
        };
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
            || Bucket::new(now_millis()),
            |b| Some(change(b)),
        )
        .await?;
        Ok(answer.expect("change always answers"))
    }
}
