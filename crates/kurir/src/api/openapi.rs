//! `GET /v1/openapi.json`: the OpenAPI 3 document of the admin API, generated from the handlers'
//! annotations and the request and response types, so it cannot drift from the code.

use axum::routing::get;
use axum::{Json, Router};
use utoipa::openapi::path::{HttpMethod, OperationBuilder};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::ResponseBuilder;
use utoipa::{Modify, OpenApi};

use super::{
    deliveries, endpoint_test, endpoints, events, events_batch, inbox_events, replays, sources,
    stats,
};
use crate::api::state::AppState;
use crate::gateway::routes;

/// The admin API's document.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "kurir admin API",
        description = "Endpoints, events, deliveries, replays, stats and inbox sources of a kurir \
            deployment. Every /v1 route but this document needs `Authorization: Bearer <admin \
            token>`; errors are \
            `{\"error\":{\"code\":\"…\",\"message\":\"…\"}}`. The inbox gateway's \
            routes (/inbox/…) are for partners and applications: the signature, or a source's \
            read token, authenticates them."
    ),
    paths(
        endpoints::create, endpoints::list, endpoints::show, endpoints::update, endpoints::delete,
        endpoints::rotate_secret, endpoint_test::test, events::publish, events_batch::publish_batch, events::show,
        events::list, deliveries::list, replays::replay_event, replays::replay_bulk,
        replays::preview, replays::list, stats::stats, sources::create, sources::list,
        sources::show, sources::update, sources::delete, inbox_events::list, inbox_events::retry,
        routes::receive, routes::status, openapi_json
    ),
    modifiers(&BearerAuth, &Health),
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
