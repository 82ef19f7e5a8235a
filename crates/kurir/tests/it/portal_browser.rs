//! Issue 31, the subscriber portal's deliveries, replay, test and verify pages in a real headless
//! Chromium: open a portal link, filter the log, open an event's attempts, replay its dead letter
//! after the dry run's count, send a test event and read the request and the response, read how
//! to verify. Each page is checked at 1280 and 390 px (no horizontal overflow, navigation and
//! key columns in sight) and for a label on every control. `KURIR_SCREENSHOTS=1` saves
//! screenshots under `docs/screenshots/`.

use std::time::Duration;

use fantoccini::{Client, Locator};

use crate::api::support::{Backend, Receiver, TestApp, TestDb};
use crate::browser::{
    browser, check_labels, check_widths, chromedriver, click, page_with, start_driver,
};
use crate::portal_deliveries::{link_path, publish_to, subscriber_with_endpoint};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_filters_its_deliveries_replays_a_dead_letter_tests_and_reads_how_to_verify() {
    let Some(program) = chromedriver() else {
        return;
    };
    let database = TestDb::unmigrated(Backend::Sqlite).await.unwrap();
    let app = TestApp::spawn_with(&database, &[("retry_max_attempts", "1")]).await;
    let driver = start_driver(&program).await;
    let profile = tempfile::tempdir().unwrap();
    let c = browser(&driver, profile.path()).await;
    let result = tokio::time::timeout(Duration::from_secs(180), flow(&c, &app)).await;
    c.close().await.unwrap();
    app.stopper().stop().await;
    result.expect("the flow finishes within three minutes");
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
