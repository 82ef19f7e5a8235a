//! `GET /v1/openapi.json`: the OpenAPI 3 document of the admin API, generated from the handlers'
//! annotations and the request and response types, so it cannot drift from the code.

use axum::routing::get;
use axum::{Json, Router};
use utoipa::openapi::path::{HttpMethod, OperationBuilder};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{ContentBuilder, Ref, ResponseBuilder};
use utoipa::{Modify, OpenApi};

use super::{
    circuit, deliveries, endpoint_test, endpoints, event_types, events, events_batch, inbox_events,
    recheck, replays, sources, stats, subscribers, tokens,
};
use crate::access::Action;
use crate::api::state::AppState;
use crate::gateway::routes;

/// The admin API's document.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "kurir admin API",
        description = "Endpoints, events, the event catalog, deliveries, replays, stats, inbox \
            sources and tokens of a kurir deployment. Every /v1 route but this document needs `Authorization: Bearer \
            <token>`: the admin token of the environment, or a named token, whose role decides \
            what it may do (`viewer`: GET only; `operator`: everything but /v1/tokens; `admin`: \
            everything), answering 403 otherwise. Errors are \
            `{\"error\":{\"code\":\"…\",\"message\":\"…\"}}`. The inbox gateway's \
            routes (/inbox/…) are for partners and applications: the signature, or a source's \
            read token, authenticates them."
    ),
    paths(
        endpoints::create, endpoints::list, endpoints::show, endpoints::update, endpoints::delete,
        endpoints::rotate_secret, circuit::operate, circuit::actions, endpoint_test::test, events::publish, events_batch::publish_batch, events::show,
        events::list, deliveries::list, replays::replay_event, replays::replay_bulk,
        replays::preview, replays::preview_event, replays::list, stats::stats, sources::create, sources::list,
        sources::show, sources::update, sources::delete, inbox_events::list, inbox_events::get_one,
        inbox_events::retry,
        tokens::create, tokens::list, tokens::revoke, tokens::whoami,
        subscribers::create, subscribers::list, subscribers::show, subscribers::put,
        subscribers::update, subscribers::delete,
        routes::receive, routes::status, openapi_json, recheck::recheck, event_types::list,
        event_types::show, event_types::put, event_types::delete, event_types::export
    ),
    modifiers(&BearerAuth, &Health, &AccessResponses),
    security(("bearer" = []))
)]
pub struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let scheme =
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build());
        doc.components
            .get_or_insert_with(Default::default)
            .add_security_scheme("bearer", scheme);
    }
}

/// The answers of the token check on every `/v1` operation that needs a token: 401 without a
/// token that works, and 403 where [`Action::of_api_request`] says a role may be refused, so the
/// document states what the middleware does rather than what each handler remembered to say.
struct AccessResponses;

impl Modify for AccessResponses {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let error = |description: &str| {
            let body = ContentBuilder::new()
                .schema(Some(Ref::from_schema_name("ErrorBody")))
                .build();
            ResponseBuilder::new()
                .description(description)
                .content("application/json", body)
                .build()
        };
        for (path, item) in doc.paths.paths.iter_mut() {
            let Some(below_v1) = path.strip_prefix("/v1") else {
                continue;
            };
            let operations = [
                (http::Method::GET, &mut item.get),
                (http::Method::POST, &mut item.post),
                (http::Method::PUT, &mut item.put),
                (http::Method::PATCH, &mut item.patch),
                (http::Method::DELETE, &mut item.delete),
            ];
            for (method, operation) in operations {
                let Some(op) = operation.as_mut() else {
                    continue;
                };
                let public = op
                    .security
                    .as_ref()
                    .is_some_and(|s| s.iter().all(|r| *r == SecurityRequirement::default()));
                if public {
                    continue;
                }
                let responses = &mut op.responses.responses;
                responses.entry("401".into()).or_insert_with(|| {
                    error("No token, or one that is unknown, revoked or expired (`unauthorized`)")
                        .into()
                });
                let refusal = match Action::of_api_request(&method, below_v1) {
                    Action::Read => continue,
                    Action::Change => "The token's role may not change anything: a viewer only reads (`forbidden`)",
                    Action::ManageTokens => "Only the admin role manages tokens (`forbidden`)",
                };
                responses
                    .entry("403".into())
                    .or_insert_with(|| error(refusal).into());
            }
        }
    }
}

/// `/healthz` and `/readyz` live outside `/v1` and need no token.
struct Health;

impl Modify for Health {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        for (path, id, summary, ok, failed) in [
            (
                "/healthz",
                "liveness",
                "Liveness: the process answers",
                "ok",
                None,
            ),
            (
                "/readyz",
                "readiness",
                "Readiness: the database answers",
                "ready",
                Some("database unreachable"),
            ),
        ] {
            let mut op = OperationBuilder::new()
                .operation_id(Some(id))
                .summary(Some(summary))
                .tag("health")
                .security(SecurityRequirement::default())
                .response("200", ResponseBuilder::new().description(ok));
            if let Some(failed) = failed {
                op = op.response("503", ResponseBuilder::new().description(failed));
            }
            doc.paths
                .add_path_operation(path, vec![HttpMethod::Get], op.build());
        }
    }
}

/// This document.
#[utoipa::path(get, path = "/v1/openapi.json", operation_id = "get_openapi_document", tag = "meta",
    security(()),
    responses((status = 200, description = "The OpenAPI 3 document of this API", content_type = "application/json")))]
pub async fn openapi_json() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}

/// The routes of this resource; served without a token (the document holds no data).
pub fn router() -> Router<AppState> {
    Router::new().route("/openapi.json", get(openapi_json))
}
