//! `GET /v1/openapi.json`: a valid OpenAPI 3 document listing every route.

use reqwest::StatusCode;

use super::support::{on_both_backends, TestApp};

on_both_backends!(the_openapi_document_lists_every_route);

async fn the_openapi_document_lists_every_route(app: TestApp) {
    let (status, doc) = app.get("/v1/openapi.json").await;
    assert_eq!(status, StatusCode::OK);
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    let expected = [
        ("post", "/v1/endpoints"),
        ("get", "/v1/endpoints"),
        ("get", "/v1/endpoints/{id}"),
        ("patch", "/v1/endpoints/{id}"),
        ("delete", "/v1/endpoints/{id}"),
        ("post", "/v1/endpoints/{id}/rotate-secret"),
        ("post", "/v1/events"),
        ("get", "/v1/events"),
        ("get", "/v1/events/{event_id}"),
        ("post", "/v1/events/{event_id}/replay"),
        ("get", "/v1/deliveries"),
        ("post", "/v1/replays"),
        ("get", "/v1/replays"),
        ("get", "/v1/stats"),
        ("post", "/v1/inbox/sources"),
        ("get", "/v1/inbox/sources"),
        ("get", "/v1/inbox/sources/{name}"),
        ("patch", "/v1/inbox/sources/{name}"),
        ("delete", "/v1/inbox/sources/{name}"),
        ("post", "/inbox/{source}"),
        ("get", "/inbox/{source}/events/{event_id}"),
        ("get", "/v1/openapi.json"),
        ("get", "/healthz"),
        ("get", "/readyz"),
    ];
    let paths = doc["paths"].as_object().unwrap();
    for (method, path) in expected {
        let op = &paths.get(path).unwrap_or_else(|| panic!("{path} missing"))[method];
        assert!(op.is_object(), "{method} {path} missing");
        assert!(op["responses"].is_object(), "{method} {path} has responses");
    }
    let documented: usize = paths.values().map(|p| p.as_object().unwrap().len()).sum();
    assert_eq!(
        documented,
        expected.len(),
        "no undocumented extras: {:?}",
        paths.keys()
    );
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
    for schema in [
        "EndpointView",
        "PublishEvent",
        "EventDetail",
        "ErrorBody",
        "StatsView",
        "SourceView",
        "CreateSource",
        "UpdateSource",
    ] {
        assert!(
            doc["components"]["schemas"][schema].is_object(),
            "schema {schema}"
        );
    }
    // Every $ref points at a schema that exists.
    let text = doc.to_string();
    for r in text.split("\"$ref\":\"#/components/schemas/").skip(1) {
        let name = &r[..r.find('"').unwrap()];
        assert!(
            doc["components"]["schemas"][name].is_object(),
            "dangling $ref {name}"
        );
    }
}
