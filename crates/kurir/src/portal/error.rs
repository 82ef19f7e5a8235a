//! What the portal answers when a request cannot be served, in plain words for the subscriber's
//! people (who have no token and no sign-in form): a session that has ended, a link that does
//! not open, a refused form, or the admin API's own message and status. Server errors are logged
//! by [`ApiError`] and shown without details.

use askama::Template;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{Html, IntoResponse, Response};

use crate::api::error::ApiError;
use crate::store::portal::Opened;

/// Why a portal request failed.
#[derive(Debug, thiserror::Error)]
pub enum PortalError {
    /// No session in force: none, signed out, expired, revoked, or its subscriber disabled or
    /// deleted.
    #[error(
        "Your session has ended. Open the webhooks portal again from the site that sent you here."
    )]
    SignedOut,
    /// A portal link that does not open (its reason).
    #[error("{}", link_refusal(.0))]
    Link(Opened),
    /// A form without this session's CSRF token.
    #[error(
        "This form has expired or did not come from this portal. Reload the page and try again."
    )]
    Csrf,
    /// A read-only session asked to change something.
    #[error("This is a read-only session: you can look at everything here, but not change it.")]
    ReadOnly,
    /// What the admin API would have answered.
    #[error(transparent)]
    Api(#[from] ApiError),
}

impl From<crate::store::StoreError> for PortalError {
    fn from(e: crate::store::StoreError) -> Self {
        Self::Api(e.into())
    }
}

fn link_refusal(why: &Opened) -> &'static str {
    match why {
        Opened::Used => {
            "This link has already been used. Links open once: ask the site that sent you here \
             for a new one (open the webhooks page there again)."
        }
        Opened::Expired => {
            "This link has expired. Ask the site that sent you here for a new one (open the \
             webhooks page there again)."
        }
        Opened::Revoked => {
            "This link has been withdrawn. Ask the site that sent you here for a new one."
        }
        Opened::SubscriberUnavailable => {
            "This portal is not available at the moment. Ask the site that sent you here."
        }
        Opened::Unknown | Opened::Session(_) => {
            "This link does not work. Check that it was copied whole, or ask the site that sent \
             you here for a new one."
        }
    }
}

impl PortalError {
    fn status(&self) -> StatusCode {
        match self {
            Self::SignedOut => StatusCode::UNAUTHORIZED,
            Self::Link(Opened::Unknown) => StatusCode::NOT_FOUND,
            Self::Link(Opened::Expired | Opened::Used | Opened::Revoked) => StatusCode::GONE,
            Self::Link(_) => StatusCode::FORBIDDEN,
            Self::Csrf | Self::ReadOnly => StatusCode::FORBIDDEN,
            Self::Api(e) => e.status(),
        }
    }
}

/// The error page: no navigation, since there may be no session to navigate with.
#[derive(Template)]
#[template(path = "portal/error.html")]
struct ErrorPage {
    status: u16,
    heading: &'static str,
    message: String,
}

impl IntoResponse for PortalError {
    fn into_response(self) -> Response {
        let status = self.status();
        let heading = match &self {
            Self::SignedOut => "Signed out",
            Self::Link(_) => "This link cannot be opened",
            Self::ReadOnly => "Read-only session",
            _ => status.canonical_reason().unwrap_or("Error"),
        };
        let page = ErrorPage {
            status: status.as_u16(),
            heading,
            message: self.to_string(),
        };
        let mut response = match page.render() {
            Ok(html) => (status, Html(html)).into_response(),
            Err(_) => (status, page.message).into_response(),
        };
        if matches!(self, Self::SignedOut) {
            // htmx follows this instead of swapping the page into a fragment.
            response
                .headers_mut()
                .insert("hx-refresh", HeaderValue::from_static("true"));
        }
        response
    }
}
