//! The event catalog (issue 30), through a real server on every database: entries written and
//! refused with the field named, events checked against their schema through the API (`422`,
//! nothing stored) and through plain SQL (recorded as refused by the relay, counted, never
//! delivered), a recheck after the schema is fixed delivering with the original event id,
//! strict mode, deprecated versions counted, and the OpenAPI export checked by the external
//! validator with its examples passing their own schemas.

use std::future::Future;

use kurir::store::Store;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use super::support::{eventually, on_both_backends, Backend, Receiver, TestApp, TestDb};

on_both_backends!(
    schema_failures_through_the_api_get_422_naming_each_value_and_store_nothing,
    a_sql_row_failing_its_schema_is_refused_then_a_recheck_after_the_fix_delivers_it,
    bad_catalog_input_is_refused_naming_what_is_wrong_and_changes_nothing,
    deprecated_versions_are_delivered_and_counted,
);
on_both_backends!(with super::strict;
    strict_mode_refuses_unknown_versions_and_filters_that_match_nothing,
);

/// The schema of `order.paid` v1 in these tests: about an order's payment.
fn order_paid_schema() -> Value {
    json!({
        "type": "object",
        "required": ["order_id", "total", "currency"],
        "properties": {
            "order_id": {"type": "string"},
            "total": {"type": "integer", "minimum": 0},
            "currency": {"type": "string", "enum": ["IDR", "USD"]}
        }
    })
}

fn entry(schema: Value) -> Value {
    json!({
        "description": "An order was paid in full.",
        "schema": schema,
        "examples": [{"order_id": "98765", "total": 250000, "currency": "IDR"}],
    })
}

async fn put(app: &TestApp, event_type: &str, version: i32, body: Value) -> (StatusCode, Value) {
    let path = format!("/v1/event-types/{event_type}/versions/{version}");
    app.send(app.request(Method::PUT, &path).body(body.to_string()))
        .await
}

/// Inserts an event with plain SQL, as an application would; its event id.
async fn insert_sql(store: &Store, event_id: &str, event_type: &str, payload: &str) {
    let done = match store {
        Store::Postgres(s) => sqlx::query(
            "INSERT INTO kurir_outbox (event_id, event_type, aggregate_type, aggregate_id, payload) \
             VALUES ($1, $2, 'order', '98765', $3::json)",
        )
        .bind(event_id)
        .bind(event_type)
        .bind(payload)
        .execute(s.pool())
        .await
        .map(drop),
        Store::Sqlite(s) => sqlx::query(
            "INSERT INTO kurir_outbox (event_id, event_type, aggregate_type, aggregate_id, payload) \
             VALUES (?1, ?2, 'order', '98765', ?3)",
        )
        .bind(event_id)
        .bind(event_type)
        .bind(payload)
        .execute(s.pool())
        .await
        .map(drop),
        Store::Mysql(s) => sqlx::query(
            "INSERT INTO kurir_outbox (event_id, event_type, aggregate_type, aggregate_id, payload) \
             VALUES (?, ?, 'order', '98765', ?)",
        )
        .bind(event_id)
        .bind(event_type)
        .bind(payload)
        .execute(s.pool())
        .await
        .map(drop),
    };
    done.expect("the SQL contract takes the row");
}

async fn schema_failures_through_the_api_get_422_naming_each_value_and_store_nothing(app: TestApp) {
    let (status, body) = put(&app, "order.paid", 1, entry(order_paid_schema())).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let before = app.snapshot().await;
    let bad = json!({"event_type": "order.paid", "data": {"order_id": "1", "total": "250000"}});
    let (status, body) = app.post("/v1/events", bad.clone()).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["error"]["code"], "schema_mismatch", "{body}");
    let failures = body["error"]["failures"].as_array().unwrap();
    let total = failures
        .iter()
        .find(|f| f["pointer"] == "/total")
        .expect("/total named");
    assert_eq!(total["rule"], "type", "{body}");
    assert!(
        total["message"].as_str().unwrap().contains("\"250000\""),
        "{body}"
    );
    let missing = failures
        .iter()
        .find(|f| f["rule"] == "required")
        .expect("currency named");
    assert_eq!(missing["pointer"], "", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(r#"/total: "250000" is not of type "integer""#),
        "{message}"
    );

    // In a batch, the failing event gets its own 422; the others are recorded.
    let good = json!({"event_type": "order.paid", "data": {"order_id": "2", "total": 5, "currency": "IDR"}});
    let (status, body) = app
        .post("/v1/events/batch", json!({"events": [bad, good]}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["results"][0]["status"], 422, "{body}");
    let failures = body["results"][0]["error"]["failures"].as_array().unwrap();
    assert!(failures.iter().any(|f| f["pointer"] == "/total"), "{body}");
    assert_eq!(body["results"][1]["status"], 202, "{body}");
    let (_, listed) = app.get("/v1/events?event_type=order.paid").await;
    assert_eq!(
        listed["data"].as_array().unwrap().len(),
        1,
        "only the good event: {listed}"
    );
    assert_ne!(app.snapshot().await, before);

    // Another version, or another type, has no schema: it passes (open mode).
    app.publish("order.paid.v2", json!({"anything": true}))
        .await;
    let (status, body) = app
        .post(
            "/v1/events",
            json!({"event_type": "order.paid", "version": 2, "data": {"x": 1}}),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
}

async fn a_sql_row_failing_its_schema_is_refused_then_a_recheck_after_the_fix_delivers_it(
    app: TestApp,
) {
    let receiver = Receiver::start().await;
    app.create_endpoint(&receiver.url, json!({})).await;
    let (status, body) = put(&app, "order.paid", 1, entry(order_paid_schema())).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    insert_sql(
        &app.store,
        "bad-total",
        "order.paid",
        r#"{"order_id":"1","total":"250000","currency":"IDR"}"#,
    )
    .await;
    insert_sql(
        &app.store,
        "good-total",
        "order.paid",
        r#"{"order_id":"2","total":250000,"currency":"IDR"}"#,
    )
    .await;
    insert_sql(
        &app.store,
        "bad-digits",
        "order.paid",
        r#"{"order_id":"3","total":"12a","currency":"IDR"}"#,
    )
    .await;
    let good = app.wait_for_deliveries("good-total", "sent").await;
    assert_eq!(good["deliveries"].as_array().unwrap().len(), 1);
    let refused = eventually("the bad rows to be refused", || async {
        let (_, other) = app.get("/v1/events/bad-digits").await;
        let (_, event) = app.get("/v1/events/bad-total").await;
        (event["refused_reason"].is_string() && other["refused_reason"].is_string())
            .then_some(event)
    })
    .await;
    assert_eq!(
        refused["refused_reason"], r#"schema: /total: "250000" is not of type "integer""#,
        "{refused}"
    );
    assert_eq!(refused["deliveries"], json!([]), "{refused}");
    let metrics = reqwest::get(format!("{}/metrics", app.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics
            .lines()
            .any(|l| l == r#"kurir_outbox_refused{event_type="order.paid"} 2"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"kurir_catalog_refusals_total{event_type="order.paid",reason="schema",surface="relay"} 2"#),
        "{metrics}"
    );
    // A recheck before the fix changes nothing.
    let (status, done) = app.post("/v1/events/recheck", json!({})).await;
    assert_eq!(status, StatusCode::OK, "{done}");
    assert_eq!(
        done,
        json!({"checked": 2, "delivered": 0, "deliveries": 0, "still_refused": 2})
    );

    // The producer's contract said "a number or a numeric string" all along: fix the schema.
    let mut fixed = order_paid_schema();
    fixed["properties"]["total"] = json!({"type": ["integer", "string"], "pattern": "^[0-9]+$"});
    let (status, body) = put(&app, "order.paid", 1, entry(fixed)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, done) = app
        .post("/v1/events/recheck", json!({"event_type": "order.paid"}))
        .await;
    assert_eq!(status, StatusCode::OK, "{done}");
    assert_eq!(
        done,
        json!({"checked": 2, "delivered": 1, "deliveries": 1, "still_refused": 1})
    );
    // The one that still fails stays refused, with the reason the fixed schema gives.
    let (_, still) = app.get("/v1/events/bad-digits").await;
    assert_eq!(
        still["refused_reason"], r#"schema: /total: "12a" does not match "^[0-9]+$""#,
        "{still}"
    );
    let event = app.wait_for_deliveries("bad-total", "sent").await;
    assert!(event["refused_reason"].is_null(), "{event}");
    let delivered = receiver.wait_for(2).await;
    let webhook = delivered
        .iter()
        .find(|r| r.header("webhook-id") == "bad-total")
        .expect("delivered with its original event id");
    assert_eq!(webhook.json()["event_id"], "bad-total");
    assert_eq!(webhook.json()["data"]["total"], "250000");
    let (_, again) = app.post("/v1/events/recheck", json!({})).await;
    assert_eq!(again["checked"], 1, "only the one still refused: {again}");
}

async fn bad_catalog_input_is_refused_naming_what_is_wrong_and_changes_nothing(app: TestApp) {
    let (status, _) = put(&app, "order.paid", 1, entry(order_paid_schema())).await;
    assert_eq!(status, StatusCode::CREATED);
    let (_, before) = app.get("/v1/event-types/order.paid/versions/1").await;
    let failing_example = json!({
        "schema": order_paid_schema(),
        "examples": [{"order_id": "1", "total": 5, "currency": "IDR"}, {"order_id": "1", "total": -5, "currency": "IDR"}],
    });
    let cases = [
        (
            json!({"schema": {"type": "integr"}, "examples": [{}]}),
            "schema",
            "integr",
        ),
        (failing_example, "examples[1]", "/total"),
        (
            json!({"schema": order_paid_schema(), "examples": []}),
            "examples",
            "1 to 20",
        ),
        (json!({"examples": [[1]]}), "examples[0]", "object"),
        (
            json!({"examples": [{}], "deprecated": true, "successor": {"event_type": "order.paid", "version": 9}}),
            "successor",
            "not in the event catalog",
        ),
        (
            json!({"examples": [{}], "successor": {"event_type": "order.paid", "version": 2}}),
            "successor",
            "deprecated",
        ),
        (
            json!({"examples": [{}], "schema": {"$ref": "https://example.com/x.json"}}),
            "schema",
            "",
        ),
        (json!({"examples": [{}], "shema": {}}), "shema", ""),
    ];
    for (body, field, says) in cases {
        let (status, answer) = put(&app, "order.paid", 1, body.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {answer}");
        let named = answer["error"]["field"].as_str().unwrap_or_default();
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(
            named == field || message.contains(field),
            "{body}: {answer}"
        );
        assert!(message.contains(says), "{body}: {answer}");
    }
    let (status, answer) = put(&app, "Order Paid", 1, entry(json!({}))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert_eq!(answer["error"]["field"], "event_type", "{answer}");
    let (status, answer) = put(&app, "order.paid", 0, entry(json!({}))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert_eq!(answer["error"]["field"], "version", "{answer}");
    let (_, after) = app.get("/v1/event-types/order.paid/versions/1").await;
    assert_eq!(before, after, "nothing stored was changed");

    // The same content again changes nothing; a list is one page of entries.
    let (status, same) = put(&app, "order.paid", 1, entry(order_paid_schema())).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(same["updated_at"], before["updated_at"]);
    put(&app, "invoice.sent", 1, entry(json!({}))).await;
    let (_, page) = app.get("/v1/event-types?limit=1").await;
    assert_eq!(page["data"][0]["event_type"], "invoice.sent", "{page}");
    let cursor = page["next_cursor"].as_str().unwrap();
    let (_, next) = app
        .get(&format!("/v1/event-types?limit=1&cursor={cursor}"))
        .await;
    assert_eq!(next["data"][0]["event_type"], "order.paid", "{next}");
    assert!(next["next_cursor"].is_null(), "{next}");

    // Delete is refused while an event of the version is undelivered.
    let receiver = Receiver::start().await;
    receiver.respond_with(500);
    app.create_endpoint(&receiver.url, json!({})).await;
    app.publish("invoice.sent", json!({"n": 1})).await;
    let (status, answer) = app.delete("/v1/event-types/invoice.sent/versions/1").await;
    assert_eq!(status, StatusCode::CONFLICT, "{answer}");
    assert_eq!(answer["error"]["code"], "event_type_in_use", "{answer}");
    let (status, _) = app.delete("/v1/event-types/order.paid/versions/1").await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = app.get("/v1/event-types/order.paid/versions/1").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

async fn deprecated_versions_are_delivered_and_counted(app: TestApp) {
    let receiver = Receiver::start().await;
    app.create_endpoint(&receiver.url, json!({})).await;
    put(&app, "order.paid", 2, entry(order_paid_schema())).await;
    let old = json!({
        "description": "The first shape.",
        "examples": [{"order_id": "1"}],
        "deprecated": true,
        "successor": {"event_type": "order.paid", "version": 2},
    });
    let (status, body) = put(&app, "order.paid", 1, old).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    insert_sql(&app.store, "old-shape", "order.paid", r#"{"order_id":"1"}"#).await;
    app.wait_for_deliveries("old-shape", "sent").await;
    let metrics = reqwest::get(format!("{}/metrics", app.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains(r#"kurir_deprecated_events_total{event_type="order.paid",version="1"} 1"#),
        "{metrics}"
    );
    // The dashboard's count per version, read on every database.
    let since = chrono::Utc::now() - chrono::Duration::hours(1);
    let counts = app.store.events_per_version(since).await.unwrap();
    let v1 = kurir::catalog::EventTypeRef {
        event_type: "order.paid".into(),
        version: 1,
    };
    assert_eq!(counts.get(&v1), Some(&1), "{counts:?}");
    // The successor cannot go while the deprecated version names it.
    let (status, answer) = app.delete("/v1/event-types/order.paid/versions/2").await;
    assert_eq!(status, StatusCode::CONFLICT, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("order.paid v1"),
        "{answer}"
    );
}

/// Runs `test` on an app with `KURIR_EVENT_CATALOG=strict`.
async fn strict<F, Fut>(backend: Backend, test: F)
where
    F: FnOnce(TestApp) -> Fut,
    Fut: Future<Output = ()>,
{
    let Some(db) = TestDb::unmigrated(backend).await else {
        return;
    };
    let app = TestApp::spawn_with(&db, &[("event_catalog", "strict")]).await;
    let stop = app.stopper();
    test(app).await;
    stop.stop().await;
}

async fn strict_mode_refuses_unknown_versions_and_filters_that_match_nothing(app: TestApp) {
    let receiver = Receiver::start().await;
    put(&app, "order.paid", 1, entry(order_paid_schema())).await;
    let (status, body) = app
        .post(
            "/v1/endpoints",
            json!({"url": receiver.url, "event_types": ["order.*", "refund.*"]}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["error"]["field"], "event_types", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("refund.*"),
        "{body}"
    );
    app.create_endpoint(&receiver.url, json!({"event_types": ["order.*"]}))
        .await;

    let (status, body) = app
        .post(
            "/v1/events",
            json!({"event_type": "order.shipped", "data": {}}),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["error"]["code"], "unknown_event_type", "{body}");
    insert_sql(&app.store, "unknown-version", "order.shipped", "{}").await;
    let refused = eventually("the unknown type to be refused", || async {
        let (_, event) = app.get("/v1/events/unknown-version").await;
        event["refused_reason"].as_str().map(str::to_owned)
    })
    .await;
    assert!(
        refused.starts_with("catalog: order.shipped v1 is not in the event catalog"),
        "{refused}"
    );
    // Catalogued, it passes: the recheck delivers it.
    put(&app, "order.shipped", 1, entry(json!({}))).await;
    let (_, done) = app.post("/v1/events/recheck", json!({})).await;
    assert_eq!(done["delivered"], 1, "{done}");
    app.wait_for_deliveries("unknown-version", "sent").await;
    let (status, body) = app
        .post(
            "/v1/events",
            json!({"event_type": "order.shipped", "data": {"n": 1}}),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
}

/// The export passes `openapi-spec-validator`, has a webhook per (type, version) with the
/// headers kurir sends, and each example (a whole envelope) passes its own schema, resolved
/// within the document.
#[tokio::test]
async fn the_catalog_exports_as_a_valid_openapi_document_whose_examples_pass_their_schemas() {
    let Some(validator) = super::openapi::validator() else {
        return;
    };
    let Some(db) = TestDb::unmigrated(Backend::Sqlite).await else {
        return;
    };
    let app = TestApp::spawn(&db).await;
    let with_defs = json!({
        "$defs": {"money": {"type": "integer", "minimum": 0}},
        "type": "object",
        "required": ["total"],
        "properties": {"total": {"$ref": "#/$defs/money"}, "lines": {"type": "array", "items": {"$ref": "#/$defs/money"}}}
    });
    put(&app, "order.paid", 2, json!({"description": "Paid.", "schema": with_defs, "examples": [{"total": 5, "lines": [2, 3]}]})).await;
    put(&app, "order.paid", 1, json!({"examples": [{"anything": 1}], "deprecated": true, "successor": {"event_type": "order.paid", "version": 2}})).await;
    let (status, doc) = app.get("/v1/event-types/openapi.json").await;
    app.stopper().stop().await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(doc["openapi"], "3.1.0");
    let webhooks = doc["webhooks"].as_object().unwrap();
    assert_eq!(webhooks.len(), 2, "{doc}");
    let v1 = &webhooks["order.paid.v1"]["post"];
    assert_eq!(v1["deprecated"], true);
    let headers: Vec<String> = v1["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            p["$ref"]
                .as_str()
                .unwrap()
                .rsplit('/')
                .next()
                .unwrap()
                .to_owned()
        })
        .collect();
    for h in [
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
        "x-webhook-signature",
    ] {
        assert!(headers.iter().any(|x| x == h), "{h} in {headers:?}");
    }
    // Each example, resolved against the whole document as a code generator would.
    let registry = jsonschema::Registry::new()
        .add("urn:kurir:catalog", &doc)
        .and_then(|b| b.prepare())
        .expect("the document is a registry resource");
    for (name, hook) in webhooks {
        let content = &hook["post"]["requestBody"]["content"]["application/json"];
        let reference = content["schema"]["$ref"].as_str().unwrap();
        let schema = json!({"$ref": format!("urn:kurir:catalog{reference}")});
        let validator = jsonschema::draft202012::options()
            .with_registry(&registry)
            .build(&schema)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let examples = content["examples"].as_object().unwrap();
        assert!(!examples.is_empty(), "{name}");
        for (example, value) in examples {
            let value = &value["value"];
            let errors: Vec<String> = validator
                .iter_errors(value)
                .map(|e| e.to_string())
                .collect();
            assert!(errors.is_empty(), "{name} {example}: {errors:?}");
            let mut broken = value.clone();
            broken["version"] = json!(99);
            assert!(
                !validator.is_valid(&broken),
                "{name}: the schema checks something"
            );
        }
    }
    let file = db.dir.path().join("catalog.json");
    std::fs::write(&file, doc.to_string()).unwrap();
    let out = std::process::Command::new(&validator)
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "openapi-spec-validator refuses the export:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A catalog change made through one process is applied by another sharing the database
/// within `CATALOG_REFRESH`, without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_catalog_change_through_one_process_reaches_another_within_the_refresh() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let one = db.store.clone();
    let other = db.connect_again().await;
    let key = kurir::catalog::EventTypeRef {
        event_type: "order.paid".into(),
        version: 1,
    };
    assert!(other
        .event_checks()
        .await
        .unwrap()
        .check_text("order.paid", 1, Some(r#"{"total":"x"}"#))
        .is_pass());
    let spec = kurir::catalog::EntrySpec {
        schema: Some(order_paid_schema()),
        examples: vec![json!({"order_id": "1", "total": 1, "currency": "IDR"})],
        ..Default::default()
    };
    one.put_event_type(&key, &spec).await.unwrap();
    eventually(
        "the other process to check against the new schema",
        || async {
            let checks = other.event_checks().await.unwrap();
            (!checks
                .check_text("order.paid", 1, Some(r#"{"total":"x"}"#))
                .is_pass())
            .then_some(())
        },
    )
    .await;
}
