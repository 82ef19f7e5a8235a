//! Issue 33: kurir delivers a payload byte for byte, so every surface keeps the bytes it was
//! given. `kurir events send --data` re-serialised the payload (keys sorted), `kurir events
//! show` printed `1e3` as `1000.0`, and the dashboard's event page sorted the keys. Driven
//! through the real `kurir` binary against a real server and receiver.

use reqwest::header::COOKIE;
use serde_json::json;

use crate::api::support::{on_both_backends, Receiver, TestApp};
use crate::cli::cli_ok;

on_both_backends!(a_payload_is_sent_delivered_and_shown_as_it_was_written);

/// Keys out of alphabetical order, an exponent, trailing zeros and an escaped character: each
/// would change on a trip through `serde_json::Value`.
const DATA: &str = r#"{"invoice_id":"inv_1","amount":1e3,"total":100.50,"note":"a\u00e9"}"#;

/// `DATA` as the views indent it: the same tokens in the same order.
const PRETTY: &str = "{\n  \"invoice_id\": \"inv_1\",\n  \"amount\": 1e3,\n  \"total\": 100.50,\n  \"note\": \"a\\u00e9\"\n}";

async fn a_payload_is_sent_delivered_and_shown_as_it_was_written(app: TestApp) {
    let receiver = Receiver::start().await;
    app.create_endpoint(&receiver.url, json!({})).await;
    let sent = cli_ok(
        &app,
        &[
            "events",
            "send",
            "--type",
            "invoice.paid",
            "--data",
            DATA,
            "--json",
        ],
    )
    .await;
    let sent: serde_json::Value = serde_json::from_str(&sent).unwrap();
    assert!(sent["event_id"].is_string(), "{sent}");

    // Each surface is checked, and all that are wrong reported together.
    let mut wrong = Vec::new();
    let delivered = receiver.wait_for(1).await.remove(0);
    let body = String::from_utf8(delivered.body.to_vec()).unwrap();
    if !body.contains(&format!("\"data\":{DATA}")) {
        wrong.push(format!("`events send` delivered {body}"));
    }

    // The views, of an event published over the API as written (whatever the CLI sends).
    let published = app
        .request(reqwest::Method::POST, "/v1/events")
        .header("content-type", "application/json")
        .body(format!(
            "{{\"event_type\":\"invoice.paid\",\"data\":{DATA}}}"
        ));
    let (_, published) = app.send(published).await;
    let shown_id = published["event_id"].as_str().unwrap().to_owned();
    let shown = cli_ok(&app, &["events", "show", &shown_id]).await;
    if !shown.contains(&format!("data: {PRETTY}")) {
        wrong.push(format!("`events show` printed {shown}"));
    }
    let shown_json = cli_ok(&app, &["events", "show", &shown_id, "--json"]).await;
    if !shown_json.contains(&PRETTY.replace('\n', "\n  ")) {
        wrong.push(format!("`events show --json` printed {shown_json}"));
    }
    let listed = cli_ok(&app, &["events", "list", "--json"]).await;
    if !listed.contains(&PRETTY.replace('\n', "\n      ")) {
        wrong.push(format!("`events list --json` printed {listed}"));
    }

    let (cookie, _) = crate::ui::sign_in(&app, None).await;
    let page = reqwest::Client::new()
        .get(format!("{}/ui/events/{shown_id}", app.url))
        .header(COOKIE, cookie)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let unescaped = page
        .replace("&quot;", "\"")
        .replace("&#34;", "\"")
        .replace("&#x22;", "\"");
    if !unescaped.contains(PRETTY) {
        let pre = unescaped
            .split_once("invoice_id")
            .map_or("", |(_, rest)| rest);
        wrong.push(format!(
            "the dashboard's event page shows {}",
            &pre[..pre.len().min(200)]
        ));
    }
    assert!(
        wrong.is_empty(),
        "payload bytes changed:\n{}",
        wrong.join("\n---\n")
    );
}

/// The lines of `kurir events send --file` go as written too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lines_of_an_ndjson_file_are_sent_as_written() {
    let db = crate::support::TestDb::sqlite().await;
    let app = TestApp::spawn(&db).await;
    let receiver = Receiver::start().await;
    app.create_endpoint(&receiver.url, json!({})).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("events.ndjson");
    std::fs::write(
        &file,
        format!("{{\"event_type\":\"invoice.paid\",\"data\":{DATA}}}\n"),
    )
    .unwrap();
    let out = cli_ok(&app, &["events", "send", "--file", file.to_str().unwrap()]).await;
    assert!(out.contains("1 accepted"), "{out}");
    let delivered = receiver.wait_for(1).await.remove(0);
    let body = String::from_utf8(delivered.body.to_vec()).unwrap();
    assert!(
        body.contains(&format!("\"data\":{DATA}")),
        "delivered as written: {body}"
    );
    app.stopper().stop().await;
}
