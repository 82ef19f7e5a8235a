//! What a change to an endpoint writes: only the columns it changes ([`endpoint_changes`]), and
//! for a rotation the secrets as they follow from the row read under its lock
//! ([`rotated_secrets`]).

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{Result, StoreError};
use crate::endpoint::EndpointUpdate;

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
pub(crate) fn endpoint_changes(update: &EndpointUpdate) -> Vec<(&'static str, ColumnValue)> {
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
    let old = kurir_core::secret::Secret::parse(secret)
        .map_err(|e| corrupt(format!("secret of {id}: {e}")))?;
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

/// Appends each of `changes` (`, column = value`) to an `UPDATE kurir_endpoints SET …`, then
/// the condition naming endpoint `id`. `json_cast` follows a JSON value's placeholder
/// (PostgreSQL's `::json`; the other dialects keep JSON as text).
pub(crate) fn push_changes<'a, DB>(
    q: &mut sqlx::QueryBuilder<'a, DB>,
    changes: &[(&'static str, ColumnValue)],
    json_cast: &str,
    id: &'a str,
) where
    DB: sqlx::Database,
    String: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    Option<String>: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    bool: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    Option<i64>: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    &'a str: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
{
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
}

/// [`rotated_secrets`] over the columns as stored (`secret` and `previous_secrets`, each sealed
/// with `codec`): the new `previous_secrets`, sealed.
pub(crate) fn rotated_sealed(
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
    e: &'q crate::endpoint::Endpoint,
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
}
