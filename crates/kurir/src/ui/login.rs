//! Signing in with the admin token or a named token, and out.

use askama::Template;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use serde::Deserialize;

use super::error::UiError;
use super::render;
use super::session::{self, Session};
use crate::access::{Action, Via};
use crate::api::auth::authenticate;
use crate::api::state::AppState;

#[derive(Template)]
#[template(path = "login.html")]
struct LoginPage {
    failed: bool,
    signed_out: bool,
}

#[derive(Deserialize)]
struct LoginQuery {
    signed_out: Option<String>,
}

async fn form(Query(q): Query<LoginQuery>) -> Result<Response, UiError> {
    render(&LoginPage {
        failed: false,
        signed_out: q.signed_out.is_some(),
    })
}

#[derive(Deserialize)]
struct Credentials {
    token: String,
}

/// Checks the token as the API does and starts a session.
async fn sign_in(
    State(state): State<AppState>,
    headers: HeaderMap,
    Form(form): Form<Credentials>,
) -> Result<Response, UiError> {
    let token = form.token.trim();
    let actor = authenticate(&state, token, Via::Dashboard).await?;
    // The dashboard shows every subscriber's rows: a subscriber token may not read them here,
    // and is refused as an unknown token is.
    let Some(actor) = actor.filter(|a| a.may(Action::Read)) else {
        tracing::warn!("dashboard sign-in refused: no such token, or a subscriber token");
        let mut page = render(&LoginPage {
            failed: true,
            signed_out: false,
        })?;
        *page.status_mut() = StatusCode::UNAUTHORIZED;
        return Ok(page);
    };
    tracing::info!(actor = %actor.name, role = %actor.role, "dashboard sign-in");
    let cookie = session::issue(&state, actor.token_id.as_deref());
    Ok((
        [session::set_cookie(&headers, Some(&cookie))],
        Redirect::to("/ui/"),
    )
        .into_response())
}

#[derive(Deserialize)]
struct CsrfOnly {
    csrf: String,
}

async fn sign_out(
    session: Session,
    headers: HeaderMap,
    Form(form): Form<CsrfOnly>,
) -> Result<Response, UiError> {
    session.check_sign_out(&form.csrf)?;
    Ok((
        [session::set_cookie(&headers, None)],
        Redirect::to("/ui/login?signed_out=1"),
    )
        .into_response())
}

/// The routes of signing in and out.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/ui/login", get(form).post(sign_in))
        .route("/ui/logout", post(sign_out))
}
