//! What the dashboard answers when a request cannot be served: a sign-in redirect, a refused CSRF
//! token, or an error page carrying the admin API's message and status. Server errors are logged
//! by [`ApiError`] and shown without details.

use askama::Template;
use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Redirect, Response};

use crate::api::error::ApiError;

/// Why a dashboard request failed.
#[derive(Debug, thiserror::Error)]
pub enum UiError {
    /// No valid session: go and sign in.
    #[error("sign in first")]
    SignInRequired,
    /// A form without this session's CSRF token.
    #[error(
        "this form has expired or did not come from this dashboard; reload the page and try again"
    )]
    Csrf,
    /// What the admin API would have answered.
    #[error(transparent)]
    Api(#[from] ApiError),
}

/// A template that failed to render: a server error, logged, shown without details.
pub(super) fn internal(e: askama::Error) -> UiError {
    UiError::Api(ApiError::Internal(Box::new(e)))
}

impl From<crate::store::StoreError> for UiError {
    fn from(e: crate::store::StoreError) -> Self {
        Self::Api(e.into())
    }
}

/// The error page.
#[derive(Template)]
#[template(path = "error.html")]
struct ErrorPage {
    status: u16,
    reason: &'static str,
    message: String,
}

impl IntoResponse for UiError {
    fn into_response(self) -> Response {
        let (status, message) = match self {
            Self::SignInRequired => {
                let mut response = Redirect::to("/ui/login").into_response();
                // htmx follows this header instead of swapping the login page into a fragment.
                response
                    .headers_mut()
                    .insert("hx-redirect", header::HeaderValue::from_static("/ui/login"));
                return response;
            }
            Self::Csrf => (StatusCode::FORBIDDEN, self.to_string()),
            Self::Api(e) => (e.status(), e.to_string()),
        };
        let page = ErrorPage {
            status: status.as_u16(),
            reason: status.canonical_reason().unwrap_or("Error"),
            message,
        };
        match page.render() {
            Ok(html) => (status, Html(html)).into_response(),
            Err(_) => (status, page.message).into_response(),
        }
    }
}
