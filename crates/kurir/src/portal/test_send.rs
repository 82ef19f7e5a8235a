//! Test sends (issue 31): a signed `kurir.test` event sent at once to one of the subscriber's
//! endpoints, and the request that was sent and the response that came back.
//!
//! The send is the admin API's `POST /v1/endpoints/{id}/test` handler called as the visitor's
//! actor: another subscriber's endpoint answers 404 as a missing one, and a read-only session
//! is refused (403), the form hidden from it. The page shows the request whole, signatures
//! included: they are the subscriber's own (it may reveal the secret that makes them) and help
//! it debug its verification; the page is not cached (the portal's headers) and none of it is
//! logged.

use askama::Template;
use axum::extract::{Query, State};
use axum::http::Method;
use axum::response::Response;
use axum::routing::get;
use axum::{Extension, Form, Router};
use serde::Deserialize;

use super::error::PortalError;
use super::session::Visitor;
use super::view::Chrome;
use crate::api::endpoint_test;
use crate::api::endpoints::{self as endpoints_api, EndpointView, ListEndpoints};
use crate::api::extract::{ApiPath, ApiQuery};
use crate::api::state::AppState;
use crate::probe::TestResult;
use crate::ui::view::given;

#[derive(Default, Deserialize)]
struct Pick {
    endpoint_id: Option<String>,
}

#[derive(Template)]
#[template(path = "portal/test_send.html")]
struct TestPage {
    chrome: Chrome,
    endpoints: Vec<EndpointView>,
    endpoint_id: String,
    result: Option<TestResult>,
}

impl TestPage {
    /// The response's body, indented when it is JSON.
    fn body_of(&self, text: &str) -> String {
        crate::ui::view::pretty_json(text)
    }
}

/// The subscriber's live endpoints (the first 200: a test picks one), as the visitor.
async fn endpoints(state: &AppState, visitor: &Visitor) -> Result<Vec<EndpointView>, PortalError> {
    let query = ListEndpoints {
        cursor: None,
        limit: Some(200),
        subscriber_id: None,
    };
    Ok(endpoints_api::list(
        State(state.clone()),
        Extension(visitor.actor().clone()),
        ApiQuery(query),
    )
    .await?
    .0
    .data)
}

/// The form: which endpoint to test.
async fn form(
    State(state): State<AppState>,
    visitor: Visitor,
    Query(pick): Query<Pick>,
) -> Result<Response, PortalError> {
    visitor.allow(&Method::POST, "/endpoints/{id}/test")?;
    super::render(&TestPage {
        chrome: Chrome::new(&state, &visitor, "deliveries", "Send a test event").await?,
        endpoints: endpoints(&state, &visitor).await?,
        endpoint_id: given(&pick.endpoint_id).unwrap_or_default(),
        result: None,
    })
}

#[derive(Deserialize)]
struct SendForm {
    csrf: String,
    endpoint_id: String,
}

/// Sends the test event and shows what was sent and what came back.
async fn send(
    State(state): State<AppState>,
    visitor: Visitor,
    Form(f): Form<SendForm>,
) -> Result<Response, PortalError> {
    visitor.check(
        &f.csrf,
        &Method::POST,
        &format!("/endpoints/{}/test", f.endpoint_id),
    )?;
    let result = endpoint_test::test(
        State(state.clone()),
        Extension(visitor.actor().clone()),
        ApiPath(f.endpoint_id.clone()),
    )
    .await?
    .0;
    super::render(&TestPage {
        chrome: Chrome::new(&state, &visitor, "deliveries", "Send a test event").await?,
        endpoints: endpoints(&state, &visitor).await?,
        endpoint_id: f.endpoint_id,
        result: Some(result),
    })
}

/// The test send's routes.
pub fn router() -> Router<AppState> {
    Router::new().route("/portal/test", get(form).post(send))
}
