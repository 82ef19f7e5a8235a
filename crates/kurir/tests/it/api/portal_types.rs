//! The portal's event types page (issue 30's read-only surface, in issue 31's portal) over raw
//! HTTP, on every database: the catalog's types the subscriber may receive, each version with
//! its description, deprecation and successor, schema and examples, pretty-printed and escaped;
//! the same types the endpoint form offers; and nothing outside the catalog, such as the type of
//! events only another subscriber or the operator sends.

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use super::portal::{link, open, page};
use super::support::{on_both_backends, Receiver, TestApp, TestDb};

on_both_backends!(the_portal_lists_the_catalogs_types_and_nothing_else);

async fn put(app: &TestApp, event_type: &str, version: i32, body: Value) {
    let path = format!("/v1/event-types/{event_type}/versions/{version}");
    let (status, answer) = app
        .send(app.request(Method::PUT, &path).body(body.to_string()))
        .await;
    assert!(status.is_success(), "{path}: {answer}");
}

/// The text of `html` as a browser shows it: the entities askama writes, decoded.
fn unescape(html: &str) -> String {
    [
        ("&lt;", "<"),
        ("&#60;", "<"),
        ("&gt;", ">"),
        ("&#62;", ">"),
        ("&quot;", "\""),
        ("&#34;", "\""),
        ("&#x22;", "\""),
        ("&#39;", "'"),
        ("&#x27;", "'"),
        ("&amp;", "&"),
        ("&#38;", "&"),
    ]
    .iter()
    .fold(html.to_owned(), |text, (entity, c)| text.replace(entity, c))
}

async fn the_portal_lists_the_catalogs_types_and_nothing_else(db: TestDb) {
    let app = TestApp::spawn(&db).await;
    for (id, name) in [("cus_a", "Acme"), ("cus_b", "Bolt")] {
        let (status, body) = app
            .post("/v1/subscribers", json!({"id": id, "name": name}))
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    let schema = json!({
        "type": "object",
        "required": ["total"],
        "properties": {"total": {"type": "integer"}, "note": {"type": "string"}},
    });
    let v2_example = json!({"total": 7, "note": "second"});
    put(
        &app,
        "order.paid",
        2,
        json!({"description": "An order was paid, in minor units.", "schema": schema,
            "examples": [v2_example]}),
    )
    .await;
    let hostile = json!({"total": 5, "note": "<script>alert(1)</script>"});
    put(
        &app,
        "order.paid",
        1,
        json!({"description": "An order was paid <b>in full</b>.", "schema": schema,
            "examples": [hostile, {"total": 6}], "deprecated": true,
            "successor": {"event_type": "order.paid", "version": 2}}),
    )
    .await;
    put(&app, "invoice.sent", 1, json!({"examples": [{"n": 1}]})).await;

    // Types outside the catalog, in events only B and the operator get: never on A's page.
    let theirs = Receiver::start().await;
    app.create_endpoint(
        &theirs.url,
        json!({"subscriber_id": "cus_b", "event_types": ["bolt.secret_plan"]}),
    )
    .await;
    let (status, body) = app
        .post(
            "/v1/events",
            json!({"event_type": "bolt.secret_plan", "data": {}, "subscriber_id": "cus_b"}),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    app.wait_for_deliveries(body["event_id"].as_str().unwrap(), "sent")
        .await;
    app.publish("operator.internal_audit", json!({})).await;

    let (status, cookie, _) = open(&link(&app, "cus_a", json!({})).await).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let cookie = cookie.expect("a session cookie");
    let (status, html) = page(&app, &cookie, Method::GET, "/portal/event-types", "").await;
    assert_eq!(status, StatusCode::OK, "{html}");

    // The navigation leads here, marked as the page shown.
    assert!(
        html.contains(r#"<a href="/portal/event-types" aria-current="page">Event types</a>"#),
        "{html}"
    );
    // Every version of every catalogued type, each in its own section.
    for anchor in [
        "type-invoice.sent-v1",
        "type-order.paid-v1",
        "type-order.paid-v2",
    ] {
        assert!(
            html.contains(&format!("id=\"{anchor}\"")),
            "{anchor}: {html}"
        );
    }
    // Nothing outside the catalog.
    for absent in ["bolt.secret_plan", "operator.internal_audit", "Bolt"] {
        assert!(!html.contains(absent), "{absent} shown to A: {html}");
    }
    // Escaped: the description's and the example's markup is text.
    assert!(
        !html.contains("<b>in full</b>") && !html.contains("<script>alert(1)</script>"),
        "{html}"
    );
    let text = unescape(&html);
    assert!(text.contains("An order was paid <b>in full</b>."), "{html}");
    // Pretty-printed, as written: the schema and every example.
    for shown in [&schema, &hostile, &json!({"total": 6}), &v2_example] {
        let pretty = serde_json::to_string_pretty(shown).unwrap();
        assert!(text.contains(&pretty), "{pretty} in {text}");
    }
    // v1 is deprecated and names v2, linked; v2 is current.
    let v1 = &text[text.find("id=\"type-order.paid-v1\"").unwrap()..];
    let v1 = &v1[..v1.find("</section>").unwrap()];
    assert!(
        v1.contains("deprecated")
            && v1.contains(
                "replaced by <a class=\"mono\" href=\"#type-order.paid-v2\">order.paid v2</a>"
            ),
        "{v1}"
    );
    let v2 = &text[text.find("id=\"type-order.paid-v2\"").unwrap()..];
    let v2 = &v2[..v2.find("</section>").unwrap()];
    assert!(v2.contains("current") && !v2.contains("deprecated"), "{v2}");
    let invoice = &text[text.find("id=\"type-invoice.sent-v1\"").unwrap()..];
    assert!(invoice.contains("No schema: any JSON object."), "{invoice}");

    // The endpoint form offers the same types, by the same rule.
    let (status, form) = page(&app, &cookie, Method::GET, "/portal/endpoints/new", "").await;
    assert_eq!(status, StatusCode::OK, "{form}");
    for offered in ["order.paid", "invoice.sent"] {
        assert!(form.contains(&format!("value=\"{offered}\"")), "{form}");
    }
    assert!(!form.contains("bolt.secret_plan"), "{form}");

    // A read-only session reads it too; no session, nothing.
    let (_, reader, _) = open(&link(&app, "cus_a", json!({"read_only": true})).await).await;
    let (status, read) = page(
        &app,
        &reader.unwrap(),
        Method::GET,
        "/portal/event-types",
        "",
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert!(read.contains("id=\"type-order.paid-v2\""), "{read}");
    let (status, _) = page(
        &app,
        "kurir_portal=forged",
        Method::GET,
        "/portal/event-types",
        "",
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    app.stopper().stop().await;
}
