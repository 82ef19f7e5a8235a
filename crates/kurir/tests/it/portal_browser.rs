//! Issue 31, the subscriber portal in a real headless Chromium. The deliveries, replay, test and
//! verify pages: open a portal link, filter the log, open an event's attempts, replay its dead
//! letter after the dry run's count, send a test event and read the request and the response,
//! read how to verify. The endpoints and secrets pages: add an endpoint choosing its event types
//! from the catalog, edit, disable, enable and delete it, reveal its signing secret (absent from
//! the page before the click), rotate it with a chosen grace period and see that period; each
//! change checked through the API and the store afterwards. A read-only session: no control, and
//! a form forged in its page with its own CSRF token refused (403), nothing changed. Each page is
//! checked at 1280 and 390 px (no horizontal overflow, navigation and key columns in sight) and
//! for a label on every control. `KURIR_SCREENSHOTS=1` saves screenshots under
//! `docs/screenshots/`.

use std::time::Duration;

use fantoccini::{Client, Locator};
use reqwest::StatusCode;
use serde_json::{json, Value};

use kurir::endpoint::{Endpoint, EndpointId};

use crate::api::support::{eventually, Backend, Receiver, TestApp, TestDb};
use crate::browser::{
    check_labels, check_widths, chromedriver, click, fill, in_chromium, page_with, screenshot,
};
use crate::portal_deliveries::{link_path, publish_to, subscriber_with_endpoint};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_filters_its_deliveries_replays_a_dead_letter_tests_and_reads_how_to_verify() {
    let Some(program) = chromedriver() else {
        return;
    };
    let database = TestDb::unmigrated(Backend::Sqlite).await.unwrap();
    let app = TestApp::spawn_with(&database, &[("retry_max_attempts", "1")]).await;
    in_chromium(&program, &app, Duration::from_secs(180), async |c| {
        flow(c, &app).await
    })
    .await;
}

async fn flow(c: &Client, app: &TestApp) {
    let receiver = Receiver::start().await;
    receiver.respond_with(500);
    subscriber_with_endpoint(app, "cus_a", &receiver).await;
    let event = publish_to(app, "cus_a").await;
    app.wait_for_deliveries(&event, "dead_letter").await;
    let path = link_path(app, "cus_a", false).await;
    c.goto(&format!("{}{path}", app.url)).await.unwrap();
    page_with(c, "Endpoints").await;

    // The log, filtered to dead letters through the form (htmx swaps the rows).
    c.goto(&format!("{}/portal/deliveries", app.url))
        .await
        .unwrap();
    page_with(c, "order.paid").await;
    c.find(Locator::Id("status"))
        .await
        .unwrap()
        .select_by_value("dead_letter")
        .await
        .unwrap();
    click(c, "form[role=search] button[type=submit]").await;
    page_with(c, "Failed (dead letter)").await;
    check_labels(c, "portal deliveries").await;
    check_widths(c, "portal-deliveries").await;

    // The event: each attempt's status, duration, error and response body.
    click(c, &format!("a[href^='/portal/events/{event}']")).await;
    page_with(c, "kurir keeps the first 4 KiB").await;
    check_labels(c, "portal event").await;
    check_widths(c, "portal-event").await;

    // Replay: the dry run's count, then the confirmation.
    click(c, "form[action$='/replay'] button").await;
    let dry_run = page_with(c, "would be sent again").await;
    assert!(dry_run.contains("1 delivery"), "{dry_run}");
    check_labels(c, "portal replay").await;
    check_widths(c, "portal-replay").await;
    receiver.respond_with(200);
    click(c, "#confirm").await;
    page_with(c, "goes out again").await;
    app.wait_for_deliveries(&event, "sent").await;

    // A test event: the request as sent and the response.
    c.goto(&format!("{}/portal/test", app.url)).await.unwrap();
    page_with(c, "Send a test event").await;
    click(c, "#send-test").await;
    let sent = page_with(c, "The request sent").await;
    assert!(
        sent.contains("webhook-signature") && sent.contains("Delivered"),
        "{sent}"
    );
    check_labels(c, "portal test").await;
    check_widths(c, "portal-test").await;

    // How to verify: the headers and the examples.
    c.goto(&format!("{}/portal/verify", app.url)).await.unwrap();
    let verify = page_with(c, "X-Webhook-Signature").await;
    assert!(
        verify.contains("hash_hmac") && verify.contains("standardwebhooks"),
        "{verify}"
    );
    check_widths(c, "portal-verify").await;
}

/// Adds `event_type` version 1 to the catalog, described.
async fn catalog_entry(app: &TestApp, event_type: &str, description: &str) {
    let entry =
        json!({"description": description, "schema": {"type": "object"}, "examples": [{"id": 1}]});
    let put = app.request(
        reqwest::Method::PUT,
        &format!("/v1/event-types/{event_type}/versions/1"),
    );
    let (status, answer) = app.send(put.body(entry.to_string())).await;
    assert!(status.is_success(), "{answer}");
}

/// The endpoint `id` as stored (its secrets included).
async fn stored(app: &TestApp, id: &str) -> Endpoint {
    let id = EndpointId::parse(id).unwrap();
    app.store.get_endpoint(&id).await.unwrap().expect("stored")
}

/// The text of the element `id`.
async fn text_of(c: &Client, id: &str) -> String {
    c.find(Locator::Id(id)).await.unwrap().text().await.unwrap()
}

/// The subscriber's endpoints as the admin API lists them.
async fn endpoints_of(app: &TestApp, subscriber: &str) -> Vec<Value> {
    let (status, page) = app
        .get(&format!("/v1/endpoints?subscriber_id={subscriber}"))
        .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    page["data"].as_array().unwrap().clone()
}

/// Saves the window at 390 and at 1280 px (`<name>-390.png`, `<name>.png`) with `anchor`
/// scrolled into view, when `KURIR_SCREENSHOTS` is set.
async fn screenshots(c: &Client, name: &str, anchor: &str) {
    if std::env::var_os("KURIR_SCREENSHOTS").is_none() {
        return;
    }
    // The section's heading in sight too, above its card.
    let scroll =
        format!("document.querySelector('{anchor}').scrollIntoView(); window.scrollBy(0, -72);");
    for (width, file) in [(390, format!("{name}-390")), (1280, name.to_owned())] {
        c.set_window_size(width, 900).await.unwrap();
        c.execute(&scroll, vec![]).await.unwrap();
        screenshot(c, &file).await;
    }
    c.execute("window.scrollTo(0, 0);", vec![]).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_adds_edits_pauses_and_deletes_an_endpoint_and_reveals_and_rotates_its_secret()
{
    let Some(program) = chromedriver() else {
        return;
    };
    let database = TestDb::unmigrated(Backend::Sqlite).await.unwrap();
    let app = TestApp::spawn_with(&database, &[("retry_max_attempts", "1")]).await;
    in_chromium(&program, &app, Duration::from_secs(240), async |c| {
        endpoints_flow(c, &app).await
    })
    .await;
}

async fn endpoints_flow(c: &Client, app: &TestApp) {
    let (status, body) = app
        .post(
            "/v1/subscribers",
            json!({"id": "cus_a", "name": "Toko Makmur"}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    catalog_entry(app, "order.paid", "An order was paid in full.").await;
    catalog_entry(app, "invoice.sent", "An invoice went out to the customer.").await;
    let receiver = Receiver::start().await;
    let path = link_path(app, "cus_a", false).await;
    c.goto(&format!("{}{path}", app.url)).await.unwrap();
    page_with(c, "No endpoint yet").await;

    // Add one: the event types offered are the catalog's; one chosen.
    click(c, "#new-endpoint").await;
    page_with(c, "Add an endpoint").await;
    let offered = c
        .execute(
            "return [...document.querySelectorAll('input[name=event_types]')].map(e => e.value);",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(
        offered,
        json!(["invoice.sent", "order.paid"]),
        "the catalog's types"
    );
    check_labels(c, "portal new endpoint").await;
    check_widths(c, "portal-endpoint-new").await;
    let url = format!("{}/webhooks/erp/orders", receiver.url);
    fill(c, "url", &url).await;
    fill(c, "description", "Our ERP").await;
    click(c, "input[name=event_types][value='order.paid']").await;
    click(c, "form[action='/portal/endpoints'] button[type=submit]").await;
    page_with(c, "Endpoint added").await;
    let id = c
        .current_url()
        .await
        .unwrap()
        .path()
        .trim_start_matches("/portal/endpoints/")
        .to_owned();
    let (status, shown) = app.get(&format!("/v1/endpoints/{id}")).await;
    assert_eq!(status, StatusCode::OK, "{shown}");
    assert_eq!(shown["url"], url.as_str(), "{shown}");
    assert_eq!(shown["description"], "Our ERP", "{shown}");
    assert_eq!(shown["event_types"], json!(["order.paid"]), "{shown}");
    assert_eq!(shown["subscriber_id"], "cus_a", "{shown}");
    assert_eq!(endpoints_of(app, "cus_a").await.len(), 1);

    // The secret: not in the page until the click reveals it (htmx swaps it in).
    let secret = stored(app, &id).await.secret.expose().to_owned();
    assert!(
        !c.source().await.unwrap().contains(&secret),
        "the secret is in the page before the reveal"
    );
    click(c, "#reveal").await;
    eventually("the revealed secret", || async {
        let shown = c
            .find(Locator::Id("secret"))
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        (shown == secret).then_some(())
    })
    .await;
    check_labels(c, "portal endpoint").await;
    check_widths(c, "portal-endpoint-secret").await;
    screenshots(c, "portal-endpoint-secret", "#signing-secret").await;

    // Rotate, keeping the old secret signing for an hour: the page shows until when.
    c.find(Locator::Id("grace"))
        .await
        .unwrap()
        .select_by_value("3600")
        .await
        .unwrap();
    let before = chrono::Utc::now();
    click(c, "#rotate").await;
    page_with(c, "Signing secret rotated.").await;
    let after = chrono::Utc::now();
    let rotated = stored(app, &id).await;
    assert_ne!(rotated.secret.expose(), secret, "a new secret");
    assert_eq!(text_of(c, "secret").await, rotated.secret.expose());
    let [previous] = rotated.previous_secrets.as_slice() else {
        panic!("one previous secret: {:?}", rotated.previous_secrets.len());
    };
    assert_eq!(
        previous.secret.expose(),
        secret,
        "the old secret still signs"
    );
    let hour = chrono::Duration::hours(1);
    let slack = chrono::Duration::seconds(2);
    assert!(
        previous.expires_at >= before + hour - slack && previous.expires_at <= after + hour + slack,
        "the grace period chosen: {} not an hour after {before}",
        previous.expires_at
    );
    let grace = text_of(c, "previous-secret").await;
    let until = format!("{} UTC", kurir::ui::view::time(previous.expires_at));
    assert!(grace.contains(&until), "'{until}' in: {grace}");
    let (_, shown) = app.get(&format!("/v1/endpoints/{id}")).await;
    assert_eq!(
        shown["previous_secrets_expire_at"].as_array().map(Vec::len),
        Some(1),
        "{shown}"
    );
    check_widths(c, "portal-endpoint-rotated").await;
    screenshots(c, "portal-endpoint-rotated", "#signing-secret").await;

    // Edit: another description, both types.
    fill(c, "description", "Our ERP, billing").await;
    click(c, "input[name=event_types][value='invoice.sent']").await;
    click(c, "#save").await;
    page_with(c, "Changes saved.").await;
    let (_, shown) = app.get(&format!("/v1/endpoints/{id}")).await;
    assert_eq!(shown["description"], "Our ERP, billing", "{shown}");
    let mut types: Vec<&str> = shown["event_types"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    types.sort_unstable();
    assert_eq!(types, ["invoice.sent", "order.paid"], "{shown}");
    assert_eq!(shown["url"], url.as_str(), "{shown}");

    // Disable, then enable.
    click(c, "#disable").await;
    page_with(c, "Endpoint disabled").await;
    assert!(text_of(c, "state").await.contains("disabled"));
    let (_, shown) = app.get(&format!("/v1/endpoints/{id}")).await;
    assert_eq!(shown["enabled"], false, "{shown}");
    click(c, "#enable").await;
    page_with(c, "Endpoint enabled").await;
    let (_, shown) = app.get(&format!("/v1/endpoints/{id}")).await;
    assert_eq!(shown["enabled"], true, "{shown}");

    // The list with each one's health: one delivered, one failing.
    let down = Receiver::start().await;
    down.respond_with(500);
    let staging = format!("{}/webhooks/staging/orders", down.url);
    app.create_endpoint(
        &staging,
        json!({"subscriber_id": "cus_a", "description": "Staging"}),
    )
    .await;
    let event = publish_to(app, "cus_a").await;
    eventually("one delivery sent, one dead-lettered", || async {
        let (_, e) = app.get(&format!("/v1/events/{event}")).await;
        let statuses: Vec<&str> = e["deliveries"]
            .as_array()?
            .iter()
            .filter_map(|d| d["status"].as_str())
            .collect();
        (statuses.contains(&"sent") && statuses.contains(&"dead_letter")).then_some(())
    })
    .await;
    click(c, "a[href='/portal/endpoints']").await;
    let list = page_with(c, "Staging").await;
    assert!(
        list.contains("Our ERP, billing") && list.contains("HTTP 500"),
        "{list}"
    );
    check_labels(c, "portal endpoints").await;
    check_widths(c, "portal-endpoints").await;
    // On a phone each URL is shown whole (wrapped), not cut to its first characters: two
    // endpoints on one host must not read the same.
    c.set_window_size(390, 900).await.unwrap();
    let cut = c
        .execute(
            "return [...document.querySelectorAll('td a.url')]
                .filter(a => a.scrollWidth > a.clientWidth + 1 || a.getClientRects().length === 0
                    || [...a.getClientRects()].some(r => r.right > window.innerWidth))
                .map(a => a.title);",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(cut, json!([]), "URLs cut at 390 px");
    let shown = c
        .find(Locator::Css("main table"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
        .replace('\n', "");
    assert!(
        shown.contains(&url) && shown.contains(&staging),
        "both URLs whole at 390 px: {shown}"
    );
    c.set_window_size(1280, 900).await.unwrap();
    screenshots(c, "portal-endpoints", "main h1").await;

    // Delete, after the confirmation.
    click(c, &format!("a[href='/portal/endpoints/{id}']")).await;
    page_with(c, "Delete endpoint").await;
    click(c, "#delete").await;
    page_with(c, "Delete this endpoint?").await;
    check_widths(c, "portal-endpoint-delete").await;
    let (status, _) = app.get(&format!("/v1/endpoints/{id}")).await;
    assert_eq!(status, StatusCode::OK, "not before the confirmation");
    click(c, "#confirm-delete").await;
    let list = page_with(c, "Endpoint deleted.").await;
    assert!(!list.contains("Our ERP"), "{list}");
    let (status, _) = app.get(&format!("/v1/endpoints/{id}")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(endpoints_of(app, "cus_a").await.len(), 1, "the other stays");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_portal_session_shows_no_control_and_its_forged_forms_are_refused() {
    let Some(program) = chromedriver() else {
        return;
    };
    let database = TestDb::unmigrated(Backend::Sqlite).await.unwrap();
    let app = TestApp::spawn(&database).await;
    in_chromium(&program, &app, Duration::from_secs(180), async |c| {
        read_only_flow(c, &app).await
    })
    .await;
}

async fn read_only_flow(c: &Client, app: &TestApp) {
    let receiver = Receiver::start().await;
    let id = subscriber_with_endpoint(app, "cus_r", &receiver).await;
    catalog_entry(app, "order.paid", "An order was paid in full.").await;
    let before = stored(app, &id).await;
    let path = link_path(app, "cus_r", true).await;
    c.goto(&format!("{}{path}", app.url)).await.unwrap();
    page_with(c, "A read-only session").await;
    assert!(
        c.find_all(Locator::Css("#new-endpoint, main form"))
            .await
            .unwrap()
            .is_empty(),
        "no control on the list"
    );
    check_widths(c, "portal-read-only-endpoints").await;

    click(c, &format!("a[href='/portal/endpoints/{id}']")).await;
    page_with(c, "shown only in a session that may change things").await;
    let controls = c
        .find_all(Locator::Css(
            "main form, main button, #reveal, #rotate, #grace, #save, #disable, #enable, #delete",
        ))
        .await
        .unwrap();
    assert!(controls.is_empty(), "{} controls shown", controls.len());
    assert!(
        !c.source().await.unwrap().contains(before.secret.expose()),
        "no secret in a read-only page"
    );
    check_labels(c, "portal read-only endpoint").await;
    check_widths(c, "portal-read-only-endpoint").await;

    // Forms forged in the page, with the session's own CSRF token (the sign-out form's): every
    // change refused with 403.
    let forged = c
        .execute_async(
            r#"const [paths, done] = arguments;
               const csrf = document.querySelector('input[name=csrf]').value;
               const body = () => new URLSearchParams({csrf, enabled: 'false', url: 'https://evil.example/',
                 description: 'forged', event_types: 'order.paid', grace_period_seconds: '0'});
               Promise.all(paths.map(p => fetch(p, {method: 'POST', body: body()}).then(r => r.status)))
                 .then(done, e => done(String(e)));"#,
            vec![json!([
                "/portal/endpoints",
                format!("/portal/endpoints/{id}"),
                format!("/portal/endpoints/{id}/enabled"),
                format!("/portal/endpoints/{id}/secret"),
                format!("/portal/endpoints/{id}/rotate"),
                format!("/portal/endpoints/{id}/delete"),
            ])],
        )
        .await
        .unwrap();
    assert_eq!(forged, json!([403, 403, 403, 403, 403, 403]), "{forged}");
    // The same as a submitted form: the page says why.
    c.execute(
        r#"const f = document.createElement('form');
           f.method = 'post'; f.action = arguments[0];
           for (const [k, v] of [['csrf', document.querySelector('input[name=csrf]').value], ['enabled', 'false']]) {
             const i = document.createElement('input'); i.type = 'hidden'; i.name = k; i.value = v; f.append(i);
           }
           document.body.append(f); f.submit();"#,
        vec![json!(format!("/portal/endpoints/{id}/enabled"))],
    )
    .await
    .unwrap();
    let refused = page_with(c, "Read-only session").await;
    assert!(refused.contains("403"), "{refused}");
    c.goto(&format!("{}/portal/endpoints/new", app.url))
        .await
        .unwrap();
    page_with(c, "Read-only session").await;

    // Nothing changed.
    let after = stored(app, &id).await;
    assert!(after.enabled, "still enabled");
    assert_eq!(after.url, before.url);
    assert_eq!(after.description, before.description);
    assert_eq!(after.secret.expose(), before.secret.expose(), "not rotated");
    assert!(after.previous_secrets.is_empty());
    assert_eq!(
        endpoints_of(app, "cus_r").await.len(),
        1,
        "none added or deleted"
    );
}
