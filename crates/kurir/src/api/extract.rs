//! Request extractors that answer bad input in the API's error shape and name the field at
//! fault: [`ApiJson`] for bodies (size limit, syntax, types, unknown fields), [`ApiQuery`] for
//! query strings and [`ApiPath`] for path segments (one that is not UTF-8, say).

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

use super::error::ApiError;
use crate::listener::BodyTimedOut;

/// A JSON body. An empty body counts as `{}` when `T` allows it (for optional bodies).
#[derive(Debug)]
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let limit = req.extensions().get::<BodyLimit>().map_or(0, |l| l.0);
        let bytes = Bytes::from_request(req, state).await.map_err(|e| {
            if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::TooLarge(limit)
            } else if BodyTimedOut::caused(&e) {
                ApiError::RequestTimeout
            } else {
                ApiError::InvalidRequest(e.body_text())
            }
        })?;
        let bytes: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
            b"{}"
        } else {
            &bytes
        };
        parse_json(bytes).map(ApiJson)
    }
}

/// The configured body limit, put in request extensions so a 413 can state it.
#[derive(Clone, Copy, Debug)]
pub struct BodyLimit(pub usize);

/// Parses `bytes` as `T`, turning a serde error into the field it concerns.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        match inner.classify() {
            serde_json::error::Category::Data => data_error(path, &inner),
            _ => ApiError::MalformedJson(inner.to_string()),
        }
    })?;
    de.end()
        .map_err(|e| ApiError::MalformedJson(e.to_string()))?;
    Ok(value)
}

/// A type or value error: at `path`, or at the field the message names (`missing field `x``).
fn data_error(path: String, e: &serde_json::Error) -> ApiError {
    let message = strip_position(&e.to_string());
    let field = if path == "." || path.is_empty() {
        message
            .split('`')
            .nth(1)
            .filter(|_| message.contains("field `"))
            .map(str::to_owned)
    } else {
        Some(path)
    };
    match field {
        Some(field) => ApiError::field(field, message),
        None => ApiError::InvalidRequest(message),
    }
}

/// serde_json appends " at line 1 column 42"; the field name says more.
fn strip_position(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(i) => message[..i].to_owned(),
        None => message.to_owned(),
    }
}

/// A query string; unknown parameters and bad values are errors naming the parameter.
#[derive(Debug)]
pub struct ApiQuery<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        Query::<T>::try_from_uri(&parts.uri)
            .map(|Query(v)| ApiQuery(v))
            .map_err(|e| {
                let text = e.body_text();
                let text = text
                    .strip_prefix("Failed to deserialize query string: ")
                    .unwrap_or(&text);
                match text.split_once(": ") {
                    Some((field, message)) if !field.contains(' ') => {
                        ApiError::field(field, message)
                    }
                    _ => match text.split('`').nth(1).filter(|_| text.contains("field `")) {
                        Some(field) => ApiError::field(field, text),
                        None => ApiError::InvalidRequest(text.to_owned()),
                    },
                }
            })
    }
}

/// Path parameters. A segment that cannot be read (not UTF-8 once percent-decoded) is a `400` in
/// the API's error shape, not axum's plain text.
#[derive(Debug)]
pub struct ApiPath<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for ApiPath<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Path::<T>::from_request_parts(parts, state)
            .await
            .map(|Path(v)| ApiPath(v))
            .map_err(|e| ApiError::InvalidRequest(e.body_text()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Body {
        url: String,
        max_in_flight: Option<u32>,
        data: Option<Box<serde_json::value::RawValue>>,
    }

    fn field_of(json: &str) -> Option<String> {
        match parse_json::<Body>(json.as_bytes()) {
            Err(ApiError::InvalidField { field, .. }) => Some(field),
            Err(other) => panic!("{json}: {other:?}"),
            Ok(_) => None,
        }
    }

    #[test]
    fn type_errors_name_the_field() {
        assert_eq!(
            field_of(r#"{"url":"x","max_in_flight":"many"}"#).as_deref(),
            Some("max_in_flight")
        );
        assert_eq!(field_of(r#"{"max_in_flight":1}"#).as_deref(), Some("url"));
        assert_eq!(
            field_of(r#"{"url":"x","colour":1}"#).as_deref(),
            Some("colour")
        );
        assert_eq!(field_of(r#"{"url":"x","data":{"a":[1]}}"#), None);
    }

    #[test]
    fn syntax_errors_are_malformed_json() {
        for bad in [r#"{"url":"#, "not json", r#"{"url":"x"} trailing"#] {
            assert!(
                matches!(
                    parse_json::<Body>(bad.as_bytes()),
                    Err(ApiError::MalformedJson(_))
                ),
                "{bad}"
            );
        }
    }
}
