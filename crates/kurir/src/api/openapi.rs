//! `GET /v1/openapi.json`: the OpenAPI 3 document of the admin API, generated from the handlers'
//! annotations and the request and response types, so it cannot drift from the code.

use axum::routing::get;
use axum::{Json, Router};
use std::collections::BTreeMap;
use utoipa::openapi::path::{HttpMethod, Operation, OperationBuilder, ParameterIn};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};

use utoipa::openapi::schema::{AdditionalProperties, ArrayItems, Object};
use utoipa::openapi::{ContentBuilder, Ref, RefOr, ResponseBuilder, Schema};
use utoipa::{Modify, OpenApi};

use super::{
    circuit, deliveries, endpoint_test, endpoints, event_types, events, events_batch, inbox_events,
    portal, recheck, replays, sources, stats, subscriber_tokens, subscribers, tokens,
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
            everything), answering 403 otherwise; or a subscriber token (`kurir_sub_…`), which \
            reaches only its subscriber's endpoints, events, deliveries and replays, answers \
            404 for anything else's ids as for a missing id, and 403 on routes it may not use \
            (publishing, stats, inbox sources, tokens, other subscribers). Errors are \
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
        subscribers::update, subscribers::delete, subscribers::actions, subscriber_tokens::create,
        subscriber_tokens::list, subscriber_tokens::revoke, portal::create_link,
        portal::revoke_sessions,
        routes::receive, routes::status, openapi_json, recheck::recheck, event_types::list,
        event_types::show, event_types::put, event_types::delete, event_types::export
    ),
    modifiers(&BearerAuth, &Health, &AccessResponses, &InputResponses, &OpenFlattened),
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
                    Action::ReadOwn => continue,
                    Action::Read => "A subscriber token may not use this route (`forbidden`)",
                    Action::ChangeOwn => "The token's role may not change anything: a viewer only reads (`forbidden`)",
                    Action::Change => "The token's role may not change anything (a viewer only reads), or it is a subscriber token, which may not use this route (`forbidden`)",
                    Action::ManageTokens => "Only the admin role manages tokens (`forbidden`)",
                    Action::ManageSubscriberTokens => "Only the operator and admin roles manage a subscriber's tokens (`forbidden`)",
                };
                responses
                    .entry("403".into())
                    .or_insert_with(|| error(refusal).into());
            }
        }
    }
}

/// The answer of the extractors ([`super::extract`]) on every `/v1` operation that takes
/// parameters or a body: `400` naming the parameter or field at fault. And the one rule every
/// listing's `cursor` shares ([`super::page`]): it is a `next_cursor` from an earlier page, never
/// empty (an empty one is refused rather than read as "the first page again", which would set a
/// script that loops on `cursor` going round forever). Routes added later get both.
struct InputResponses;

impl Modify for InputResponses {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        for (path, item) in doc.paths.paths.iter_mut() {
            if !path.starts_with("/v1/") {
                continue;
            }
            let operations = [
                &mut item.get,
                &mut item.post,
                &mut item.put,
                &mut item.patch,
                &mut item.delete,
            ];
            for op in operations.into_iter().flatten() {
                bad_input_response(op);
                for param in op.parameters.iter_mut().flatten() {
                    if param.name == "cursor" && param.parameter_in == ParameterIn::Query {
                        if let Some(RefOr::T(Schema::Object(schema))) = param.schema.as_mut() {
                            schema.min_length = Some(1);
                        }
                    }
                }
            }
        }
    }
}

/// Adds `400` to `op` when it takes parameters or a body and does not document one yet.
fn bad_input_response(op: &mut Operation) {
    let takes_input =
        op.request_body.is_some() || op.parameters.as_ref().is_some_and(|p| !p.is_empty());
    if !takes_input {
        return;
    }
    op.responses
        .responses
        .entry("400".into())
        .or_insert_with(|| {
            let body = ContentBuilder::new()
                .schema(Some(Ref::from_schema_name("ErrorBody")))
                .build();
            ResponseBuilder::new()
                .description(
                    "A parameter or field is invalid: the error names it (`invalid_field`, \
                 `invalid_request`, `invalid_json`)",
                )
                .content("application/json", body)
                .build()
                .into()
        });
}

/// A view that flattens a request type (an event type's entry flattens its `EntrySpec`)
/// inherits that type's `additionalProperties: false`, which no answer carrying the view's own
/// fields could pass. Where such a closed schema is a member of an `allOf`, the member is an
/// open copy; the request type itself stays closed, as the server refuses unknown fields.
struct OpenFlattened;

impl Modify for OpenFlattened {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let Some(components) = doc.components.as_mut() else {
            return;
        };
        let opened: BTreeMap<String, Object> = components
            .schemas
            .iter()
            .filter_map(|(name, schema)| match schema {
                RefOr::T(Schema::Object(o))
                    if matches!(
                        o.additional_properties.as_deref(),
                        Some(AdditionalProperties::FreeForm(false))
                    ) =>
                {
                    let mut open = o.clone();
                    open.additional_properties = None;
                    Some((format!("#/components/schemas/{name}"), open))
                }
                _ => None,
            })
            .collect();
        for schema in components.schemas.values_mut() {
            open_members(schema, &opened);
        }
    }
}

/// Replaces, in `schema` and the schemas it holds (a page's rows are inlined), every `allOf`
/// member that refers to a closed schema by its open copy in `opened`.
fn open_members(schema: &mut RefOr<Schema>, opened: &BTreeMap<String, Object>) {
    let RefOr::T(schema) = schema else { return };
    match schema {
        Schema::AllOf(all_of) => {
            for member in &mut all_of.items {
                let open = match member {
                    RefOr::Ref(r) => opened.get(&r.ref_location),
                    RefOr::T(_) => None,
                };
                match open {
                    Some(open) => *member = RefOr::T(Schema::Object(open.clone())),
                    None => open_members(member, opened),
                }
            }
        }
        Schema::OneOf(one_of) => one_of
            .items
            .iter_mut()
            .for_each(|s| open_members(s, opened)),
        Schema::AnyOf(any_of) => any_of
            .items
            .iter_mut()
            .for_each(|s| open_members(s, opened)),
        Schema::Object(object) => object
            .properties
            .values_mut()
            .for_each(|s| open_members(s, opened)),
        Schema::Array(array) => {
            if let ArrayItems::RefOrSchema(items) = &mut array.items {
                open_members(items, opened);
            }
        }
        _ => {}
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
