//! The crate's error vocabulary at its two edges.
//!
//! - [`ConfigError`]: a source or processor was configured wrongly; returned while building, never
//!   at request time, with a message a user can act on.
//! - [`ApiError`]: the one JSON shape every non-2xx answer has, `{"error":{"code":"…","message":"…"}}`.
//!   Messages name the failed check; they never echo secrets, signatures or bodies, and a `500`
//!   says only "internal error" (the cause is logged once, where it happened).
//!
//! Storage failures are [`StoreError`](crate::StoreError), request rejections
//! [`Rejection`](crate::Rejection); both turn into an [`ApiError`] at the HTTP edge.

use axum::response::{IntoResponse, Response};
use axum::Json;
use http::header::RETRY_AFTER;
use http::{HeaderValue, StatusCode};
use kurir_core::{InvalidRetryPolicy, InvalidSecret};
use serde::Serialize;

/// The `Retry-After` of a `503`, in seconds.
pub const RETRY_AFTER_SECONDS: u64 = 5;

/// Why a [`WebhookSource`](crate::WebhookSource) or [`Processor`](crate::Processor) cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The source name is empty, too long or has characters other than `A-Z a-z 0-9 . _ -`.
    #[error(
        "source name {0:?} is invalid: use 1 to 64 characters from A-Z, a-z, 0-9, '.', '_', '-'"
    )]
    InvalidSourceName(String),
    /// The source was given no secret.
    #[error("source {0} has no secret: configure at least one")]
    NoSecrets(String),
    /// One of the source's secrets is unusable under its scheme.
    #[error("secret #{index} of source {source_name} is unusable: {reason}")]
    InvalidSecret {
        /// The source.
        source_name: String,
        /// Position of the secret in the list given, from 0.
        index: usize,
        /// What is wrong with it (never the secret itself).
        reason: InvalidSecret,
    },
    /// The retry policy does not make sense.
    #[error("invalid retry policy: {0}")]
    RetryPolicy(#[from] InvalidRetryPolicy),
    /// A lease of zero would expire before the handler starts.
    #[error("the processing lease must be longer than zero")]
    ZeroLease,
}

/// A non-2xx answer: status code plus the JSON error body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// A stable, machine-readable code, e.g. `signature_mismatch`.
    pub code: &'static str,
    /// A human-readable explanation naming the failed check.
    pub message: String,
}

impl ApiError {
    /// An error answer.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }

    /// `503 database_unavailable`, answered with `Retry-After`: the database cannot be had for
    /// now; the sender should try again later.
    pub fn unavailable() -> ApiError {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "database_unavailable",
            "the database is unavailable; retry later",
        )
    }

    /// `500 internal`: the details stay in the log.
    pub fn internal() -> ApiError {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "internal error",
        )
    }
}

#[derive(Serialize)]
struct Body<'a> {
    error: Detail<'a>,
}

#[derive(Serialize)]
struct Detail<'a> {
    code: &'a str,
    message: &'a str,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = Body {
            error: Detail {
                code: self.code,
                message: &self.message,
            },
        };
        let mut response = (self.status, Json(body)).into_response();
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            response
                .headers_mut()
                .insert(RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECONDS));
        }
        response
    }
}
