//! `/v1/endpoints`: create, list, read, change, delete endpoints and rotate their secrets.
//!
//! The secret is answered only by create and rotate-secret; reads show when rotated-out
//! secrets stop signing, never the secrets.

use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use kurir_core::secret::Secret;
use serde::Deserialize;
use utoipa::ToSchema;

use super::auth::Actor;
use super::error::{ApiError, ErrorBody};
use super::extract::{whole, whole_or_null, ApiJson, ApiPath, ApiQuery};
use super::page::{Page, PageRequest};
use crate::access::Listing;
use crate::api::state::AppState;
use crate::endpoint::{
    each_override, Endpoint, EndpointId, EndpointUpdate, EventFilter, InvalidEndpoint, NewEndpoint,
    OnDeadLetter, Ordering, Overrides, OverridesUpdate,
};
use crate::redact::Sensitive;

/// Defines one of the API's endpoint structs from [`each_override!`]'s list: the fields before
/// the overrides, one field per override with the text and type `$site` gives it (`create`,
/// `view` or `update`: `null` clears an override), then the fields after them. The create and
/// update bodies also get `overrides()`, the overrides (or their changes) they carry.
macro_rules! api_struct {
    ({ create $(#[$($attr:tt)*])* pub struct $name:ident { $($before:tt)* } { $($after:tt)* } }
     $($field:ident: $ty:tt ($min:tt, $max:tt) [$doc:tt $create:tt $view:tt $update:tt])*) => {
        $(#[$($attr)*])*
        pub struct $name {
            $($before)*
            $(
                #[doc = $create]
                #[serde(default, deserialize_with = "whole")]
                #[schema(minimum = $min, maximum = $max)]
                pub $field: Option<$ty>,
            )*
            $($after)*
        }

        impl $name {
            fn overrides(&self) -> Overrides {
                Overrides { $($field: self.$field,)* }
            }
        }
    };
    ({ view $(#[$($attr:tt)*])* pub struct $name:ident { $($before:tt)* } { $($after:tt)* } }
     $($field:ident: $ty:tt ($min:tt, $max:tt) [$doc:tt $create:tt $view:tt $update:tt])*) => {
        $(#[$($attr)*])*
        pub struct $name {
            $($before)*
            $(#[doc = $view] pub $field: Option<$ty>,)*
            $($after)*
        }
    };
    ({ update $(#[$($attr:tt)*])* pub struct $name:ident { $($before:tt)* } { $($after:tt)* } }
     $($field:ident: $ty:tt ($min:tt, $max:tt) [$doc:tt $create:tt $view:tt $update:tt])*) => {
        $(#[$($attr)*])*
        pub struct $name {
            $($before)*
            $(
                #[doc = $update]
                #[serde(default, deserialize_with = "whole_or_null")]
                #[schema(value_type = Option<$ty>, nullable, minimum = $min, maximum = $max)]
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
pub use view::{CircuitView, EndpointView};

/// Default time a rotated-out secret keeps signing.
pub const DEFAULT_GRACE_PERIOD_SECONDS: u64 = 86_400;
/// Longest grace period accepted (30 days).
pub const MAX_GRACE_PERIOD_SECONDS: u64 = 30 * 86_400;

each_override!(api_struct! { create
/// Body of `POST /v1/endpoints`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"url": "https://example.com/webhooks", "description": "billing", "event_types": ["order.*"], "max_in_flight": 16, "ordering": "aggregate"}))]
pub struct CreateEndpoint {
    /// Absolute http(s) URL.
    #[schema(pattern = "^[hH][tT][tT][pP][sS]?://[A-Za-z0-9._~!$&'()*+,;=-]+(:[0-9]{1,4})?([/?#][^\\s\\x00-\\x1f\\x7f-\\x9f]*)?$", max_length = 2048, example = "https://example.com/webhooks")]
    pub url: String,
    /// Free text.
    #[serde(default)]
    pub description: String,
    /// Event types to receive; empty or absent = all.
    #[serde(default)]
    pub event_types: Vec<String>,
    /// The signing secret (8 to 512 characters; `whsec_` + base64 for Standard Webhooks);
    /// generated when absent.
    #[schema(value_type = Option<String>, min_length = 8, max_length = 512, pattern = "^[^\\x00-\\x1f\\x7f-\\x9f]*$")]
    pub secret: Option<Sensitive>,
    /// Concurrent requests per kurir process, 1 to 1000 (default 16).
    #[serde(default, deserialize_with = "whole")]
    #[schema(minimum = 1, maximum = 1000)]
    pub max_in_flight: Option<u32>,
    /// Requests per second, all kurir processes together (1 to 100000); absent: no limit.
    #[serde(default, deserialize_with = "whole")]
    #[schema(minimum = 1, maximum = 100000)]
    pub rate_limit_per_second: Option<u32>,
    /// `none` (default) or `aggregate`: deliveries of events that share `aggregate_type` and
    /// `aggregate_id` are attempted one at a time, in outbox order.
    pub ordering: Option<Ordering>,
    /// `block` (default): a dead-lettered delivery holds back the later ones of its aggregate
    /// until it is replayed; `skip`: they go on.
    pub ordering_on_dead_letter: Option<OnDeadLetter>,
    /// The subscriber it belongs to (its id; set at creation, never moved): it gets only the
    /// events addressed to that subscriber. Absent: the operator's own endpoint, which gets
    /// only events addressed to no subscriber.
    #[schema(example = "cus_8Hq2")]
    pub subscriber_id: Option<String>,
} {}
});

impl CreateEndpoint {
    /// What the dashboard's and the portal's forms create: a URL, a description and the event
    /// types, every other setting the global one, a generated secret, and no subscriber named
    /// (the actor's scope decides: a portal session's endpoint is its subscriber's).
    pub fn basic(url: String, description: String, event_types: Vec<String>) -> Self {
        Self {
            url,
            description,
            event_types,
            ..Self::default()
        }
    }
}

each_override!(api_struct! { update
/// Body of `PATCH /v1/endpoints/{id}`: absent fields stay; an override set to `null` goes back
/// to the global setting.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"enabled": false, "disabled_reason": "partner maintenance until 14:00"}))]
pub struct UpdateEndpoint {
    /// New URL: absolute, http(s).
    #[schema(pattern = "^[hH][tT][tT][pP][sS]?://[A-Za-z0-9._~!$&'()*+,;=-]+(:[0-9]{1,4})?([/?#][^\\s\\x00-\\x1f\\x7f-\\x9f]*)?$", max_length = 2048)]
    pub url: Option<String>,
    /// New description.
    pub description: Option<String>,
    /// New event types (replaces the list).
    pub event_types: Option<Vec<String>>,
    /// Enable or disable.
    pub enabled: Option<bool>,
    /// Why, with `enabled: false`.
    pub disabled_reason: Option<String>,
    /// New per-process concurrency, 1 to 1000.
    #[serde(default, deserialize_with = "whole")]
    #[schema(minimum = 1, maximum = 1000)]
    pub max_in_flight: Option<u32>,
    /// New rate limit, 1 to 100000; `null` removes it.
    #[serde(default, deserialize_with = "whole_or_null")]
    #[schema(value_type = Option<u32>, nullable, minimum = 1, maximum = 100000)]
    pub rate_limit_per_second: Option<Option<u32>>,
    /// New ordering (`none` or `aggregate`): applies to the deliveries fanned out from then
    /// on; turning it off releases the waiting ones at once.
    pub ordering: Option<Ordering>,
    /// New dead-letter policy of ordered delivery (`block` or `skip`); applies at once.
    pub ordering_on_dead_letter: Option<OnDeadLetter>,
} {}
});

/// Body of `POST /v1/endpoints/{id}/rotate-secret`; may be empty.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RotateSecret {
    /// How long the old secret keeps signing, as a second `v1,` entry (default 86400, at most
    /// 2592000; 0 drops it at once).
    #[serde(default, deserialize_with = "whole")]
    #[schema(minimum = 0, maximum = 2592000)]
    pub grace_period_seconds: Option<u64>,
    /// The new secret; generated when absent.
    #[schema(value_type = Option<String>, min_length = 8, max_length = 512, pattern = "^[^\\x00-\\x1f\\x7f-\\x9f]*$")]
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

/// The endpoint `id`, if it exists and `actor` reaches it ([`Actor::reaches`]): another
/// subscriber's endpoint, or the operator's to a subscriber token, answers exactly as a missing
/// one.
pub(crate) async fn reached(
    state: &AppState,
    actor: &Actor,
    id: &str,
) -> Result<Endpoint, ApiError> {
    let found = state.store.get_endpoint(&endpoint_id(id)?).await?;
    found
        .filter(|e| actor.reaches(e.subscriber_id.as_deref()))
        .ok_or_else(|| not_found(id))
}

/// For a handler that changes an endpoint without reading it: a 404 (as [`reached`]) unless
/// `actor` reaches it, read only for a subscriber-scoped actor (an unscoped one reaches every
/// endpoint). An endpoint's subscriber never changes, so the check holds for the change after
/// it.
pub(super) async fn check_reach(state: &AppState, actor: &Actor, id: &str) -> Result<(), ApiError> {
    match actor.subscriber() {
        None => Ok(()),
        Some(_) => reached(state, actor, id).await.map(drop),
    }
}

/// Creates an endpoint.
#[utoipa::path(post, path = "/v1/endpoints", operation_id = "create_endpoint", tag = "endpoints", request_body = CreateEndpoint,
    responses((status = 201, description = "Created; the answer holds the secret, and `warnings` when the URL will be refused or a filter pattern matches no event type of the catalog (refused with 400 under KURIR_EVENT_CATALOG=strict)", body = EndpointView),
              (status = 400, description = "A field is invalid", body = ErrorBody)))]
pub async fn create(
    State(state): State<AppState>,
    Extension(actor): Extension<Actor>,
    ApiJson(body): ApiJson<CreateEndpoint>,
) -> Result<(StatusCode, Json<EndpointView>), ApiError> {
    // A subscriber token's endpoint is its subscriber's; naming another subscriber is answered
    // as naming one that does not exist.
    let (subscriber_id, foreign) = match (actor.subscriber(), body.subscriber_id.clone()) {
        (None, asked) => (asked, None),
        (Some(own), Some(asked)) if asked != own => (Some(own.to_owned()), Some(asked)),
        (Some(own), _) => (Some(own.to_owned()), None),
    };
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
        subscriber_id,
    };
    new.validate()?;
    if let Some(asked) = foreign {
        return Err(super::subscribers::unknown_subscriber(&asked));
    }
    super::subscribers::addressable(&state, new.subscriber_id.as_deref()).await?;
    let filter_warnings = super::event_types::check_filter(&state, &new.event_types).await?;
    let endpoint = state.store.create_endpoint(new).await?;
    tracing::info!(endpoint_id = %endpoint.id, "endpoint created");
    let mut view = EndpointView::new(endpoint, true, state.store.clock().now()).warned(&state);
    view.warnings.extend(filter_warnings);
    Ok((StatusCode::CREATED, Json(view)))
}

/// Query of `GET /v1/endpoints`.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListEndpoints {
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
    /// Rows per page, 1 to 200 (default 50).
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<u32>,
    /// Only this subscriber's endpoints. A subscriber token always sees only its own.
    pub subscriber_id: Option<String>,
}

/// Lists the endpoints, oldest first, a page at a time.
#[utoipa::path(get, path = "/v1/endpoints", operation_id = "list_endpoints", tag = "endpoints", params(ListEndpoints),
    responses((status = 200, description = "A page of endpoints, oldest first", body = Page<EndpointView>),
              (status = 400, description = "A parameter is invalid", body = ErrorBody)))]
pub async fn list(
    State(state): State<AppState>,
    Extension(actor): Extension<Actor>,
    ApiQuery(q): ApiQuery<ListEndpoints>,
) -> Result<Json<Page<EndpointView>>, ApiError> {
    let page = PageRequest::<EndpointId>::new("endpoints", q.cursor.as_deref(), q.limit)?;
    let subscriber = match actor.listing(q.subscriber_id.as_deref()) {
        Listing::Nothing => return Ok(Json(Page::empty())),
        Listing::Everyone => None,
        Listing::Subscriber(s) => Some(s),
    };
    let rows = state
        .store
        .endpoint_page(page.past.as_ref(), page.fetch(), subscriber.as_deref())
        .await?;
    let (endpoints, next_cursor) = page.split(rows, |e| e.id.clone());
    // The circuits of this page's id range only: one range read, however many endpoints the
    // other pages hold.
    let circuits = match (endpoints.first(), endpoints.last()) {
        (Some(first), Some(last)) => state.store.circuits_between(&first.id, &last.id).await?,
        _ => Vec::new(),
    };
    let now = state.store.clock().now();
    let data = endpoints
        .into_iter()
        .map(|e| {
            let circuit = CircuitView::find(&circuits, e.id.as_str(), e.created_at);
            EndpointView {
                circuit,
                ..EndpointView::new(e, false, now)
            }
        })
        .collect();
    Ok(Json(Page { data, next_cursor }))
}

/// Reads one endpoint.
#[utoipa::path(get, path = "/v1/endpoints/{id}", operation_id = "get_endpoint", tag = "endpoints",
    params(("id" = String, Path, description = "Endpoint id")),
    responses((status = 200, description = "The endpoint", body = EndpointView),
              (status = 404, description = "No such endpoint", body = ErrorBody)))]
pub async fn show(
    State(state): State<AppState>,
    Extension(actor): Extension<Actor>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<EndpointView>, ApiError> {
    let endpoint = reached(&state, &actor, &id).await?;
    Ok(Json(
        EndpointView::new(endpoint, false, state.store.clock().now())
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
    Extension(actor): Extension<Actor>,
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
    let filter_warnings = match &event_types {
        Some(filter) => super::event_types::check_filter(&state, filter).await?,
        None => Vec::new(),
    };
    // Checked against the stored overrides; only the fields given are written.
    let current = reached(&state, &actor, &id).await?;
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
    let mut view = EndpointView::new(endpoint, false, state.store.clock().now())
        .with_circuit(&state)
        .await?
        .warned(&state);
    view.warnings.extend(filter_warnings);
    Ok(Json(view))
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
    Extension(actor): Extension<Actor>,
    ApiPath(id): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    let eid = endpoint_id(&id)?;
    check_reach(&state, &actor, &id).await?;
    if !state.store.delete_endpoint(&eid).await? {
        return Err(not_found(&id));
    }
    tracing::info!(endpoint_id = %id, actor = %actor.name, via = %actor.via, "endpoint deleted");
    Ok(StatusCode::NO_CONTENT)
}

/// Makes a new secret current; the old one keeps signing until the grace period ends.
#[utoipa::path(post, path = "/v1/endpoints/{id}/rotate-secret", operation_id = "rotate_endpoint_secret", tag = "endpoints",
    request_body(content = Option<RotateSecret>, description = "May be left out: a generated secret, and the default grace period"),
    params(("id" = String, Path, description = "Endpoint id")),
    responses((status = 200, description = "The endpoint with its new secret", body = EndpointView),
              (status = 400, description = "A field is invalid", body = ErrorBody),
              (status = 404, description = "No such endpoint", body = ErrorBody)))]
pub async fn rotate_secret(
    State(state): State<AppState>,
    Extension(actor): Extension<Actor>,
    ApiPath(id): ApiPath<String>,
    body: Option<ApiJson<RotateSecret>>,
) -> Result<Json<EndpointView>, ApiError> {
    let body = body.map(|ApiJson(b)| b).unwrap_or_default();
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
    check_reach(&state, &actor, &id).await?;
    let endpoint = state
        .store
        .rotate_secret(&eid, secret, Duration::from_secs(grace))
        .await?
        .ok_or_else(|| not_found(&id))?;
    tracing::info!(endpoint_id = %endpoint.id, grace_period_seconds = grace, "endpoint secret rotated");
    Ok(Json(EndpointView::new(
        endpoint,
        true,
        state.store.clock().now(),
    )))
}

/// The routes of this resource.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/endpoints", post(create).get(list))
        .route("/endpoints/{id}", get(show).patch(update).delete(delete))
        .route("/endpoints/{id}/rotate-secret", post(rotate_secret))
}
