//! Changing an endpoint, written once for every dialect: an update writes only the columns it
//! changes ([`endpoint_changes`]), and a rotation the secrets as they follow from the row read
//! under its lock ([`rotated_secrets`]). Each answers the row as stored: PostgreSQL and SQLite
//! return it from the update; MySQL has no `RETURNING` on an update, so it reads the row after
//! its update, in the same transaction, under the lock the update took. `updated_at` is the
//! database's clock on every dialect.

use std::time::Duration;

use chrono::{DateTime, Utc};
use kurir_core::secret::Secret;

use super::rows::{endpoint_columns, EndpointRow};
use super::sql::{run_in, Sql};
use super::{Result, Store, StoreError};
use crate::endpoint::{Endpoint, EndpointId, EndpointUpdate};

/// The start of an endpoint update, which [`update_query`] goes on with: `updated_at` now.
const UPDATE: Sql = Sql {
    postgres: "UPDATE kurir_endpoints SET updated_at = now()",
    sqlite: "UPDATE kurir_endpoints SET updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')",
    mysql: "UPDATE kurir_endpoints SET updated_at = UTC_TIMESTAMP(3)",
};

/// What follows an update on the dialects whose update returns the row (MySQL's does not).
const RETURNING: Sql = Sql {
    postgres: concat!(" RETURNING ", endpoint_columns!(postgres)),
    sqlite: concat!(" RETURNING ", endpoint_columns!(sqlite)),
    mysql: "",
};

/// A live endpoint's row on MySQL, read after its update; binds the id.
const LIVE_ENDPOINT_MYSQL: &str = concat!(
    "SELECT ",
    endpoint_columns!(mysql),
    " FROM kurir_endpoints WHERE id = ? AND deleted_at IS NULL"
);

/// A live endpoint's secrets, locked until the transaction ends (on SQLite, whose
/// `BEGIN IMMEDIATE` already holds the write lock, no lock of its own); binds the id.
const SECRETS: Sql = Sql {
    postgres: "SELECT secret, previous_secrets::text FROM kurir_endpoints \
        WHERE id = $1 AND deleted_at IS NULL FOR UPDATE",
    sqlite: "SELECT secret, previous_secrets FROM kurir_endpoints \
        WHERE id = ?1 AND deleted_at IS NULL",
    mysql: "SELECT CAST(secret AS CHAR), CAST(previous_secrets AS CHAR) FROM kurir_endpoints \
        WHERE id = $1 AND deleted_at IS NULL FOR UPDATE",
};

/// The rotation's write; binds the id, the sealed secret, the sealed `previous_secrets`.
const ROTATE: Sql = Sql {
    postgres: concat!(
        "UPDATE kurir_endpoints SET secret = $2, previous_secrets = $3::json, \
         updated_at = now() WHERE id = $1 RETURNING ",
        endpoint_columns!(postgres)
    ),
    sqlite: concat!(
        "UPDATE kurir_endpoints SET secret = ?2, previous_secrets = ?3, \
         updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') WHERE id = ?1 RETURNING ",
        endpoint_columns!(sqlite)
    ),
    mysql: "UPDATE kurir_endpoints SET secret = $2, previous_secrets = $3, \
        updated_at = UTC_TIMESTAMP(3) WHERE id = $1",
};

/// Runs `$sql`, an update of endpoint `$id` (its first bind) in `$dialect`, on transaction
/// `$tx`: the row as stored after it, `None` if there is no such live endpoint.
macro_rules! updated_row {
    ($tx:expr, mysql, $sql:expr, $id:expr $(, $bind:expr)*) => {{
        run_in!($tx, mysql, $sql, query, execute, $id $(, $bind)*)?;
        super::directory::stamp_mysql(&mut $tx, &[$id]).await?;
        sqlx::query_as(LIVE_ENDPOINT_MYSQL).bind($id).fetch_optional(&mut *$tx).await?
    }};
    ($tx:expr, $dialect:ident, $sql:expr $(, $bind:expr)*) => {
        run_in!($tx, $dialect, $sql, query_as, fetch_optional $(, $bind)*)?
    };
}

/// [`Store::rotate_secret`] in `$dialect`, in a transaction begun by `$begin`: reads the secrets
/// under the row's lock, then writes them.
macro_rules! rotate {
    ($begin:expr, $dialect:ident, $codec:expr, $id:expr, $new:expr, $grace:expr, $now:expr) => {{
        let mut tx = $begin.await?;
        let stored: Option<(String, String)> =
            run_in!(tx, $dialect, SECRETS, query_as, fetch_optional, $id)?;
        let Some(stored) = stored else {
            return Ok(None);
        };
        let previous = rotated_sealed($codec, $id, stored, $grace, $now)?;
        let secret = $codec.seal($new.expose());
        let row: Option<EndpointRow> = updated_row!(tx, $dialect, ROTATE, $id, &secret, &previous);
        tx.commit().await?;
        row
    }};
}

impl Store {
    /// Applies `update` and returns the endpoint as stored, or `None` if it does not exist.
    /// Only the columns of the fields given are written, in one statement, so a concurrent
    /// change to other fields (a `410` disabling the endpoint, a secret rotation) stays. The
    /// update waits for the row's lock like any update (SQLite: the write lock).
    pub async fn update_endpoint(
        &self,
        id: &EndpointId,
        update: EndpointUpdate,
    ) -> Result<Option<Endpoint>> {
        let changes = endpoint_changes(&update);
        let id = id.as_str();
        let row: Option<EndpointRow> = match self {
            Store::Postgres(s) => {
                let mut q = update_query(UPDATE.postgres, &changes, "::json", id);
                q.push(RETURNING.postgres)
                    .build_query_as()
                    .fetch_optional(s.pool())
                    .await?
            }
            Store::Sqlite(s) => {
                let mut q = update_query(UPDATE.sqlite, &changes, "", id);
                q.push(RETURNING.sqlite)
                    .build_query_as()
                    .fetch_optional(s.pool())
                    .await?
            }
            Store::Mysql(s) => {
                let mut tx = s.pool().begin().await?;
                let mut q = update_query(UPDATE.mysql, &changes, "", id);
                q.build().execute(&mut *tx).await?;
                super::directory::stamp_mysql(&mut tx, &[id]).await?;
                let row = sqlx::query_as(LIVE_ENDPOINT_MYSQL)
                    .bind(id)
                    .fetch_optional(&mut *tx)
                    .await?;
                tx.commit().await?;
                row
            }
        };
        self.refresh_directory().await;
        row.map(|r| r.into_endpoint(self.secrets())).transpose()
    }

    /// Makes `new_secret` current; the old secret keeps signing until `grace` has passed.
    /// Rotated-out secrets that have already expired are dropped. Reads and writes the secrets
    /// under the row's lock (SQLite: the write lock, taken first by `BEGIN IMMEDIATE`), so
    /// concurrent rotations take turns and each keeps the secret it replaced signing for its
    /// grace period.
    pub async fn rotate_secret(
        &self,
        id: &EndpointId,
        new_secret: Secret,
        grace: Duration,
    ) -> Result<Option<Endpoint>> {
        let (id, codec, now) = (id.as_str(), self.secrets(), self.clock().now_millis());
        let row = match self {
            Store::Postgres(s) => {
                rotate!(
                    s.pool().begin(),
                    postgres,
                    codec,
                    id,
                    new_secret,
                    grace,
                    now
                )
            }
            Store::Sqlite(s) => {
                let begin = s.pool().begin_with("BEGIN IMMEDIATE");
                rotate!(begin, sqlite, codec, id, new_secret, grace, now)
            }
            Store::Mysql(s) => rotate!(s.pool().begin(), mysql, codec, id, new_secret, grace, now),
        };
        row.map(|r| r.into_endpoint(codec)).transpose()
    }
}

/// A value an endpoint update writes into one column.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum ColumnValue {
    Text(String),
    NullableText(Option<String>),
    /// JSON, as text.
    Json(String),
    Bool(bool),
    Int(Option<i64>),
}

/// The columns `update` writes, with their values, and nothing else: enabling an endpoint
/// clears `disabled_reason`, disabling sets it (to `NULL` without a reason).
fn endpoint_changes(update: &EndpointUpdate) -> Vec<(&'static str, ColumnValue)> {
    use ColumnValue::*;
    let mut changes = Vec::new();
    if let Some(url) = &update.url {
        changes.push(("url", Text(url.clone())));
    }
    if let Some(d) = &update.description {
        changes.push(("description", Text(d.clone())));
    }
    if let Some(f) = &update.event_types {
        let json = serde_json::to_string(f).unwrap_or_else(|_| "[]".into());
        changes.push(("event_types", Json(json)));
    }
    if let Some(enabled) = update.enabled {
        let reason = (!enabled).then(|| update.disabled_reason.clone()).flatten();
        changes.push(("enabled", Bool(enabled)));
        changes.push(("disabled_reason", NullableText(reason)));
    }
    if let Some(m) = update.max_in_flight {
        changes.push(("max_in_flight", Int(Some(m.into()))));
    }
    if let Some(limit) = update.rate_limit_per_second {
        changes.push(("rate_limit_per_second", Int(limit.map(i64::from))));
    }
    if let Some(o) = update.ordering {
        changes.push(("ordering", Text(o.as_str().into())));
    }
    if let Some(p) = update.ordering_on_dead_letter {
        changes.push(("ordering_on_dead_letter", Text(p.as_str().into())));
    }
    let o = &update.overrides;
    let ms = |v: Option<u64>| v.map(|v| i64::try_from(v).unwrap_or(i64::MAX));
    for (column, change) in [
        (
            "connect_timeout_ms",
            o.connect_timeout_ms.map(|v| v.map(u64::from)),
        ),
        (
            "request_timeout_ms",
            o.request_timeout_ms.map(|v| v.map(u64::from)),
        ),
        ("retry_initial_delay_ms", o.retry_initial_delay_ms),
        ("retry_max_delay_ms", o.retry_max_delay_ms),
        (
            "retry_max_attempts",
            o.retry_max_attempts.map(|v| v.map(u64::from)),
        ),
        (
            "circuit_failure_threshold",
            o.circuit_failure_threshold.map(|v| v.map(u64::from)),
        ),
        ("circuit_cooldown_ms", o.circuit_cooldown_ms),
    ] {
        if let Some(value) = change {
            changes.push((column, Int(ms(value))));
        }
    }
    changes
}

/// The secret columns after making `new` current at `now`, from the stored `secret` and
/// `previous_secrets` (JSON) of endpoint `id`: the old secret signs for `grace` more (none when
/// zero), and rotated-out secrets already expired are dropped. Returns the new
/// `previous_secrets` as JSON.
fn rotated_secrets(
    id: &str,
    secret: &str,
    previous: &str,
    grace: Duration,
    now: DateTime<Utc>,
) -> Result<String> {
    let corrupt = |m: String| StoreError::Corrupt {
        table: "kurir_endpoints",
        message: m,
    };
    let old = Secret::parse(secret).map_err(|e| corrupt(format!("secret of {id}: {e}")))?;
    let mut previous: Vec<crate::endpoint::PreviousSecret> = serde_json::from_str(previous)
        .map_err(|e| corrupt(format!("previous_secrets of {id}: {e}")))?;
    previous.retain(|p| p.expires_at > now);
    if !grace.is_zero() {
        let expires_at = now + chrono::Duration::from_std(grace).unwrap_or(chrono::Duration::MAX);
        let old = crate::endpoint::PreviousSecret {
            secret: old,
            expires_at,
        };
        previous.insert(0, old);
    }
    serde_json::to_string(&previous).map_err(|e| corrupt(format!("previous_secrets of {id}: {e}")))
}

/// An `UPDATE kurir_endpoints` from `start` (its `SET updated_at = …`), with each of `changes`
/// (`, column = value`), then the condition naming endpoint `id`. `json_cast` follows a JSON
/// value's placeholder (PostgreSQL's `::json`; the other dialects keep JSON as text).
fn update_query<'a, DB>(
    start: &str,
    changes: &[(&'static str, ColumnValue)],
    json_cast: &str,
    id: &'a str,
) -> sqlx::QueryBuilder<'a, DB>
where
    DB: sqlx::Database,
    String: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    Option<String>: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    bool: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    Option<i64>: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    &'a str: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
{
    let mut q = sqlx::QueryBuilder::new(start);
    for (column, value) in changes {
        q.push(", ").push(*column).push(" = ");
        match value.clone() {
            ColumnValue::Text(v) => q.push_bind(v),
            ColumnValue::Json(v) => q.push_bind(v).push(json_cast),
            ColumnValue::NullableText(v) => q.push_bind(v),
            ColumnValue::Bool(v) => q.push_bind(v),
            ColumnValue::Int(v) => q.push_bind(v),
        };
    }
    // A tombstone (a deleted endpoint) is no endpoint: never changed, never revived.
    q.push(" WHERE deleted_at IS NULL AND id = ").push_bind(id);
    q
}

/// [`rotated_secrets`] over the columns as stored (`secret` and `previous_secrets`, each sealed
/// with `codec`): the new `previous_secrets`, sealed.
fn rotated_sealed(
    codec: &super::SecretCodec,
    id: &str,
    (secret, previous): (String, String),
    grace: Duration,
    now: DateTime<Utc>,
) -> Result<String> {
    let previous = rotated_secrets(
        id,
        &codec.open(&secret)?,
        &codec.open_list(&previous)?,
        grace,
        now,
    )?;
    codec.seal_list(&previous)
}

/// Binds `e`'s columns up to `disabled_reason` on query `q`, the same on every dialect (the
/// first placeholders of an endpoint insert). A macro: it needs none of the dialect bounds a
/// generic function would repeat.
macro_rules! bind_endpoint_text {
    ($q:expr, $e:expr, $codec:expr) => {
        $q.bind($e.id.as_str())
            .bind(&$e.url)
            .bind(&$e.description)
            .bind(serde_json::to_string(&$e.event_types).unwrap_or_else(|_| "[]".into()))
            .bind($codec.seal($e.secret.expose()))
            .bind($codec.seal_previous(&$e.previous_secrets))
            .bind($e.enabled)
            .bind($e.disabled_reason.as_deref())
    };
}
pub(crate) use bind_endpoint_text;

/// Binds `e`'s columns, in the order of an endpoint insert's placeholders, on a dialect whose
/// integer columns all take an `i64` (SQLite, MySQL; PostgreSQL's `int4` ones take an `i32`).
pub(crate) fn bind_endpoint<'q, DB>(
    q: sqlx::query::Query<'q, DB, <DB as sqlx::Database>::Arguments<'q>>,
    e: &'q Endpoint,
    codec: &super::SecretCodec,
) -> sqlx::query::Query<'q, DB, <DB as sqlx::Database>::Arguments<'q>>
where
    DB: sqlx::Database,
    &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    &'q String: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    String: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    bool: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    Option<&'q str>: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    Option<i64>: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    let o = &e.overrides;
    let ms = |v: Option<u64>| v.map(|v| i64::try_from(v).unwrap_or(i64::MAX));
    bind_endpoint_text!(q, e, codec)
        .bind(o.connect_timeout_ms.map(i64::from))
        .bind(o.request_timeout_ms.map(i64::from))
        .bind(ms(o.retry_initial_delay_ms))
        .bind(ms(o.retry_max_delay_ms))
        .bind(o.retry_max_attempts.map(i64::from))
        .bind(i64::from(e.max_in_flight))
        .bind(o.circuit_failure_threshold.map(i64::from))
        .bind(ms(o.circuit_cooldown_ms))
        .bind(e.rate_limit_per_second.map(i64::from))
        .bind(e.ordering.as_str())
        .bind(e.ordering_on_dead_letter.as_str())
        .bind(e.subscriber_id.as_deref())
}
