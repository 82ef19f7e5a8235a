//! `GET /v1/openapi.json`: a valid OpenAPI 3 document listing every route.

use reqwest::StatusCode;

use super::support::{on_both_backends, TestApp};

on_both_backends!(the_openapi_document_lists_every_route);

/// The validator: `KURIR_OPENAPI_VALIDATOR` (what `.ci/run` installs), else
/// `openapi-spec-validator` on the PATH. Without one the test is skipped with a notice, except
/// under CI, where it fails.
pub(super) fn validator() -> Option<String> {
    let candidate = std::env::var("KURIR_OPENAPI_VALIDATOR")
        .unwrap_or_else(|_| "openapi-spec-validator".to_owned());
    let runs = std::process::Command::new(&candidate)
        .arg("--help")
        .output()
        .is_ok_and(|o| o.status.success());
    match runs {
        true => Some(candidate),
        false if std::env::var_os("CI").is_some() => {
            panic!(
                "CI is set but {candidate} does not run: .ci/run installs openapi-spec-validator"
            )
        }
        false => {
            eprintln!("notice: {candidate} is not installed; skipping the OpenAPI validation");
            None
        }
    }
}

/// The document is served without a token, passes `openapi-spec-validator`, and every operation
/// has its own operationId (client generators name methods after them).
#[tokio::test]
async fn the_openapi_document_is_public_valid_and_has_unique_operation_ids() {
    let Some(validator) = validator() else {
        return;
    };
    let Some(database) = super::support::TestDb::unmigrated(super::support::Backend::Sqlite).await
    else {
        return;
    };
    let app = TestApp::spawn(&database).await;
    let response = reqwest::get(format!("{}/v1/openapi.json", app.url))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK, "served without a token");
    let text = response.text().await.unwrap();
    app.stopper().stop().await;
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut ids: Vec<&str> = doc["paths"]
        .as_object()
        .unwrap()
        .values()
        .flat_map(|p| p.as_object().unwrap().values())
        .map(|op| {
            op["operationId"]
                .as_str()
                .expect("every operation has an operationId")
        })
        .collect();
    let count = ids.len();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), count, "operationIds are unique: {ids:?}");
    let file = database.dir.path().join("openapi.json");
    std::fs::write(&file, &text).unwrap();
    let out = std::process::Command::new(&validator)
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "openapi-spec-validator refuses the document:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

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
        ("post", "/v1/endpoints/{id}/circuit"),
        ("get", "/v1/endpoints/{id}/circuit/actions"),
        ("post", "/v1/endpoints/{id}/test"),
        ("post", "/v1/events"),
        ("post", "/v1/events/batch"),
        ("get", "/v1/events"),
        ("get", "/v1/events/{event_id}"),
        ("post", "/v1/events/recheck"),
        ("get", "/v1/event-types"),
        ("get", "/v1/event-types/{event_type}/versions/{version}"),
        ("put", "/v1/event-types/{event_type}/versions/{version}"),
        ("delete", "/v1/event-types/{event_type}/versions/{version}"),
        ("get", "/v1/event-types/openapi.json"),
        ("post", "/v1/events/{event_id}/replay"),
        ("get", "/v1/events/{event_id}/replay/preview"),
        ("get", "/v1/deliveries"),
        ("post", "/v1/replays"),
        ("get", "/v1/replays"),
        ("get", "/v1/replays/preview"),
        ("get", "/v1/stats"),
        ("post", "/v1/inbox/sources"),
        ("get", "/v1/inbox/sources"),
        ("get", "/v1/inbox/sources/{name}"),
        ("patch", "/v1/inbox/sources/{name}"),
        ("delete", "/v1/inbox/sources/{name}"),
        ("get", "/v1/inbox/sources/{name}/events"),
        ("get", "/v1/inbox/sources/{name}/events/{event_id}"),
        ("post", "/v1/inbox/sources/{name}/events/{event_id}/retry"),
        ("post", "/v1/tokens"),
        ("get", "/v1/tokens"),
        ("delete", "/v1/tokens/{id}"),
        ("get", "/v1/whoami"),
        ("get", "/v1/subscribers"),
        ("post", "/v1/subscribers"),
        ("get", "/v1/subscribers/{id}"),
        ("put", "/v1/subscribers/{id}"),
        ("patch", "/v1/subscribers/{id}"),
        ("delete", "/v1/subscribers/{id}"),
        ("get", "/v1/subscribers/{id}/actions"),
        ("post", "/v1/subscribers/{id}/tokens"),
        ("get", "/v1/subscribers/{id}/tokens"),
        ("delete", "/v1/subscribers/{id}/tokens/{token_id}"),
        ("post", "/v1/subscribers/{id}/portal-links"),
        ("delete", "/v1/subscribers/{id}/portal-sessions"),
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
    // Issue 33: a partner retries a 503 of the inbox, so the document says when it comes.
    assert!(
        paths["/inbox/{source}"]["post"]["responses"]["503"].is_object(),
        "POST /inbox/{{source}} documents its 503"
    );
    // Issues 27 and 33: the endpoint list is paged like the replay audit: the same query
    // parameters, and a page of endpoint views.
    let params = |path: &str| -> Vec<String> {
        let mut names: Vec<String> = paths[path]["get"]["parameters"]
            .as_array()
            .unwrap_or_else(|| panic!("GET {path} has parameters"))
            .iter()
            .map(|p| format!("{} in {}", p["name"], p["in"]))
            .collect();
        names.sort();
        names
    };
    assert_eq!(params("/v1/endpoints"), params("/v1/replays"));
    let listed =
        &paths["/v1/endpoints"]["get"]["responses"]["200"]["content"]["application/json"]["schema"];
    let page = match listed["$ref"].as_str() {
        Some(r) => &doc["components"]["schemas"][r.trim_start_matches("#/components/schemas/")],
        None => listed,
    };
    assert_eq!(page["properties"]["data"]["type"], "array", "{listed}");
    // utoipa inlines a generic page's rows: an endpoint view, with its circuit.
    let required = &page["properties"]["data"]["items"]["required"];
    assert!(
        ["id", "url", "circuit"].map(|f| required.as_array().unwrap().contains(&f.into()))
            == [true; 3],
        "{page}"
    );
    assert!(page["properties"]["next_cursor"].is_object(), "{page}");
    // A replay re-sends sent deliveries only when asked, and its dry run names what would go.
    let schemas = &doc["components"]["schemas"];
    // Issue 33: a delivery held by its endpoint's circuit says so.
    for field in ["held", "circuit_state", "next_probe_at"] {
        assert!(
            schemas["DeliveryView"]["properties"][field].is_object(),
            "{field}: {}",
            schemas["DeliveryView"]
        );
    }
    assert_eq!(
        schemas["ReplayEvent"]["properties"]["include_sent"]["type"],
        "boolean"
    );
    let candidate = &schemas["ReplayCandidateView"]["properties"];
    for field in ["delivery_id", "endpoint_id", "endpoint_url", "status"] {
        assert!(candidate[field].is_object(), "{field}: {candidate}");
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
        "CreateToken",
        "TokenView",
        "WhoAmI",
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
