//! Issues 32 and 33: the OpenAPI document and the server agree, so that schemathesis (run by
//! `.ci/schemathesis`) finds only what a JSON Schema cannot state. Each check here is one
//! disagreement it found: a value the document allowed and the server refused, a body the
//! server took that the document refused, an answer the document's own schema refused.

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use super::support::{on_both_backends, TestApp};

on_both_backends!(an_array_is_not_taken_for_a_body_of_fields);

/// serde reads a struct from an array, its fields in order: `[null, null]` rotated an
/// endpoint's secret as an empty body would.
async fn an_array_is_not_taken_for_a_body_of_fields(app: TestApp) {
    let endpoint = app
        .create_endpoint("https://example.com/hook", json!({}))
        .await;
    let id = endpoint["id"].as_str().unwrap();
    for (method, path, body) in [
        (
            Method::POST,
            format!("/v1/endpoints/{id}/rotate-secret"),
            "[null, null]",
        ),
        (Method::PATCH, format!("/v1/endpoints/{id}"), "[]"),
        (
            Method::POST,
            "/v1/events".to_owned(),
            r#"["order.paid", {}]"#,
        ),
    ] {
        let request = app
            .request(method.clone(), &path)
            .header("content-type", "application/json")
            .body(body);
        let (status, answer) = app.send(request).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{method} {path}: {answer}");
        assert!(
            answer["error"]["message"]
                .as_str()
                .unwrap()
                .contains("JSON object"),
            "{answer}"
        );
    }
}

/// The document, served by a real server.
async fn document() -> Value {
    let db = crate::support::TestDb::sqlite().await;
    let app = TestApp::spawn(&db).await;
    let (status, doc) = app.get("/v1/openapi.json").await;
    assert_eq!(status, StatusCode::OK);
    app.stopper().stop().await;
    doc
}

fn operations(doc: &Value) -> Vec<(String, &Value)> {
    doc["paths"]
        .as_object()
        .unwrap()
        .iter()
        .flat_map(|(path, item)| {
            item.as_object()
                .unwrap()
                .iter()
                .map(move |(method, op)| (format!("{method} {path}"), op))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_document_states_what_the_server_checks() {
    let doc = document().await;
    let schemas = &doc["components"]["schemas"];
    let mut wrong = Vec::new();
    for (name, op) in operations(&doc) {
        let params = op["parameters"].as_array().cloned().unwrap_or_default();
        // The extractors answer 400 to a bad parameter or body, on every operation.
        if name.contains(" /v1/")
            && (!params.is_empty() || op["requestBody"].is_object())
            && !op["responses"]["400"].is_object()
        {
            wrong.push(format!("{name}: no 400"));
        }
        for p in &params {
            // An empty cursor is refused (it is no page's next_cursor).
            if p["name"] == "cursor" && p["schema"]["minLength"] != 1 {
                wrong.push(format!("{name}: cursor may be empty"));
            }
            if p["name"] == "status"
                && name.contains("replay")
                && !p["schema"]["pattern"].is_string()
            {
                wrong.push(format!("{name}: status is any string"));
            }
            if p["name"] == "Idempotency-Key" && !p["schema"]["pattern"].is_string() {
                wrong.push(format!("{name}: Idempotency-Key may be empty"));
            }
        }
    }
    // A flattened closed schema inside an allOf refuses the view's own fields: the event
    // type entry's answer failed its own schema.
    let text = doc.to_string();
    for member in text.split("\"allOf\":[").skip(1) {
        let Some(name) = member
            .strip_prefix("{\"$ref\":\"#/components/schemas/")
            .and_then(|r| r.split('"').next())
        else {
            continue;
        };
        if schemas[name]["additionalProperties"] == false {
            wrong.push(format!("allOf member {name} is closed"));
        }
    }
    // A batch answers per event for bad values, so its items state only the shape.
    let items = &schemas["PublishBatch"]["properties"]["events"]["items"];
    let item = match items["$ref"].as_str() {
        Some(r) => &schemas[r.trim_start_matches("#/components/schemas/")],
        None => items,
    };
    if item["properties"]["version"]["minimum"].is_number()
        || item["properties"]["event_type"]["pattern"].is_string()
    {
        wrong.push(format!("batch items carry value constraints: {item}"));
    }
    let checks = [
        ("CreateEndpoint", "secret", "minLength"),
        ("CreateSubscriber", "name", "pattern"),
        ("CreateSubscriber", "id", "pattern"),
        ("BulkReplay", "status", "pattern"),
        ("BulkReplay", "event_type", "pattern"),
        ("CreateSource", "secrets", "minItems"),
        ("CreateSource", "forward_url", "pattern"),
    ];
    for (schema, field, keyword) in checks {
        let property = &schemas[schema]["properties"][field];
        let stated = property[keyword].is_number()
            || property[keyword].is_string()
            || property["oneOf"]
                .as_array()
                .is_some_and(|a| a.iter().any(|s| !s[keyword].is_null()));
        if !stated {
            wrong.push(format!("{schema}.{field} has no {keyword}: {property}"));
        }
    }
    // A URL the server refuses (not ASCII, spaces) is outside the pattern.
    let url_pattern = schemas["CreateEndpoint"]["properties"]["url"]["pattern"]
        .as_str()
        .unwrap_or_default();
    let pattern = pattern_match(url_pattern);
    for (url, allowed) in [
        ("https://example.com/hooks?a=1", true),
        ("http://127.0.0.1:9000/x", true),
        ("hTTp://ā'µ/", false),
        ("https://example.com/a b", false),
    ] {
        if pattern(url) != allowed {
            wrong.push(format!("url pattern {url_pattern} on {url}: {}", !allowed));
        }
    }
    // The main bodies carry examples.
    for schema in [
        "PublishEvent",
        "Accepted",
        "EventView",
        "CreateEndpoint",
        "ErrorBody",
        "BulkReplay",
    ] {
        if schemas[schema]["example"].is_null() {
            wrong.push(format!("{schema} has no example"));
        }
    }
    assert!(
        wrong.is_empty(),
        "the document disagrees with the server:\n{}",
        wrong.join("\n")
    );
}

/// Matches `text` against the document's `pattern` as JSON Schema does.
fn pattern_match(pattern: &str) -> impl Fn(&str) -> bool {
    let schema = json!({"type": "string", "pattern": pattern});
    let validator = jsonschema::validator_for(&schema).unwrap_or_else(|e| panic!("{pattern}: {e}"));
    move |text| validator.is_valid(&json!(text))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_type_entry_answer_passes_its_own_schema() {
    let db = crate::support::TestDb::sqlite().await;
    let app = TestApp::spawn(&db).await;
    let (status, entry) = app
        .send(
            app.request(Method::PUT, "/v1/event-types/order.paid/versions/1")
                .header("content-type", "application/json")
                .body(json!({"examples": [{"order_id": "1"}]}).to_string()),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{entry}");
    let (_, doc) = app.get("/v1/openapi.json").await;
    app.stopper().stop().await;
    let schemas = &doc["components"]["schemas"];
    // Every property the answer has is one the schema's members allow.
    let members = schemas["EventTypeEntry"]["allOf"].as_array().unwrap();
    for member in members {
        let member = match member["$ref"].as_str() {
            Some(r) => &schemas[r.trim_start_matches("#/components/schemas/")],
            None => member,
        };
        if member["additionalProperties"] == false {
            for field in entry.as_object().unwrap().keys() {
                assert!(
                    member["properties"][field].is_object(),
                    "the answer's {field} is refused by a closed member: {member}"
                );
            }
        }
    }
}
