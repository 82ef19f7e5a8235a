//! The admin API's one error shape: `{"error":{"code":"…","message":"…","field":"…"}}`.
//!
//! Handlers return [`ApiError`]; this module alone decides status codes and bodies. A client
//! error names the field at fault. A server error is logged here, once, with its details (inside
//! the request's span, so with its request id) and answered with a generic message.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;

use crate::outbox::EnqueueError;
use crate::store::StoreError;

/// An error answered to an admin API client.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The body is not JSON at all.
    #[error("the request body is not valid JSON: {0}")]
    MalformedJson(String),
    /// A body field, query parameter or header has a wrong value.
    #[error("{field}: {message}")]
    InvalidField {
        /// The field, parameter or header, as the client named it.
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// The request is wrong in a way no single field explains.
    #[error("{0}")]
    InvalidRequest(String),
    /// No or a wrong bearer token.
    #[error("a valid token is required: send 'Authorization: Bearer <token>' with the admin token or a named token")]
    Unauthorized,
    /// No or a wrong bearer token on an inbox source's status route.
    #[error("the admin token, a named token or this source's read token is required: send 'Authorization: Bearer <token>'")]
    ReadTokenRequired,
    /// The token works, but its role does not allow this request ([`crate::access::Actor::may`]).
    #[error("{0}")]
    Forbidden(String),
    /// What the request names does not exist.
    #[error("{0}")]
    NotFound(String),
    /// The route exists but not with this method.
    #[error("method not allowed on this path")]
    MethodNotAllowed,
    /// The request contradicts what is stored.
    #[error("{message}")]
    Conflict {
        /// Machine-readable reason.
        code: &'static str,
        /// What conflicts.
        message: String,
    },
    /// The event catalog refuses the event (`422`): its data fails the version's schema
    /// (`schema_mismatch`, with each failing value), or, in strict mode, the catalog has no such
    /// type or version (`unknown_event_type`). Nothing was stored.
    #[error("{message}")]
    Unprocessable {
        /// Machine-readable reason.
        code: &'static str,
        /// What is wrong.
        message: String,
        /// Each failing value: its JSON pointer within `data` and the rule it broke.
        failures: Vec<crate::catalog::Failure>,
    },
    /// The body did not arrive within the HTTP body timeout.
    #[error("the request body did not arrive in time (KURIR_HTTP_BODY_TIMEOUT)")]
    RequestTimeout,
    /// The body is over the configured limit.
    #[error("the request body is larger than the limit of {0} bytes")]
    TooLarge(usize),
    /// An event's data is over the outbox's payload limit.
    #[error(
        "data is larger than the limit of {} bytes",
        crate::outbox::MAX_PAYLOAD_BYTES
    )]
    DataTooLarge,
    /// The database cannot be had for now (unreachable, shutting down, busy): `503` with
    /// `Retry-After`; details are logged, not answered.
    #[error("the database is unavailable; retry later")]
    Unavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// Something failed on the server; details are logged, not answered.
    #[error("internal error")]
    Internal(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// The JSON body of every error response.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"error": {"code": "invalid_field", "message": "url: must be an absolute http(s) URL", "field": "url"}}))]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// What went wrong.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    /// Machine-readable: `invalid_json`, `invalid_field`, `invalid_request`, `unauthorized`,
    /// `forbidden`, `not_found`, `method_not_allowed`, `event_id_conflict`,
    /// `idempotency_key_reused`, `source_exists`, `token_name_taken`, `request_timeout`,
    /// `payload_too_large`, `schema_mismatch`, `unknown_event_type`, `database_unavailable` or
    /// `internal_error` (and the conflicts' own: `endpoint_deleted`, `delivery_sent`,
    /// `not_failed`, `event_type_in_use`).
    pub code: String,
    /// For people.
    pub message: String,
    /// The body field, query parameter or header at fault, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// With `schema_mismatch`: each value of `data` that fails the event's schema.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub failures: Vec<crate::catalog::Failure>,
}

impl ApiError {
    /// A field-level error.
    pub fn field(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::InvalidField {
            field: field.into(),
            message: message.into(),
        }
    }

    /// The HTTP status this error is answered with.
    pub fn status(&self) -> StatusCode {
        self.status_and_code().0
    }

    fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            Self::MalformedJson(_) => (StatusCode::BAD_REQUEST, "invalid_json"),
            Self::InvalidField { .. } => (StatusCode::BAD_REQUEST, "invalid_field"),
            Self::InvalidRequest(_) => (StatusCode::BAD_REQUEST, "invalid_request"),
            Self::Unauthorized | Self::ReadTokenRequired => {
                (StatusCode::UNAUTHORIZED, "unauthorized")
            }
            Self::Forbidden(_) => (StatusCode::FORBIDDEN, "forbidden"),
            Self::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            Self::MethodNotAllowed => (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"),
            Self::Conflict { code, .. } => (StatusCode::CONFLICT, code),
            Self::Unprocessable { code, .. } => (StatusCode::UNPROCESSABLE_ENTITY, code),
            Self::RequestTimeout => (StatusCode::REQUEST_TIMEOUT, "request_timeout"),
            Self::TooLarge(_) | Self::DataTooLarge => {
                (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large")
            }
            Self::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "database_unavailable"),
            Self::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal_error"),
        }
    }
}

impl ApiError {
    /// The status and the error as answered; a server error is logged here, once.
    pub fn detail(&self) -> (StatusCode, ErrorDetail) {
        let (status, code) = self.status_and_code();
        match self {
            Self::Internal(e) => tracing::error!(error = %e, "admin API request failed"),
            Self::Unavailable(e) => {
                tracing::warn!(error = %e, "request refused: the database is unavailable")
            }
            _ => {}
        }
        let field = match self {
            Self::InvalidField { field, .. } => Some(field.clone()),
            _ => None,
        };
        let failures = match self {
            Self::Unprocessable { failures, .. } => failures.clone(),
            _ => Vec::new(),
        };
        let detail = ErrorDetail {
            code: code.to_owned(),
            message: self.to_string(),
            field,
            failures,
        };
        (status, detail)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, error) = self.detail();
        let body = ErrorBody { error };
        let mut response = (status, Json(body)).into_response();
        if status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                "Bearer".parse().expect("static header"),
            );
        }
        if status == StatusCode::SERVICE_UNAVAILABLE {
            response.headers_mut().insert(
                header::RETRY_AFTER,
                HeaderValue::from(kurir_receiver::error::RETRY_AFTER_SECONDS),
            );
        }
        response
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        // The API checked that `data` is an object within `limits::MAX_JSON_DEPTH`, so the
        // database refusing it as one means its own JSON functions could not read it: on
        // MariaDB they read 31 levels of nesting, on MySQL 100. The same data would be
        // refused again: a 400, not a 500 a client would retry.
        if e.breaks_contract_rule("kurir_outbox_payload_object") {
            return Self::field(
                "data",
                format!(
                    "nests deeper than this database's JSON functions read (MariaDB's read 31 \
                     levels, MySQL's 100), though within kurir's limit of {} levels",
                    crate::limits::MAX_JSON_DEPTH
                ),
            );
        }
        if e.is_unavailable() {
            Self::Unavailable(Box::new(e))
        } else {
            Self::Internal(Box::new(e))
        }
    }
}

impl From<kurir_receiver::StoreError> for ApiError {
    fn from(e: kurir_receiver::StoreError) -> Self {
        if e.is_unavailable() {
            Self::Unavailable(Box::new(e))
        } else {
            Self::Internal(Box::new(e))
        }
    }
}

impl From<EnqueueError> for ApiError {
    fn from(e: EnqueueError) -> Self {
        match e {
            EnqueueError::InvalidEventType(m) => Self::field("event_type", m),
            EnqueueError::InvalidPayload(m) => Self::field("data", m),
            EnqueueError::PayloadTooLarge(_) => Self::DataTooLarge,
            EnqueueError::PayloadTooDeep(depth) => Self::field(
                "data",
                format!(
                    "nests {depth} levels deep; at most {} are allowed",
                    crate::limits::MAX_JSON_DEPTH
                ),
            ),
            EnqueueError::InvalidOccurredAt => {
                Self::field("occurred_at", "must be within the years 0001 to 9999")
            }
            EnqueueError::InvalidAggregate { field } => Self::field(
                field,
                format!(
                    "must be 1 to {} bytes without NUL",
                    crate::outbox::MAX_AGGREGATE_BYTES
                ),
            ),
            EnqueueError::InvalidVersion(v) => Self::field("version", format!("{v} is below 1")),
            EnqueueError::DuplicateEventId(id) => Self::Conflict {
                code: "event_id_conflict",
                message: format!("an event with event_id '{id}' already exists"),
            },
            EnqueueError::Database(e) => StoreError::Database(e).into(),
        }
    }
}

impl From<crate::catalog::CatalogError> for ApiError {
    fn from(e: crate::catalog::CatalogError) -> Self {
        Self::field(e.field, e.message)
    }
}
