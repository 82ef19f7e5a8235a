//! Request extractors that answer bad input in the API's error shape and name the field at
//! fault: [`ApiJson`] for bodies (size limit, syntax, types, unknown fields), [`ApiQuery`] for
//! query strings and [`ApiPath`] for path segments (one that is not UTF-8, say).
//!
//! They read what the OpenAPI document says: a body the document requires must be there
//! (`Option<ApiJson<T>>` where it may be left out, or be JSON `null`, as the document's
//! optional body allows).

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, OptionalFromRequest, Path, Query, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};

use super::error::ApiError;
use crate::listener::BodyTimedOut;

/// A JSON body, which the request must carry: a route whose body may be left out takes
/// `Option<ApiJson<T>>` (and documents it as optional).
#[derive(Debug)]
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        match body_of(req, state).await? {
            Some(bytes) => parse_json(&bytes).map(ApiJson),
            None => Err(ApiError::InvalidRequest(
                "this request needs a JSON body (send {} for an empty one)".into(),
            )),
        }
    }
}

impl<T: DeserializeOwned, S: Send + Sync> OptionalFromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Option<Self>, ApiError> {
        body_of(req, state)
            .await?
            .filter(|bytes| bytes.trim_ascii() != b"null")
            .map(|bytes| parse_json(&bytes).map(ApiJson))
            .transpose()
    }
}

/// The request's body; `None` when it has none (nothing, or only whitespace).
async fn body_of<S: Send + Sync>(req: Request, state: &S) -> Result<Option<Bytes>, ApiError> {
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
    Ok((!bytes.iter().all(u8::is_ascii_whitespace)).then_some(bytes))
}

/// Reads an optional whole number that JSON may write either way: `174` or `174.0`. The
/// document's `integer` allows both, so the server takes both; `174.5` is refused.
pub fn whole<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: TryFrom<i64>,
{
    Option::<serde_json::Number>::deserialize(d)?
        .map(|n| whole_number(&n).map_err(serde::de::Error::custom))
        .transpose()
}

/// [`whole`] for a field where `null` means something (clear it) and absence another (keep it).
pub fn whole_or_null<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: TryFrom<i64>,
{
    whole(d).map(Some)
}

fn whole_number<T: TryFrom<i64>>(n: &serde_json::Number) -> Result<T, String> {
    let value = n.as_i64().or_else(|| {
        n.as_f64()
            .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15)
            .map(|f| f as i64)
    });
    match value {
        Some(v) => T::try_from(v).map_err(|_| format!("{n} is out of range")),
        None => Err(format!("{n} is not a whole number")),
    }
}

/// The configured body limit, put in request extensions so a 413 can state it.
#[derive(Clone, Copy, Debug)]
pub struct BodyLimit(pub usize);

/// Parses `bytes` as `T`, turning a serde error into the field it concerns.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    // Every body of the API is a JSON object, but serde also reads a struct from an array, its
    // fields in order: `[null, null]` passed as an empty rotate-secret body.
    if bytes.trim_ascii_start().first() == Some(&b'[') {
        return Err(ApiError::InvalidRequest(
            "the body must be a JSON object, not an array".into(),
        ));
    }
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

    #[derive(Debug, serde::Deserialize)]
    struct Counted {
        #[serde(default, deserialize_with = "whole")]
        n: Option<u32>,
    }

    #[test]
    fn whole_numbers_may_be_written_as_floats() {
        let n = |json: &str| parse_json::<Counted>(json.as_bytes()).map(|c| c.n);
        assert_eq!(n(r#"{"n":174}"#).unwrap(), Some(174));
        assert_eq!(n(r#"{"n":174.0}"#).unwrap(), Some(174));
        assert_eq!(n(r#"{}"#).unwrap(), None);
        for bad in [r#"{"n":174.5}"#, r#"{"n":-1}"#, r#"{"n":"3"}"#] {
            assert!(
                matches!(n(bad), Err(ApiError::InvalidField { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn an_array_is_not_read_as_a_body_of_fields() {
        let refused = parse_json::<Counted>(b" [1]").unwrap_err();
        assert!(
            matches!(&refused, ApiError::InvalidRequest(m) if m.contains("JSON object")),
            "{refused:?}"
        );
        assert!(parse_json::<Counted>(b" {\"n\": 1}").is_ok());
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
