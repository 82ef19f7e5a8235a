//! `/v1/endpoints`: create, list, read, change, delete endpoints and rotate their secrets.
//!
//! The secret is answered only by create and rotate-secret; reads show when rotated-out
//! secrets stop signing, never the secrets.

use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use kurir_core::secret::Secret;
use serde::{Deserialize, Deserializer};
use utoipa::ToSchema;

use super::circuit::CircuitView;
use super::error::{ApiError, ErrorBody};
use super::extract::{ApiJson, ApiPath};
use crate::api::state::AppState;
use crate::endpoint::{
    each_override, EndpointId, EndpointUpdate, EventFilter, InvalidEndpoint, NewEndpoint,
    OnDeadLetter, Ordering, Overrides, OverridesUpdate,
};
use crate::redact::Sensitive;

/// Defines one of the API's endpoint structs from [`each_override!`]'s list: the fields before
/// the overrides, one field per override with the text and type `$site` gives it (`create`,
/// `view` or `update`: `null` clears an override), then the fields after them. The create and
/// update bodies also get `overrides()`, the overrides (or their changes) they carry.
macro_rules! api_struct {
    ({ create $(#[$($attr:tt)*])* pub struct $name:ident { $($before:tt)* } { $($after:tt)* } }
     $($field:ident: $ty:tt [$doc:tt $create:tt $view:tt $update:tt])*) => {
        $(#[$($attr)*])*
        pub struct $name {
            $($before)*
            $(#[doc = $create] pub $field: Option<$ty>,)*
            $($after)*
        }

        impl $name {
            fn overrides(&self) -> Overrides {
                Overrides { $($field: self.$field,)* }
            }
        }
    };
    ({ view $(#[$($attr:tt)*])* pub struct $name:ident { $($before:tt)* } { $($after:tt)* } }
     $($field:ident: $ty:tt [$doc:tt $create:tt $view:tt $update:tt])*) => {
        $(#[$($attr)*])*
        pub struct $name {
            $($before)*
            $(#[doc = $view] pub $field: Option<$ty>,)*
            $($after)*
        }
    };
    ({ update $(#[$($attr:tt)*])* pub struct $name:ident { $($before:tt)* } { $($after:tt)* } }
     $($field:ident: $ty:tt [$doc:tt $create:tt $view:tt $update:tt])*) => {
        $(#[$($attr)*])*
        pub struct $name {
            $($before)*
            $(
                #[doc = $update]
                #[serde(default, deserialize_with = "double_option")]
                #[schema(value_type = Option<$ty>, nullable)]
                pub $field: Option<Option<$ty>>,
            )*
            $($after)*
        }

        impl $name {
            fn overrides(&self) -> OverridesUpdate {
                OverridesUpdate { $($field: self.$field,)* }
            }
        }
    };
}

mod view;
pub use view::EndpointView;

/// Default time a rotated-out secret keeps signing.
pub const DEFAULT_GRACE_PERIOD_SECONDS: u64 = 86_400;
/// Longest grace period accepted (30 days).
pub const MAX_GRACE_PERIOD_SECONDS: u64 = 30 * 86_400;

each_override!(api_struct! { create
/// Body of `POST /v1/endpoints`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateEndpoint {
    /// Absolute http(s) URL.
    pub url: String,
    /// Free text.
    #[serde(default)]
    pub description: String,
    /// Event types to receive; empty or absent = all.
    #[serde(default)]
    pub event_types: Vec<String>,
    /// The signing secret (8 to 512 characters; `whsec_` + base64 for Standard Webhooks);
    /// generated when absent.
    #[schema(value_type = Option<String>)]
    pub secret: Option<Sensitive>,
    /// Concurrent requests per kurir process (default 16).
    pub max_in_flight: Option<u32>,
    /// Requests per second, all kurir processes together (1 to 100000); absent: no limit.
    pub rate_limit_per_second: Option<u32>,
    /// `none` (default) or `aggregate`: deliveries of events that share `aggregate_type` and
    /// `aggregate_id` are attempted one at a time, in outbox order.
    pub ordering: Option<Ordering>,
    /// `block` (default): a dead-lettered delivery holds back the later ones of its aggregate
    /// until it is replayed; `skip`: they go on.
    pub ordering_on_dead_letter: Option<OnDeadLetter>,
} {}
});

each_override!(api_struct! { update
/// Body of `PATCH /v1/endpoints/{id}`: absent fields stay; an override set to `null` goes back
/// to the global setting.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateEndpoint {
    /// New URL.
    pub url: Option<String>,
    /// New description.
    pub description: Option<String>,
    /// New event types (replaces the list).
    pub event_types: Option<Vec<String>>,
    /// Enable or disable.
    pub enabled: Option<bool>,
    /// Why, with `enabled: false`.
    pub disabled_reason: Option<String>,
    /// New per-process concurrency.
    pub max_in_flight: Option<u32>,
    /// New rate limit; `null` removes it.
    #[serde(default, deserialize_with = "double_option")]
    #[schema(value_type = Option<u32>, nullable)]
    pub rate_limit_per_second: Option<Option<u32>>,
    /// New ordering (`none` or `aggregate`): applies to the deliveries fanned out from then
    /// on; turning it off releases the waiting ones at once.
    pub ordering: Option<Ordering>,
    /// New dead-letter policy of ordered delivery (`block` or `skip`); applies at once.
    pub ordering_on_dead_letter: Option<OnDeadLetter>,
} {}
});

/// Tells a field given as `null` (`Some(None)`) from an absent one (`None`).
fn double_option<'de, T: Deserialize<'de>, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

/// Body of `POST /v1/endpoints/{id}/rotate-secret`; may be empty.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RotateSecret {
    /// How long the old secret keeps signing, as a second `v1,` entry (default 86400, at most
    /// 2592000; 0 drops it at once).
    pub grace_period_seconds: Option<u64>,
    /// The new secret; generated when absent.
    #[schema(value_type = Option<String>)]
    pub secret: Option<Sensitive>,
}

impl From<InvalidEndpoint> for ApiError {
    fn from(e: InvalidEndpoint) -> Self {
        ApiError::field(e.field, e.message)
    }
}

fn parse_secret(s: Option<&Sensitive>) -> Result<Option<Secret>, ApiError> {
    s.map(|s| Secret::parse(s.expose()).map_err(|e| ApiError::field("secret", e.to_string())))
        .transpose()
}

/// Parses an endpoint id from a path; one that is not a UUID cannot exist.
pub(super) fn endpoint_id(id: &str) -> Result<EndpointId, ApiError> {
    EndpointId::parse(id).map_err(|_| not_found(id))
}

pub(super) fn not_found(id: &str) -> ApiError {
    ApiError::NotFound(format!("no endpoint with id '{id}'"))
}

/// Creates an endpoint.
#[utoipa::path(post, path = "/v1/endpoints", operation_id = "create_endpoint", tag = "endpoints", request_body = CreateEndpoint,
    responses((status = 201, description = "Created; the answer holds the secret, and `warnings` when the URL will be refused", body = EndpointView),
              (status = 400, description = "A field is invalid", body = ErrorBody)))]
pub async fn create(
    State(state): State<AppState>,
    ApiJson(body): ApiJson<CreateEndpoint>,
) -> Result<(StatusCode, Json<EndpointView>), ApiError> {
    let overrides = body.overrides();
    let new = NewEndpoint {
        url: body.url,
        description: body.description,
        event_types: EventFilter::parse(body.event_types)?,
        secret: parse_secret(body.secret.as_ref())?,
        overrides,
        max_in_flight: body.max_in_flight,
        rate_limit_per_second: body.rate_limit_per_second,
        ordering: body.ordering.unwrap_or_default(),
        ordering_on_dead_letter: body.ordering_on_dead_letter.unwrap_or_default(),
    };
    new.validate()?;
    let endpoint = state.store.create_endpoint(new).await?;
    tracing::info!(endpoint_id = %endpoint.id, "endpoint created");
    let view = EndpointView::new(endpoint, true).warned(&state);
    Ok((StatusCode::CREATED, Json(view)))
}

/// Lists every endpoint, oldest first.
#[utoipa::path(get, path = "/v1/endpoints", operation_id = "list_endpoints", tag = "endpoints",
    responses((status = 200, description = "Every endpoint", body = Vec<EndpointView>)))]
pub async fn list(State(state): State<AppState>) -> Result<Json<Vec<EndpointView>>, ApiError> {
    let endpoints = state.store.list_endpoints().await?;
    let circuits = state.store.circuits().await?;
    Ok(Json(
        endpoints
            .into_iter()
            .map(|e| {
                let circuit = CircuitView::find(&circuits, e.id.as_str(), e.created_at);
                EndpointView {
                    circuit,
                    ..EndpointView::new(e, false)
                }
            })
            .collect(),
    ))
}

/// Reads one endpoint.
#[utoipa::path(get, path = "/v1/endpoints/{id}", operation_id = "get_endpoint", tag = "endpoints",
    params(("id" = String, Path, description = "Endpoint id")),
    responses((status = 200, description = "The endpoint", body = EndpointView),
              (status = 404, description = "No such endpoint", body = ErrorBody)))]
pub async fn show(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<EndpointView>, ApiError> {
    let endpoint = state
        .store
        .get_endpoint(&endpoint_id(&id)?)
        .await?
        .ok_or_else(|| not_found(&id))?;
    Ok(Json(
        EndpointView::new(endpoint, false)
            .with_circuit(&state)
            .await?,
    ))
}

/// Changes an endpoint, including `enabled`.
#[utoipa::path(patch, path = "/v1/endpoints/{id}", operation_id = "update_endpoint", tag = "endpoints", request_body = UpdateEndpoint,
    params(("id" = String, Path, description = "Endpoint id")),
    responses((status = 200, description = "The endpoint as changed", body = EndpointView),
              (status = 400, description = "A field is invalid", body = ErrorBody),
              (status = 404, description = "No such endpoint", body = ErrorBody)))]
pub async fn update(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<UpdateEndpoint>,
) -> Result<Json<EndpointView>, ApiError> {
    let eid = endpoint_id(&id)?;
    if body.disabled_reason.is_some() && body.enabled != Some(false) {
        return Err(ApiError::field(
            "disabled_reason",
            "only allowed together with \"enabled\": false",
        ));
    }
    let overrides = body.overrides();
    let event_types = body.event_types.map(EventFilter::parse).transpose()?;
    // Checked against the stored overrides; only the fields given are written.
    let current = state
        .store
        .get_endpoint(&eid)
        .await?
        .ok_or_else(|| not_found(&id))?;
    overrides.applied_to(&current.overrides).validate()?;
    let update = EndpointUpdate {
        url: body.url,
        description: body.description,
        event_types,
        enabled: body.enabled,
        disabled_reason: body.disabled_reason,
        max_in_flight: body.max_in_flight,
        rate_limit_per_second: body.rate_limit_per_second,
        ordering: body.ordering,
        ordering_on_dead_letter: body.ordering_on_dead_letter,
        overrides,
    };
    update.validate()?;
    let endpoint = state
        .store
        .update_endpoint(&eid, update)
        .await?
        .ok_or_else(|| not_found(&id))?;
    tracing::info!(endpoint_id = %endpoint.id, enabled = endpoint.enabled, "endpoint updated");
    let view = EndpointView::new(endpoint, false)
        .with_circuit(&state)
        .await?;
    Ok(Json(view.warned(&state)))
}

/// Deletes an endpoint: it receives nothing more, its deliveries not yet made end `cancelled`,
/// and its history (deliveries, attempts, its url) is kept until retention takes it. Its
/// secrets are wiped; it answers 404 from now on. Disabling it instead keeps everything.
#[utoipa::path(delete, path = "/v1/endpoints/{id}", operation_id = "delete_endpoint", tag = "endpoints",
    params(("id" = String, Path, description = "Endpoint id")),
    responses((status = 204, description = "Deleted"),
              (status = 404, description = "No such endpoint", body = ErrorBody)))]
pub async fn delete(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    if !state.store.delete_endpoint(&endpoint_id(&id)?).await? {
        return Err(not_found(&id));
    }
    tracing::info!(endpoint_id = %id, "endpoint deleted");
    Ok(StatusCode::NO_CONTENT)
}

/// Makes a new secret current; the old one keeps signing until the grace period ends.
#[utoipa::path(post, path = "/v1/endpoints/{id}/rotate-secret", operation_id = "rotate_endpoint_secret", tag = "endpoints",
    request_body = RotateSecret,
    params(("id" = String, Path, description = "Endpoint id")),
    responses((status = 200, description = "The endpoint with its new secret", body = EndpointView),
              (status = 400, description = "A field is invalid", body = ErrorBody),
              (status = 404, description = "No such endpoint", body = ErrorBody)))]
pub async fn rotate_secret(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<RotateSecret>,
) -> Result<Json<EndpointView>, ApiError> {
    let eid = endpoint_id(&id)?;
    let grace = body
        .grace_period_seconds
        .unwrap_or(DEFAULT_GRACE_PERIOD_SECONDS);
    if grace > MAX_GRACE_PERIOD_SECONDS {
        return Err(ApiError::field(
            "grace_period_seconds",
            format!("at most {MAX_GRACE_PERIOD_SECONDS} (30 days)"),
        ));
    }
    let secret = parse_secret(body.secret.as_ref())?.unwrap_or_else(Secret::generate);
    let endpoint = state
        .store
        .rotate_secret(&eid, secret, Duration::from_secs(grace))
        .await?
        .ok_or_else(|| not_found(&id))?;
    tracing::info!(endpoint_id = %endpoint.id, grace_period_seconds = grace, "endpoint secret rotated");
    Ok(Json(EndpointView::new(endpoint, true)))
}

/// The routes of this resource.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/endpoints", post(create).get(list))
        .route("/endpoints/{id}", get(show).patch(update).delete(delete))
        .route("/endpoints/{id}/rotate-secret", post(rotate_secret))
}
