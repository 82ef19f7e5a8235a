//! `/v1/tokens`: named operator tokens, created (the secret answered once), listed and revoked;
//! the admin role's alone ([`crate::access::Action::ManageTokens`]). And `GET /v1/whoami`: who
//! the presented token is, for every role.
//!
//! A token's name is what the audit records for everything its holder does, so names are unique
//! for good: a revoked token keeps its row and its name, and no token may take the environment
//! token's name.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{delete, get};
use axum::{Extension, Json, Router};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::auth::Actor;
use super::error::{ApiError, ErrorBody};
use super::extract::{ApiJson, ApiPath, ApiQuery};
use super::page::{Page, PageRequest};
use crate::access::Role;
use crate::api::state::AppState;
use crate::redact::Sensitive;
use crate::store::tokens::{NewToken, Revoked, TokenCreated, TokenId, TokenRecord};

/// Longest token name, in characters.
pub const MAX_NAME_CHARS: usize = 100;

/// Body of `POST /v1/tokens`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateToken {
    /// Who or what holds it (`alice`, `deploy-bot`): 1 to 100 characters, no control
    /// characters, unique among every token ever created. The audit records it.
    #[schema(example = "deploy-bot")]
    pub name: String,
    /// `admin` (everything), `operator` (everything but managing tokens) or `viewer` (reads
    /// only).
    #[schema(example = "operator")]
    pub role: String,
    /// When it stops working (RFC 3339, in the future); never when absent.
    pub expires_at: Option<DateTime<Utc>>,
}

/// A token as the API shows it; its secret only in the answer of create.
#[derive(Debug, Serialize, ToSchema)]
pub struct TokenView {
    /// `tok_…`.
    pub id: String,
    /// Its name.
    pub name: String,
    /// `admin`, `operator` or `viewer`.
    #[schema(value_type = String, example = "operator")]
    pub role: Role,
    /// `active`, `expired` or `revoked`.
    #[schema(example = "active")]
    pub status: &'static str,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// The name of the token that created it.
    pub created_by: String,
    /// Where it was created from: `api`, `cli` or `dashboard`.
    pub created_via: String,
    /// When it stops working, if ever.
    pub expires_at: Option<DateTime<Utc>>,
    /// When it was revoked.
    pub revoked_at: Option<DateTime<Utc>>,
    /// The name of the token that revoked it.
    pub revoked_by: Option<String>,
    /// Where it was revoked from.
    pub revoked_via: Option<String>,
    /// The subscriber it is confined to (a subscriber token); absent for an operator token.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subscriber_id: Option<String>,
    /// The bearer token itself (`kurir_` and 64 hex digits; a subscriber token's starts
    /// `kurir_sub_`): only in the answer of create, and never again: kurir keeps only its
    /// SHA-256.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub token: Option<Sensitive>,
}

impl TokenView {
    /// The view of `t` at `now` (its status: expired once `now` reaches its expiry, as the
    /// database's checks see it).
    pub(super) fn at(t: TokenRecord, now: DateTime<Utc>) -> Self {
        let status = match (t.revoked_at, t.expires_at) {
            (Some(_), _) => "revoked",
            (None, Some(at)) if at <= now => "expired",
            _ => "active",
        };
        Self {
            id: t.id.to_string(),
            name: t.name,
            role: t.role,
            status,
            created_at: t.created_at,
            created_by: t.created_by,
            created_via: t.created_via,
            expires_at: t.expires_at,
            revoked_at: t.revoked_at,
            revoked_by: t.revoked_by,
            revoked_via: t.revoked_via,
            subscriber_id: t.subscriber_id,
            token: None,
        }
    }
}

/// Who the presented token is.
#[derive(Debug, Serialize, ToSchema)]
pub struct WhoAmI {
    /// The token's name (`admin` for the environment's token): what the audit records.
    pub name: String,
    /// `admin`, `operator` or `viewer`.
    #[schema(value_type = String, example = "viewer")]
    pub role: Role,
    /// The named token's id; absent for the environment's token.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_id: Option<String>,
    /// The subscriber a subscriber token is confined to; absent for an operator token.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subscriber_id: Option<String>,
    /// Where this request came from as the audit would record it: `api` or `cli`.
    #[schema(value_type = String, example = "cli")]
    pub via: crate::access::Via,
}

/// A name a token may take: trimmed, 1 to [`MAX_NAME_CHARS`] characters, no control characters,
/// not the environment token's.
pub(super) fn token_name(name: &str, bootstrap: &str) -> Result<String, ApiError> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > MAX_NAME_CHARS {
        return Err(ApiError::field(
            "name",
            format!("give the token a name of 1 to {MAX_NAME_CHARS} characters"),
        ));
    }
    if name.chars().any(char::is_control) {
        return Err(ApiError::field(
            "name",
            "must not contain control characters (newlines, tabs, NUL)",
        ));
    }
    if name == bootstrap {
        return Err(name_taken(name));
    }
    Ok(name.to_owned())
}

pub(super) fn name_taken(name: &str) -> ApiError {
    ApiError::Conflict {
        code: "token_name_taken",
        message: format!(
            "a token named '{name}' exists (or existed: a revoked token keeps its name, so the \
             audit stays unambiguous); choose another name"
        ),
    }
}

pub(super) fn expires_in_the_past() -> ApiError {
    ApiError::field(
        "expires_at",
        "is not in the future: the token would never work",
    )
}

pub(super) fn not_found(id: &str) -> ApiError {
    ApiError::NotFound(format!("no token with id '{id}'"))
}

/// Creates a named token. The answer holds the token itself, which is shown this once.
#[utoipa::path(post, path = "/v1/tokens", operation_id = "create_token", tag = "tokens", request_body = CreateToken,
    responses((status = 201, description = "Created; `token` is the bearer token, shown only now", body = TokenView),
              (status = 400, description = "A field is invalid: an unknown `role`, an empty `name`, an `expires_at` in the past", body = ErrorBody),
              (status = 409, description = "The name is taken (`token_name_taken`)", body = ErrorBody)))]
pub async fn create(
    State(state): State<AppState>,
    Extension(actor): Extension<Actor>,
    ApiJson(body): ApiJson<CreateToken>,
) -> Result<(StatusCode, Json<TokenView>), ApiError> {
    let name = token_name(&body.name, state.admin.name())?;
    let role: Role = (body.role.trim().parse())
        .map_err(|e: crate::access::UnknownRole| ApiError::field("role", e.to_string()))?;
    let new = NewToken {
        name,
        role,
        expires_at: body.expires_at,
        created_by: actor.name.clone(),
        created_via: actor.via,
        subscriber_id: None,
    };
    let (token, secret) = match state.store.create_token(&new).await? {
        TokenCreated::Created { token, secret } => (token, secret),
        TokenCreated::NameTaken => return Err(name_taken(&new.name)),
        // No subscriber is named here, so only the expiry can have refused it.
        TokenCreated::ExpiresInThePast | TokenCreated::NoSubscriber => {
            return Err(expires_in_the_past())
        }
    };
    tracing::info!(token_id = %token.id, token_name = %token.name, role = %token.role,
        actor = %actor.name, via = %actor.via, "token created");
    let mut view = TokenView::at(*token, state.store.clock().now_millis());
    view.token = Some(secret);
    Ok((StatusCode::CREATED, Json(view)))
}

/// Query of `GET /v1/tokens`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListTokens {
    /// `next_cursor` of the previous page.
    #[param(min_length = 1)]
    pub cursor: Option<String>,
    /// Rows per page, 1 to 200 (default 50).
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<u32>,
}

/// Lists the named tokens, subscriber tokens too (with their `subscriber_id`), revoked and
/// expired ones too, newest first; never their secrets.
#[utoipa::path(get, path = "/v1/tokens", operation_id = "list_tokens", tag = "tokens", params(ListTokens),
    responses((status = 200, description = "A page of tokens", body = Page<TokenView>),
              (status = 400, description = "A parameter is invalid", body = ErrorBody)))]
pub async fn list(
    State(state): State<AppState>,
    ApiQuery(q): ApiQuery<ListTokens>,
) -> Result<Json<Page<TokenView>>, ApiError> {
    let page = PageRequest::<TokenId>::new("tokens", q.cursor.as_deref(), q.limit)?;
    let past = page.past.as_ref().map(TokenId::as_str);
    let rows = state.store.list_tokens(past, page.fetch(), None).await?;
    let now = state.store.clock().now_millis();
    Ok(Json(page.page(
        rows,
        |t| t.id.clone(),
        |t| TokenView::at(t, now),
    )))
}

/// Revokes a token: from now on, every process sharing the database refuses it, and the
/// dashboard sessions signed in with it end. Revoking a revoked token changes nothing.
#[utoipa::path(delete, path = "/v1/tokens/{id}", operation_id = "revoke_token", tag = "tokens",
    params(("id" = String, Path, description = "Token id (`tok_…`)")),
    responses((status = 204, description = "Revoked (or it was already)"),
              (status = 404, description = "No such token", body = ErrorBody)))]
pub async fn revoke(
    State(state): State<AppState>,
    Extension(actor): Extension<Actor>,
    ApiPath(id): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    let token_id = TokenId::parse(&id).ok_or_else(|| not_found(&id))?;
    match state
        .store
        .revoke_token(&token_id, &actor.name, actor.via, None)
        .await?
    {
        Revoked::NotFound => Err(not_found(&id)),
        Revoked::AlreadyRevoked => Ok(StatusCode::NO_CONTENT),
        Revoked::Revoked => {
            tracing::info!(token_id = %token_id, actor = %actor.name, via = %actor.via,
                "token revoked");
            Ok(StatusCode::NO_CONTENT)
        }
    }
}

/// Who the presented token is: its name, role and id. Every role may ask.
#[utoipa::path(get, path = "/v1/whoami", operation_id = "whoami", tag = "tokens",
    responses((status = 200, description = "The token's name and role", body = WhoAmI)))]
pub async fn whoami(Extension(actor): Extension<Actor>) -> Json<WhoAmI> {
    Json(WhoAmI {
        subscriber_id: actor.subscriber().map(str::to_owned),
        name: actor.name,
        role: actor.role,
        token_id: actor.token_id,
        via: actor.via,
    })
}

/// The routes of this resource.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/tokens", get(list).post(create))
        .route("/tokens/{id}", delete(revoke))
        .route("/whoami", get(whoami))
}
