//! `/v1/subscribers/{id}/tokens`: a subscriber's tokens (issue 29), created (the secret
//! answered once, `kurir_sub_…`), listed and revoked by an operator or admin token
//! ([`crate::access::Action::ManageSubscriberTokens`]). A subscriber token reaches only its
//! subscriber's endpoints, events, deliveries and replays ([`crate::access::Actor::may`],
//! [`crate::access::Actor::reaches`]); it acts with the operator role inside that scope.
//!
//! Stored in `kurir_tokens` with the operator tokens (hashed, read on every request, so a
//! revocation, an expiry or the subscriber's deletion holds at once on every process sharing the
//! database), their names unique among all tokens, as the audit records them.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{delete, get};
use axum::{Extension, Json, Router};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use utoipa::ToSchema;

use super::auth::Actor;
use super::error::{ApiError, ErrorBody};
use super::extract::{ApiJson, ApiPath, ApiQuery};
use super::page::{Page, PageRequest};
use super::tokens::{expires_in_the_past, name_taken, token_name, ListTokens, TokenView};
use crate::access::Role;
use crate::api::state::AppState;
use crate::store::subscribers::valid_id;
use crate::store::tokens::{NewToken, Revoked, TokenCreated, TokenId};

/// Body of `POST /v1/subscribers/{id}/tokens`; may be left out.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(try_from = "serde_json::Map<String, serde_json::Value>")]
pub struct CreateSubscriberToken {
    /// Who holds it (`portal`, `acme-ci`): 1 to 100 characters, no control characters, unique
    /// among every token ever created. The audit records it. Default: the token's id.
    #[schema(example = "acme-ci")]
    pub name: Option<String>,
    /// When it stops working (RFC 3339, in the future); never when absent.
    pub expires_at: Option<DateTime<Utc>>,
}

/// The fields of [`CreateSubscriberToken`], read from a JSON object only: serde would take a
/// struct from an array too (`[null, null]`), which is not what the document allows.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Fields {
    name: Option<String>,
    expires_at: Option<DateTime<Utc>>,
}

impl TryFrom<serde_json::Map<String, serde_json::Value>> for CreateSubscriberToken {
    type Error = serde_json::Error;

    fn try_from(object: serde_json::Map<String, serde_json::Value>) -> Result<Self, Self::Error> {
        let f: Fields = serde_json::from_value(serde_json::Value::Object(object))?;
        Ok(Self {
            name: f.name,
            expires_at: f.expires_at,
        })
    }
}

fn no_subscriber(id: &str) -> ApiError {
    ApiError::NotFound(format!("no subscriber with id '{id}'"))
}

/// The subscriber of the path, if it exists and is not deleted.
async fn live_subscriber(state: &AppState, id: &str) -> Result<(), ApiError> {
    let live =
        valid_id(id) && (state.store.subscriber(id).await?).is_some_and(|s| s.deleted_at.is_none());
    live.then_some(()).ok_or_else(|| no_subscriber(id))
}

/// Creates a subscriber token. The answer holds the token itself, which is shown this once.
#[utoipa::path(post, path = "/v1/subscribers/{id}/tokens", operation_id = "create_subscriber_token",
    tag = "subscribers",
    params(("id" = String, Path, description = "Your id for the subscriber")),
    request_body(content = Option<CreateSubscriberToken>, description = "May be left out: named by its id, never expiring"),
    responses((status = 201, description = "Created; `token` is the bearer token (`kurir_sub_…`), shown only now", body = TokenView),
              (status = 400, description = "A field is invalid: an empty `name`, an `expires_at` in the past", body = ErrorBody),
              (status = 404, description = "No such subscriber, or it was deleted", body = ErrorBody),
              (status = 409, description = "The name is taken (`token_name_taken`)", body = ErrorBody)))]
pub async fn create(
    State(state): State<AppState>,
    Extension(actor): Extension<Actor>,
    ApiPath(subscriber): ApiPath<String>,
    body: Option<ApiJson<CreateSubscriberToken>>,
) -> Result<(StatusCode, Json<TokenView>), ApiError> {
    let body = body.map(|ApiJson(b)| b).unwrap_or_default();
    let name = body
        .name
        .as_deref()
        .map(|n| token_name(n, state.admin.name()))
        .transpose()?;
    live_subscriber(&state, &subscriber).await?;
    let new = NewToken {
        name: name.unwrap_or_default(),
        // Inside its scope a subscriber token changes what is its own; the scope, not the
        // role, keeps it from everything else.
        role: Role::Operator,
        expires_at: body.expires_at,
        created_by: actor.name.clone(),
        created_via: actor.via,
        subscriber_id: Some(subscriber.clone()),
    };
    let (token, secret) = match state.store.create_token(&new).await? {
        TokenCreated::Created { token, secret } => (token, secret),
        TokenCreated::NameTaken => return Err(name_taken(&new.name)),
        TokenCreated::ExpiresInThePast => return Err(expires_in_the_past()),
        TokenCreated::NoSubscriber => return Err(no_subscriber(&subscriber)),
    };
    tracing::info!(token_id = %token.id, token_name = %token.name, subscriber_id = %subscriber,
        actor = %actor.name, via = %actor.via, "subscriber token created");
    let mut view = TokenView::at(*token, state.store.clock().now_millis());
    view.token = Some(secret);
    Ok((StatusCode::CREATED, Json(view)))
}

/// Lists a subscriber's tokens, revoked and expired ones too, newest first; never their secrets.
#[utoipa::path(get, path = "/v1/subscribers/{id}/tokens", operation_id = "list_subscriber_tokens",
    tag = "subscribers",
    params(("id" = String, Path, description = "Your id for the subscriber"), ListTokens),
    responses((status = 200, description = "A page of the subscriber's tokens", body = Page<TokenView>),
              (status = 400, description = "A parameter is invalid", body = ErrorBody),
              (status = 404, description = "No such subscriber", body = ErrorBody)))]
pub async fn list(
    State(state): State<AppState>,
    ApiPath(subscriber): ApiPath<String>,
    ApiQuery(q): ApiQuery<ListTokens>,
) -> Result<Json<Page<TokenView>>, ApiError> {
    let page = PageRequest::<TokenId>::new("tokens", q.cursor.as_deref(), q.limit)?;
    // A deleted subscriber's tokens are listed still: they are its history.
    if !valid_id(&subscriber) || state.store.subscriber(&subscriber).await?.is_none() {
        return Err(no_subscriber(&subscriber));
    }
    let past = page.past.as_ref().map(TokenId::as_str);
    let rows = state
        .store
        .list_tokens(past, page.fetch(), Some(&subscriber))
        .await?;
    let now = state.store.clock().now_millis();
    Ok(Json(page.page(
        rows,
        |t| t.id.clone(),
        |t| TokenView::at(t, now),
    )))
}

/// Revokes a subscriber's token: from now on, every process sharing the database refuses it.
/// Revoking a revoked token changes nothing.
#[utoipa::path(delete, path = "/v1/subscribers/{id}/tokens/{token_id}", operation_id = "revoke_subscriber_token",
    tag = "subscribers",
    params(("id" = String, Path, description = "Your id for the subscriber"),
           ("token_id" = String, Path, description = "Token id (`tok_…`)")),
    responses((status = 204, description = "Revoked (or it was already)"),
              (status = 404, description = "The subscriber has no such token", body = ErrorBody)))]
pub async fn revoke(
    State(state): State<AppState>,
    Extension(actor): Extension<Actor>,
    ApiPath((subscriber, id)): ApiPath<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let not_found = || {
        ApiError::NotFound(format!(
            "subscriber '{subscriber}' has no token with id '{id}'"
        ))
    };
    let token_id = TokenId::parse(&id).ok_or_else(not_found)?;
    let revoked = state
        .store
        .revoke_token(&token_id, &actor.name, actor.via, Some(&subscriber))
        .await?;
    match revoked {
        Revoked::NotFound => Err(not_found()),
        Revoked::AlreadyRevoked => Ok(StatusCode::NO_CONTENT),
        Revoked::Revoked => {
            tracing::info!(token_id = %token_id, subscriber_id = %subscriber, actor = %actor.name,
                via = %actor.via, "subscriber token revoked");
            Ok(StatusCode::NO_CONTENT)
        }
    }
}

/// The routes of this resource.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/subscribers/{id}/tokens", get(list).post(create))
        .route("/subscribers/{id}/tokens/{token_id}", delete(revoke))
}
