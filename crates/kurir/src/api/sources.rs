//! `/v1/inbox/sources`: create, list, read, change and delete the inbox gateway's sources.
//!
//! The generated forward secret and read token are answered only by create. Reads never show a
//! secret: only how many verification secrets a source has.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::error::{ApiError, ErrorBody};
use super::extract::{whole, ApiJson, ApiPath};
use kurir_receiver::WebhookSource;

use crate::api::state::AppState;
use crate::inbox_source::{InboxSource, InvalidSource, NewSource, SourceUpdate};
use crate::redact::Sensitive;

/// An inbox source as the API shows it.
#[derive(Debug, Serialize, ToSchema)]
pub struct SourceView {
    /// Its name, the `{source}` of `/inbox/{source}`.
    pub name: String,
    /// How its requests are signed: `kurir`, `standard-webhooks`, `stripe`, `github`, `shopify`,
    /// `slack` or `hmac-body`.
    pub scheme: String,
    /// How many secrets its requests are verified with.
    pub secret_count: usize,
    /// How far a signed timestamp may be from now, either way.
    pub tolerance_seconds: u32,
    /// Where each accepted event is forwarded.
    pub forward_url: String,
    /// Where partners send their webhooks, relative to kurir's base URL.
    pub inbox_path: String,
    /// The secret forwards are signed with (verify their Standard Webhooks signature: the
    /// README's "Verifying a delivery"): only in the answer of create.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub forward_secret: Option<Sensitive>,
    /// The bearer token of this source's status route: only in the answer of create.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub read_token: Option<Sensitive>,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When it last changed.
    pub updated_at: DateTime<Utc>,
}

impl SourceView {
    fn new(source: InboxSource) -> Self {
        Self {
            scheme: source.scheme.as_str().to_owned(),
            secret_count: source.secrets.len(),
            tolerance_seconds: source.tolerance_seconds,
            inbox_path: source.inbox_path(),
            forward_url: source.forward_url,
            forward_secret: None,
            read_token: None,
            created_at: source.created_at,
            updated_at: source.updated_at,
            name: source.name,
        }
    }
}

/// Body of `POST /v1/inbox/sources`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSource {
    /// 1 to 64 characters from `A-Z a-z 0-9 . _ -`.
    #[schema(pattern = "^[A-Za-z0-9._-]{1,64}$", example = "stripe")]
    pub name: String,
    /// `kurir`, `standard-webhooks`, `stripe`, `github`, `shopify`, `slack` or `hmac-body`.
    #[schema(value_type = SchemeName)]
    pub scheme: String,
    /// The secrets the sender signs with (several during a rotation); `whsec_` + base64 for
    /// `standard-webhooks`.
    #[schema(value_type = Vec<SecretText>, min_items = 1)]
    pub secrets: Vec<Sensitive>,
    /// Timestamp tolerance, 1 to 86400 (default 300).
    #[serde(default, deserialize_with = "whole")]
    #[schema(minimum = 1, maximum = 86400)]
    pub tolerance_seconds: Option<u32>,
    /// Absolute http(s) URL each accepted event is forwarded to (an international host name
    /// in its ASCII form, `xn--…`).
    #[schema(
        pattern = "^[hH][tT][tT][pP][sS]?://[A-Za-z0-9._~!$&'()*+,;=-]+(:[0-9]{1,4})?([/?#][^\\s\\x00-\\x1f\\x7f-\\x9f]*)?$",
        max_length = 2048
    )]
    pub forward_url: String,
}

/// One of a source's secrets as the document describes it (the server reads a `Sensitive`
/// and checks it as `Secret` does): 8 to 512 characters, none of them control characters.
pub struct SecretText;

impl utoipa::PartialSchema for SecretText {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{ObjectBuilder, Type};
        ObjectBuilder::new()
            .schema_type(Type::String)
            .description(Some("8 to 512 characters, none of them control characters"))
            .min_length(Some(8))
            .max_length(Some(512))
            .pattern(Some("^[^\\x00-\\x1f\\x7f-\\x9f]*$"))
            .into()
    }
}

impl ToSchema for SecretText {
    fn name() -> std::borrow::Cow<'static, str> {
        "SecretText".into()
    }
}

/// Body of `PATCH /v1/inbox/sources/{name}`: absent fields stay. The name, forward secret and
/// read token cannot change.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateSource {
    /// New scheme; the secrets (given or kept) must suit it.
    #[schema(value_type = Option<SchemeName>)]
    pub scheme: Option<String>,
    /// New secrets (replaces the list).
    #[schema(value_type = Option<Vec<SecretText>>, min_items = 1)]
    pub secrets: Option<Vec<Sensitive>>,
    /// New tolerance, 1 to 86400.
    #[serde(default, deserialize_with = "whole")]
    #[schema(minimum = 1, maximum = 86400)]
    pub tolerance_seconds: Option<u32>,
    /// New forward URL: absolute, http(s).
    #[schema(
        pattern = "^[hH][tT][tT][pP][sS]?://[A-Za-z0-9._~!$&'()*+,;=-]+(:[0-9]{1,4})?([/?#][^\\s\\x00-\\x1f\\x7f-\\x9f]*)?$",
        max_length = 2048
    )]
    pub forward_url: Option<String>,
}

/// The signature schemes an inbox source can verify.
#[derive(ToSchema)]
#[schema(rename_all = "kebab-case")]
#[allow(dead_code)]
enum SchemeName {
    Kurir,
    StandardWebhooks,
    Stripe,
    Github,
    Shopify,
    Slack,
    HmacBody,
}

impl From<InvalidSource> for ApiError {
    fn from(e: InvalidSource) -> Self {
        ApiError::field(e.field, e.message)
    }
}

fn not_found(name: &str) -> ApiError {
    ApiError::NotFound(format!("no inbox source named '{name}'"))
}

/// `name` when it could be a source's; otherwise `404` without asking the database.
fn source_name(name: &str) -> Result<&str, ApiError> {
    if WebhookSource::is_valid_name(name) {
        Ok(name)
    } else {
        Err(not_found(name))
    }
}

/// Creates a source.
#[utoipa::path(post, path = "/v1/inbox/sources", operation_id = "create_source", tag = "inbox sources", request_body = CreateSource,
    responses((status = 201, description = "Created; the answer holds the forward secret and the read token", body = SourceView),
              (status = 400, description = "A field is invalid", body = ErrorBody),
              (status = 409, description = "The name is taken", body = ErrorBody)))]
pub async fn create(
    State(state): State<AppState>,
    ApiJson(body): ApiJson<CreateSource>,
) -> Result<(StatusCode, Json<SourceView>), ApiError> {
    let new = NewSource {
        name: body.name,
        scheme: body.scheme,
        secrets: body.secrets,
        tolerance_seconds: body.tolerance_seconds,
        forward_url: body.forward_url,
    };
    let created = new.validate(state.store.clock().now_millis())?;
    if !state.store.create_source(&created.source).await? {
        return Err(ApiError::Conflict {
            code: "source_exists",
            message: format!("an inbox source named '{}' exists", created.source.name),
        });
    }
    state.gateway.sources().insert(&created.source.name);
    tracing::info!(source = %created.source.name, scheme = %created.source.scheme, "inbox source created");
    let forward_secret = created.source.forward_secret.expose().into();
    let view = SourceView {
        forward_secret: Some(forward_secret),
        read_token: Some(created.read_token),
        ..SourceView::new(created.source)
    };
    Ok((StatusCode::CREATED, Json(view)))
}

/// Lists every source, oldest first.
#[utoipa::path(get, path = "/v1/inbox/sources", operation_id = "list_sources", tag = "inbox sources",
    responses((status = 200, description = "Every source", body = Vec<SourceView>)))]
pub async fn list(State(state): State<AppState>) -> Result<Json<Vec<SourceView>>, ApiError> {
    let sources = state.store.list_sources().await?;
    Ok(Json(sources.into_iter().map(SourceView::new).collect()))
}

/// Reads one source.
#[utoipa::path(get, path = "/v1/inbox/sources/{name}", operation_id = "get_source", tag = "inbox sources",
    params(("name" = String, Path, description = "Source name")),
    responses((status = 200, description = "The source", body = SourceView),
              (status = 404, description = "No such source", body = ErrorBody)))]
pub async fn show(
    State(state): State<AppState>,
    ApiPath(name): ApiPath<String>,
) -> Result<Json<SourceView>, ApiError> {
    let source = state
        .store
        .get_source(source_name(&name)?)
        .await?
        .ok_or_else(|| not_found(&name))?;
    Ok(Json(SourceView::new(source)))
}

/// Changes a source's scheme, secrets, tolerance or forward URL.
#[utoipa::path(patch, path = "/v1/inbox/sources/{name}", operation_id = "update_source", tag = "inbox sources",
    request_body = UpdateSource,
    params(("name" = String, Path, description = "Source name")),
    responses((status = 200, description = "The source as changed", body = SourceView),
              (status = 400, description = "A field is invalid", body = ErrorBody),
              (status = 404, description = "No such source", body = ErrorBody)))]
pub async fn update(
    State(state): State<AppState>,
    ApiPath(name): ApiPath<String>,
    ApiJson(body): ApiJson<UpdateSource>,
) -> Result<Json<SourceView>, ApiError> {
    let mut source = state
        .store
        .get_source(source_name(&name)?)
        .await?
        .ok_or_else(|| not_found(&name))?;
    let update = SourceUpdate {
        scheme: body.scheme,
        secrets: body.secrets,
        tolerance_seconds: body.tolerance_seconds,
        forward_url: body.forward_url,
    };
    update.apply(&mut source, state.store.clock().now_millis())?;
    if !state.store.save_source(&source).await? {
        return Err(not_found(&name));
    }
    tracing::info!(source = %name, scheme = %source.scheme, "inbox source updated");
    Ok(Json(SourceView::new(source)))
}

/// Deletes a source. Its received events stay in the inbox; new requests to its path get 404.
#[utoipa::path(delete, path = "/v1/inbox/sources/{name}", operation_id = "delete_source", tag = "inbox sources",
    params(("name" = String, Path, description = "Source name")),
    responses((status = 204, description = "Deleted"),
              (status = 404, description = "No such source", body = ErrorBody)))]
pub async fn delete(
    State(state): State<AppState>,
    ApiPath(name): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    if !state.store.delete_source(source_name(&name)?).await? {
        return Err(not_found(&name));
    }
    state.gateway.sources().remove(&name);
    tracing::info!(source = %name, "inbox source deleted");
    Ok(StatusCode::NO_CONTENT)
}

/// The routes of this resource.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/inbox/sources", get(list).post(create))
        .route(
            "/inbox/sources/{name}",
            get(show).patch(update).delete(delete),
        )
}
