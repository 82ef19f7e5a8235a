//! `/v1/subscribers`: the sender's customers (issue 29), created (`POST`, or `PUT` by id, which
//! creates or updates so a sender can sync its customer list idempotently), listed, read,
//! changed (name, metadata, disabled) and deleted (a tombstone: its endpoints end as
//! tombstones, their undelivered deliveries `cancelled`; the id stays taken while history
//! remains). Disabling, enabling and deleting are audited: who, from where, when
//! (`GET /v1/subscribers/{id}/actions`).

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Extension, Json, Router};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::auth::Actor;
use super::error::{ApiError, ErrorBody};
use super::extract::{ApiJson, ApiPath, ApiQuery};
use super::page::{Page, PageRequest};
use crate::api::state::AppState;
use crate::store::subscribers::{
    valid_id, PutSubscriber, Subscriber, SubscriberActionRecord, SubscriberUpdate, MAX_ID_CHARS,
};

/// Body of `POST /v1/subscribers`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSubscriber {
    /// Your id for it (your customer's id): 1 to 255 visible ASCII characters.
    #[schema(example = "cus_8Hq2", pattern = "^[\\x21-\\x7e]{1,255}$")]
    pub id: String,
    /// A name for people, at most 255 characters, none of them control characters.
    #[schema(
        example = "Toko Makmur",
        max_length = 255,
        pattern = "^[^\\x00-\\x1f\\x7f-\\x9f]*$"
    )]
    pub name: String,
    /// Free-form JSON object, kept for you.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<serde_json::Value>,
}

/// Body of `PUT /v1/subscribers/{id}`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PutSubscriberBody {
    /// A name for people, at most 255 characters, none of them control characters.
    #[schema(max_length = 255, pattern = "^[^\\x00-\\x1f\\x7f-\\x9f]*$")]
    pub name: String,
    /// Free-form JSON object (replaces the stored one; `{}` when absent).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<serde_json::Value>,
}

/// Body of `PATCH /v1/subscribers/{id}`: absent fields stay.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateSubscriber {
    /// New name: at most 255 characters, none of them control characters.
    #[schema(max_length = 255, pattern = "^[^\\x00-\\x1f\\x7f-\\x9f]*$")]
    pub name: Option<String>,
    /// New metadata (replaces the stored object).
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<serde_json::Value>,
    /// `false` disables it: its endpoints get nothing and their deliveries wait until it is
    /// enabled again (`true`).
    pub enabled: Option<bool>,
}

/// A subscriber as the API shows it.
#[derive(Debug, Serialize, ToSchema)]
pub struct SubscriberView {
    /// Your id for it.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Its metadata.
    #[schema(value_type = Object)]
    pub metadata: serde_json::Value,
    /// Whether its endpoints get events.
    pub enabled: bool,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When it last changed.
    pub updated_at: DateTime<Utc>,
    /// Since when it is disabled.
    pub disabled_at: Option<DateTime<Utc>>,
    /// When it was deleted (a tombstone, kept while its history remains).
    pub deleted_at: Option<DateTime<Utc>>,
}

impl From<Subscriber> for SubscriberView {
    fn from(s: Subscriber) -> Self {
        Self {
            id: s.id,
            name: s.name,
            metadata: s.metadata,
            enabled: s.disabled_at.is_none(),
            created_at: s.created_at,
            updated_at: s.updated_at,
            disabled_at: s.disabled_at,
            deleted_at: s.deleted_at,
        }
    }
}

/// Query of `GET /v1/subscribers`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListSubscribers {
    /// Only subscribers of exactly this name.
    pub name: Option<String>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
    /// Rows per page, 1 to 200 (default 50).
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<u32>,
}

fn not_found(id: &str) -> ApiError {
    ApiError::NotFound(format!("no subscriber with id '{id}'"))
}

fn check_id(id: &str) -> Result<(), ApiError> {
    if valid_id(id) {
        return Ok(());
    }
    Err(ApiError::field(
        "id",
        format!("must be 1 to {MAX_ID_CHARS} visible ASCII characters"),
    ))
}

fn check_name(name: &str) -> Result<(), ApiError> {
    if name.chars().count() > MAX_ID_CHARS || name.chars().any(char::is_control) {
        return Err(ApiError::field(
            "name",
            format!("must be at most {MAX_ID_CHARS} characters, none of them control characters"),
        ));
    }
    Ok(())
}

fn metadata(m: Option<serde_json::Value>) -> Result<serde_json::Value, ApiError> {
    match m {
        None => Ok(serde_json::json!({})),
        Some(v @ serde_json::Value::Object(_)) => Ok(v),
        Some(_) => Err(ApiError::field("metadata", "must be a JSON object")),
    }
}

fn deleted(id: &str) -> ApiError {
    ApiError::Conflict {
        code: "subscriber_deleted",
        message: format!(
            "the subscriber '{id}' was deleted; its id stays taken while its history remains"
        ),
    }
}

/// Whether events and endpoints may name `subscriber_id`: absent, or a live subscriber. A
/// `400` naming the field otherwise, before anything is stored.
pub(super) async fn addressable(
    state: &AppState,
    subscriber_id: Option<&str>,
) -> Result<(), ApiError> {
    let Some(id) = subscriber_id else {
        return Ok(());
    };
    let live =
        valid_id(id) && (state.store.subscriber(id).await?).is_some_and(|s| s.deleted_at.is_none());
    if live {
        return Ok(());
    }
    Err(unknown_subscriber(id))
}

/// The answer to `subscriber_id` naming a subscriber that does not exist, or one a
/// subscriber token does not reach (the same, so ids cannot be probed).
pub(super) fn unknown_subscriber(id: &str) -> ApiError {
    ApiError::field(
        "subscriber_id",
        format!("no subscriber with id '{id}' (create it first: POST /v1/subscribers)"),
    )
}

/// Creates a subscriber.
#[utoipa::path(post, path = "/v1/subscribers", operation_id = "create_subscriber", tag = "subscribers",
    request_body = CreateSubscriber,
    responses((status = 201, description = "Created", body = SubscriberView),
              (status = 400, description = "A field is invalid", body = ErrorBody),
              (status = 409, description = "The id is taken (`subscriber_exists`), by a deleted subscriber too", body = ErrorBody)))]
pub async fn create(
    State(state): State<AppState>,
    ApiJson(body): ApiJson<CreateSubscriber>,
) -> Result<(StatusCode, Json<SubscriberView>), ApiError> {
    check_id(&body.id)?;
    check_name(&body.name)?;
    let meta = metadata(body.metadata)?;
    let Some(created) = state
        .store
        .create_subscriber(&body.id, &body.name, &meta)
        .await?
    else {
        return Err(ApiError::Conflict {
            code: "subscriber_exists",
            message: format!(
                "a subscriber with id '{}' exists (or existed); PUT /v1/subscribers/{{id}} updates it",
                body.id
            ),
        });
    };
    tracing::info!(subscriber_id = %created.id, "subscriber created");
    Ok((StatusCode::CREATED, Json(created.into())))
}

/// Creates the subscriber, or sets its name and metadata: idempotent, for syncing a customer
/// list.
#[utoipa::path(put, path = "/v1/subscribers/{id}", operation_id = "put_subscriber", tag = "subscribers",
    params(("id" = String, Path, pattern = "^[\\x21-\\x7e]{1,255}$", description = "Your id for the subscriber")),
    request_body = PutSubscriberBody,
    responses((status = 201, description = "Created", body = SubscriberView),
              (status = 200, description = "Updated", body = SubscriberView),
              (status = 400, description = "A field is invalid", body = ErrorBody),
              (status = 409, description = "It was deleted (`subscriber_deleted`)", body = ErrorBody)))]
pub async fn put(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<PutSubscriberBody>,
) -> Result<(StatusCode, Json<SubscriberView>), ApiError> {
    check_id(&id)?;
    check_name(&body.name)?;
    let meta = metadata(body.metadata)?;
    match state.store.put_subscriber(&id, &body.name, &meta).await? {
        PutSubscriber::Created(s) => Ok((StatusCode::CREATED, Json(s.into()))),
        PutSubscriber::Updated(s) => Ok((StatusCode::OK, Json(s.into()))),
        PutSubscriber::Deleted => Err(deleted(&id)),
    }
}

/// Lists the live subscribers by id.
#[utoipa::path(get, path = "/v1/subscribers", operation_id = "list_subscribers", tag = "subscribers",
    params(ListSubscribers),
    responses((status = 200, description = "A page of subscribers, by id", body = Page<SubscriberView>),
              (status = 400, description = "A parameter is invalid", body = ErrorBody)))]
pub async fn list(
    State(state): State<AppState>,
    ApiQuery(q): ApiQuery<ListSubscribers>,
) -> Result<Json<Page<SubscriberView>>, ApiError> {
    let page = PageRequest::<String>::new("subscribers", q.cursor.as_deref(), q.limit)?;
    let rows = state
        .store
        .list_subscribers(page.past.as_deref(), q.name.as_deref(), page.fetch())
        .await?;
    Ok(Json(page.page(
        rows,
        |s| s.id.clone(),
        SubscriberView::from,
    )))
}

/// Reads one subscriber (a deleted one too, with its `deleted_at`). A subscriber token may read
/// its own.
#[utoipa::path(get, path = "/v1/subscribers/{id}", operation_id = "get_subscriber", tag = "subscribers",
    params(("id" = String, Path, pattern = "^[\\x21-\\x7e]{1,255}$", description = "Your id for the subscriber")),
    responses((status = 200, description = "The subscriber", body = SubscriberView),
              (status = 404, description = "No such subscriber", body = ErrorBody)))]
pub async fn show(
    State(state): State<AppState>,
    Extension(actor): Extension<Actor>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<SubscriberView>, ApiError> {
    // A subscriber token reads its own subscriber; any other answers as a missing one.
    if !valid_id(&id) || !actor.reaches(Some(&id)) {
        return Err(not_found(&id));
    }
    let found = state.store.subscriber(&id).await?;
    Ok(Json(found.ok_or_else(|| not_found(&id))?.into()))
}

/// Changes a subscriber's name, metadata, or whether it is enabled.
#[utoipa::path(patch, path = "/v1/subscribers/{id}", operation_id = "update_subscriber", tag = "subscribers",
    params(("id" = String, Path, pattern = "^[\\x21-\\x7e]{1,255}$", description = "Your id for the subscriber")),
    request_body = UpdateSubscriber,
    responses((status = 200, description = "The subscriber as it now is", body = SubscriberView),
              (status = 400, description = "A field is invalid", body = ErrorBody),
              (status = 404, description = "No such subscriber, or it was deleted", body = ErrorBody)))]
pub async fn update(
    State(state): State<AppState>,
    Extension(actor): Extension<Actor>,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<UpdateSubscriber>,
) -> Result<Json<SubscriberView>, ApiError> {
    if !valid_id(&id) {
        return Err(not_found(&id));
    }
    if let Some(name) = &body.name {
        check_name(name)?;
    }
    let update = SubscriberUpdate {
        name: body.name,
        metadata: body.metadata.map(Some).map(metadata).transpose()?,
        disabled: body.enabled.map(|e| !e),
    };
    let changed = state.store.update_subscriber(&id, &update, &actor).await?;
    let changed = changed.ok_or_else(|| not_found(&id))?;
    if let Some(off) = update.disabled {
        tracing::info!(subscriber_id = %id, enabled = !off, actor = %actor.name, via = %actor.via,
            "subscriber {} by an operator", if off { "disabled" } else { "enabled" });
    }
    Ok(Json(changed.into()))
}

/// Deletes a subscriber: its endpoints end as tombstones, their undelivered deliveries
/// `cancelled`; history stays until retention, and the id stays taken meanwhile.
#[utoipa::path(delete, path = "/v1/subscribers/{id}", operation_id = "delete_subscriber", tag = "subscribers",
    params(("id" = String, Path, pattern = "^[\\x21-\\x7e]{1,255}$", description = "Your id for the subscriber")),
    responses((status = 204, description = "Deleted"),
              (status = 404, description = "No such subscriber, or it was deleted already", body = ErrorBody)))]
pub async fn delete(
    State(state): State<AppState>,
    Extension(actor): Extension<Actor>,
    ApiPath(id): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    if !valid_id(&id) || !state.store.delete_subscriber(&id, &actor).await? {
        return Err(not_found(&id));
    }
    tracing::info!(subscriber_id = %id, actor = %actor.name, via = %actor.via,
        "subscriber deleted by an operator");
    Ok(StatusCode::NO_CONTENT)
}

/// One audited operator action on a subscriber.
#[derive(Debug, Serialize, ToSchema)]
pub struct SubscriberActionView {
    /// `disable`, `enable` or `delete`.
    #[schema(example = "disable")]
    pub action: String,
    /// Who: the token's name (`admin` for the environment's token).
    pub actor: String,
    /// Where from: `api`, `cli` or `dashboard`.
    pub via: String,
    /// When.
    pub created_at: DateTime<Utc>,
}

impl From<SubscriberActionRecord> for SubscriberActionView {
    fn from(r: SubscriberActionRecord) -> Self {
        Self {
            action: r.action,
            actor: r.actor,
            via: r.via,
            created_at: DateTime::from_timestamp_millis(r.created_ms).unwrap_or_default(),
        }
    }
}

/// The answer of `GET /v1/subscribers/{id}/actions`.
#[derive(Debug, Serialize, ToSchema)]
pub struct SubscriberActions {
    /// The actions, newest first.
    pub data: Vec<SubscriberActionView>,
    /// How many actions the subscriber has in all: more than `data` holds when older ones were
    /// left out.
    pub total: u64,
}

/// The newest actions `GET /v1/subscribers/{id}/actions` answers.
pub const ACTIONS_SHOWN: i64 = 50;

/// The audit of a subscriber: who disabled, enabled or deleted it, from where and when, newest
/// first (the newest 50). A deleted subscriber's too.
#[utoipa::path(get, path = "/v1/subscribers/{id}/actions", operation_id = "list_subscriber_actions", tag = "subscribers",
    params(("id" = String, Path, pattern = "^[\\x21-\\x7e]{1,255}$", description = "Your id for the subscriber")),
    responses((status = 200, description = "`{\"data\": [...], \"total\": n}`: newest first, at most 50, and how many there are in all", body = SubscriberActions),
              (status = 404, description = "No such subscriber", body = ErrorBody)))]
pub async fn actions(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<SubscriberActions>, ApiError> {
    if !valid_id(&id) || state.store.subscriber(&id).await?.is_none() {
        return Err(not_found(&id));
    }
    let rows = state.store.subscriber_actions(&id, ACTIONS_SHOWN).await?;
    let total = state.store.subscriber_action_count(&id).await?;
    Ok(Json(SubscriberActions {
        total,
        data: rows.into_iter().map(SubscriberActionView::from).collect(),
    }))
}

/// The routes of this resource.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/subscribers", get(list).post(create))
        .route(
            "/subscribers/{id}",
            get(show).put(put).patch(update).delete(delete),
        )
        .route("/subscribers/{id}/actions", get(actions))
}
