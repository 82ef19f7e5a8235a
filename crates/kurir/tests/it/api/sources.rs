//! `/v1/inbox/sources`: create, read, list, change, delete, and bad input that names the field
//! at fault and stores nothing.

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use super::support::{on_both_backends, TestApp};

on_both_backends!(
    inbox_sources_are_created_read_listed_changed_and_deleted,
    bad_source_inputs_name_the_field_and_store_nothing
);

fn stripe_source() -> Value {
    json!({"name": "stripe", "scheme": "stripe", "secrets": ["whsec_stripe-signing-secret"],
           "forward_url": "https://app.example/hooks/stripe"})
}

async fn inbox_sources_are_created_read_listed_changed_and_deleted(app: TestApp) {
    let (status, created) = app.post("/v1/inbox/sources", stripe_source()).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(created["scheme"], "stripe");
    assert_eq!(created["secret_count"], 1);
    assert_eq!(created["tolerance_seconds"], 300);
    assert_eq!(created["inbox_path"], "/inbox/stripe");
    assert!(created["forward_secret"]
        .as_str()
        .unwrap()
        .starts_with("whsec_"));
    assert!(created["read_token"]
        .as_str()
        .unwrap()
        .starts_with("kurir_read_"));
    assert!(
        !created.to_string().contains("stripe-signing-secret"),
        "the verification secrets are never answered: {created}"
    );

    let (status, shown) = app.get("/v1/inbox/sources/stripe").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(shown["forward_url"], "https://app.example/hooks/stripe");
    for hidden in ["forward_secret", "read_token"] {
        assert!(
            shown.get(hidden).is_none(),
            "reads never show {hidden}: {shown}"
        );
    }

    let (status, again) = app.post("/v1/inbox/sources", stripe_source()).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(again["error"]["code"], "source_exists");

    let github = json!({"name": "github", "scheme": "github", "secrets": ["gh-secret-123"],
                        "tolerance_seconds": 60, "forward_url": "http://app.example/gh"});
    assert_eq!(
        app.post("/v1/inbox/sources", github).await.0,
        StatusCode::CREATED
    );
    let (_, list) = app.get("/v1/inbox/sources").await;
    let names: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["stripe", "github"], "oldest first");

    let (status, changed) = app
        .patch(
            "/v1/inbox/sources/stripe",
            json!({"secrets": ["whsec_new-stripe-secret", "whsec_stripe-signing-secret"],
                   "tolerance_seconds": 120, "forward_url": "https://app.example/v2/stripe"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{changed}");
    assert_eq!(changed["secret_count"], 2);
    assert_eq!(changed["tolerance_seconds"], 120);
    assert_eq!(changed["forward_url"], "https://app.example/v2/stripe");
    assert_eq!(changed["scheme"], "stripe", "absent fields stay");

    let (status, body) = app.delete("/v1/inbox/sources/stripe").await;
    assert_eq!((status, body), (StatusCode::NO_CONTENT, Value::Null));
    let (status, body) = app.get("/v1/inbox/sources/stripe").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["error"]["code"], "not_found");
    assert_eq!(
        app.delete("/v1/inbox/sources/stripe").await.0,
        StatusCode::NOT_FOUND
    );
    let url = format!("{}/v1/inbox/sources", app.url);
    let (status, _) = app
        .send(reqwest::Client::new().get(url).bearer_auth("wrong"))
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

/// `stripe_source()` with `field` set to `value` (or removed, for `Value::Null`).
fn with(field: &str, value: Value) -> String {
    let mut body = stripe_source();
    match value {
        Value::Null => body.as_object_mut().unwrap().remove(field),
        value => body.as_object_mut().unwrap().insert(field.into(), value),
    };
    body.to_string()
}

async fn bad_source_inputs_name_the_field_and_store_nothing(app: TestApp) {
    let standard_with_bad_key = json!({"name": "std", "scheme": "standard-webhooks",
        "secrets": ["whsec_!!not-base64!!"], "forward_url": "https://app.example/std"});
    let cases = [
        (with("scheme", json!("paypal")), "scheme"),
        (with("scheme", Value::Null), "scheme"),
        (
            with("forward_url", json!("ftp://app.example/x")),
            "forward_url",
        ),
        (with("forward_url", json!("/relative")), "forward_url"),
        (with("forward_url", Value::Null), "forward_url"),
        (with("secrets", json!(["short"])), "secrets"),
        (with("secrets", json!([])), "secrets"),
        (with("secrets", json!("not-a-list")), "secrets"),
        (standard_with_bad_key.to_string(), "secrets"),
        (with("name", json!("has space")), "name"),
        (with("name", json!("")), "name"),
        (with("tolerance_seconds", json!(0)), "tolerance_seconds"),
        (
            with("tolerance_seconds", json!(86_401)),
            "tolerance_seconds",
        ),
        (with("colour", json!("blue")), "colour"),
    ];
    for (body, field) in cases {
        let (status, answer) = app
            .send(
                app.request(Method::POST, "/v1/inbox/sources")
                    .body(body.clone()),
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {answer}");
        assert_eq!(answer["error"]["code"], "invalid_field", "{body}: {answer}");
        assert_eq!(answer["error"]["field"], field, "{body}: {answer}");
        assert!(
            !answer.to_string().contains("not-base64"),
            "a secret is never echoed: {answer}"
        );
    }
    let (_, list) = app.get("/v1/inbox/sources").await;
    assert_eq!(list, json!([]), "nothing was stored");

    assert_eq!(
        app.post("/v1/inbox/sources", stripe_source()).await.0,
        StatusCode::CREATED
    );
    let (_, before) = app.get("/v1/inbox/sources/stripe").await;
    for (patch, field) in [
        (json!({"scheme": "paypal"}), "scheme"),
        // Stripe's secret is not a Standard Webhooks key: the scheme alone cannot change.
        (json!({"scheme": "standard-webhooks"}), "secrets"),
        (json!({"secrets": []}), "secrets"),
        (
            json!({"forward_url": "mailto:ops@app.example"}),
            "forward_url",
        ),
        (json!({"tolerance_seconds": 0}), "tolerance_seconds"),
        (json!({"name": "renamed"}), "name"),
    ] {
        let (status, answer) = app.patch("/v1/inbox/sources/stripe", patch.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{patch}: {answer}");
        assert_eq!(answer["error"]["field"], field, "{patch}: {answer}");
    }
    let (_, after) = app.get("/v1/inbox/sources/stripe").await;
    assert_eq!(before, after, "a refused change changes nothing");
    let (status, _) = app
        .patch("/v1/inbox/sources/nope", json!({"tolerance_seconds": 10}))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}
