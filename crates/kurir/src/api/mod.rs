//! The admin API under `/v1`: JSON over HTTP, bearer-token authenticated.
//!
//! One resource per module, each with its `router()` at the bottom: [`endpoints`],
//! [`endpoint_test`], [`events`], [`events_batch`], [`recheck`], [`event_types`] (the event
//! catalog), [`deliveries`], [`replays`], [`stats`], [`sources`] and [`inbox_events`] (the inbox
//! gateway's), [`tokens`] (named tokens, and who the caller is), [`subscribers`] (the sender's
//! customers) and [`subscriber_tokens`] (their tokens, confined to one subscriber), [`openapi`]
//! (the one route without a token). Cross-cutting pieces: [`auth`] (the token check, and the
//! role and scope check that [`crate::access`] decides), [`error`] (the one error shape),
//! [`extract`] (body and query parsing that names the field at fault), [`page`] (cursor
//! pagination). Every request gets an `x-request-id` (kept when the client sent one) that is on
//! its log lines and in its response.

pub mod auth;
pub mod circuit;
pub mod deliveries;
pub mod endpoint_test;
pub mod endpoints;
pub mod error;
pub mod event_types;
pub mod events;
pub mod events_batch;
pub mod extract;
pub mod inbox_events;
pub mod openapi;
pub mod page;
pub mod portal;
pub mod recheck;
pub mod replays;
pub mod sources;
pub mod state;
pub mod stats;
pub mod subscriber_tokens;
pub mod subscribers;
pub mod tokens;

use axum::body::Body;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderValue, Request};
use axum::{middleware, Extension, Router};
use tower_http::request_id::{
    MakeRequestId, PropagateRequestIdLayer, RequestId, SetRequestIdLayer,
};
use tower_http::trace::{DefaultOnResponse, TraceLayer};
use tower_http::LatencyUnit;

use crate::api::state::AppState;
use error::ApiError;
use extract::BodyLimit;

/// `/v1/…`, with authentication, the body limit, request ids and request logs.
pub fn router(state: AppState) -> Router {
    let limit = state.max_body_bytes;
    let v1 = Router::new()
        .merge(endpoints::router())
        .merge(circuit::router())
        .merge(endpoint_test::router())
        .merge(events::router())
        .merge(events_batch::router(limit))
        .merge(recheck::router())
        .merge(event_types::router())
        .merge(deliveries::router())
        .merge(replays::router())
        .merge(stats::router())
        .merge(sources::router())
        .merge(inbox_events::router())
        .merge(tokens::router())
        .merge(subscribers::router())
        .merge(subscriber_tokens::router())
        .merge(portal::router())
        .fallback(|| async { ApiError::NotFound("no such route".into()) })
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        .layer(middleware::from_fn_with_state(
            state.clone(),
            auth::require_token,
        ))
        .layer(Extension(BodyLimit(limit)))
        .layer(DefaultBodyLimit::max(limit))
        .merge(openapi::router());
    Router::new()
        .nest("/v1", v1)
        .layer(PropagateRequestIdLayer::x_request_id())
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(request_span)
                .on_request(())
                .on_response(
                    DefaultOnResponse::new()
                        .level(tracing::Level::INFO)
                        .latency_unit(LatencyUnit::Millis),
                )
                .on_failure(()),
        )
        .layer(SetRequestIdLayer::x_request_id(UuidV7RequestId))
        .with_state(state)
}

/// The span of one request: method, path (no query string) and request id; the token's name
/// and where the request came from once it is authenticated ([`auth::require_token`]).
fn request_span(req: &Request<Body>) -> tracing::Span {
    let request_id = req
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("-");
    tracing::info_span!(
        "admin_api",
        method = %req.method(),
        path = %req.uri().path(),
        request_id = %request_id,
        actor = tracing::field::Empty,
        via = tracing::field::Empty,
    )
}

/// Request ids are UUIDv7s, so they sort by time in logs.
#[derive(Clone, Copy, Debug)]
struct UuidV7RequestId;

impl MakeRequestId for UuidV7RequestId {
    fn make_request_id<B>(&mut self, _: &Request<B>) -> Option<RequestId> {
        HeaderValue::from_str(&uuid::Uuid::now_v7().to_string())
            .ok()
            .map(RequestId::new)
    }
}
