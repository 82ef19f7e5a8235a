//! The admin API answers what its OpenAPI document allows (issue 32, schemathesis): bounds the
//! server holds are in the document, a whole number written as `174.0` is a whole number, and a
//! body the document requires is required.

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use super::support::{on_both_backends, TestApp};

on_both_backends!(
    every_listing_documents_the_bounds_of_limit_the_server_holds,
    a_whole_number_written_as_a_float_is_taken,
    a_body_the_document_requires_is_required
);

/// The parameters of `GET path`.
fn params<'a>(doc: &'a Value, path: &str) -> &'a [Value] {
    doc["paths"][path]["get"]["parameters"]
        .as_array()
        .map_or(&[], Vec::as_slice)
}

/// `limit=0` was allowed by the document (a bare unsigned integer) and refused by the server.
async fn every_listing_documents_the_bounds_of_limit_the_server_holds(app: TestApp) {
    let (_, doc) = app.get("/v1/openapi.json").await;
    let mut listings = 0;
    for path in doc["paths"].as_object().unwrap().keys() {
        let Some(limit) = params(&doc, path).iter().find(|p| p["name"] == "limit") else {
            continue;
        };
        listings += 1;
        let schema = &limit["schema"];
        let (min, max) = (&schema["minimum"], &schema["maximum"]);
        assert_eq!((min, max), (&json!(1), &json!(200)), "{path}: {limit}");
        if path.contains('{') {
            continue;
        }
        for (value, ok) in [(0, false), (1, true), (200, true), (201, false)] {
            let (status, body) = app.get(&format!("{path}?limit={value}")).await;
            assert_eq!(status.is_success(), ok, "{path}?limit={value}: {body}");
        }
    }
    assert!(listings >= 6, "the listings were found: {listings}");
}

/// JSON Schema's `integer` admits `174.0`; the server refused it for every integer field.
async fn a_whole_number_written_as_a_float_is_taken(app: TestApp) {
    let (status, endpoint) = app
        .post(
            "/v1/endpoints",
            json!({"url": "https://example.com/hook", "max_in_flight": 4.0,
                   "retry_max_attempts": 3.0}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{endpoint}");
    assert_eq!(
        (&endpoint["max_in_flight"], &endpoint["retry_max_attempts"]),
        (&json!(4), &json!(3))
    );
    let id = endpoint["id"].as_str().unwrap();
    let (status, rotated) = app
        .post(
            &format!("/v1/endpoints/{id}/rotate-secret"),
            json!({"grace_period_seconds": 174.0}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{rotated}");
    let (status, body) = app
        .patch(
            &format!("/v1/endpoints/{id}"),
            json!({"max_in_flight": 2.5}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["error"]["field"], "max_in_flight", "{body}");
}

/// PATCH endpoint and PATCH source answered 200 to a request without the body the document
/// requires; rotate-secret's body is optional, and now documented so.
async fn a_body_the_document_requires_is_required(app: TestApp) {
    let (_, endpoint) = app
        .post("/v1/endpoints", json!({"url": "https://example.com/hook"}))
        .await;
    let id = endpoint["id"].as_str().unwrap();
    let (_, source) = app
        .post(
            "/v1/inbox/sources",
            json!({"name": "partner", "scheme": "kurir", "secrets": ["whsec_abcdefgh12345678"],
                   "forward_url": "https://example.com/in"}),
        )
        .await;
    assert!(source["name"].is_string(), "{source}");
    let (_, doc) = app.get("/v1/openapi.json").await;
    for (method, path, documented) in [
        (
            Method::PATCH,
            format!("/v1/endpoints/{id}"),
            "/v1/endpoints/{id}",
        ),
        (
            Method::PATCH,
            "/v1/inbox/sources/partner".to_owned(),
            "/v1/inbox/sources/{name}",
        ),
    ] {
        let op = &doc["paths"][documented][method.as_str().to_lowercase()];
        assert_eq!(op["requestBody"]["required"], true, "{documented}");
        let (status, body) = app.send(app.request(method.clone(), &path)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{method} {path}: {body}");
        assert_eq!(body["error"]["code"], "invalid_request", "{body}");
    }
    let rotate = &doc["paths"]["/v1/endpoints/{id}/rotate-secret"]["post"]["requestBody"];
    assert_ne!(rotate["required"], true, "{rotate}");
    let path = format!("/v1/endpoints/{id}/rotate-secret");
    let (status, body) = app.send(app.request(Method::POST, &path)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}
