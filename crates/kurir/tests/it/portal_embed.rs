//! Issue 31: the subscriber portal embedded in the sender's own settings page, in a real headless
//! Chromium, across sites. kurir is on `http://127.0.0.1:P`; the sender's page, served here, on
//! `http://localhost:H` (another site: loopback hosts are secure contexts, so the session
//! cookie's `SameSite=None; Secure; Partitioned` is kept). With that origin in
//! `KURIR_PORTAL_FRAME_ANCESTORS`, the link opens inside the page's iframe, the session holds
//! from page to page inside it, and a form posted inside it (CSRF token and all) disables an
//! endpoint. From an origin not listed (`http://localhost:H2`), Chromium refuses to show the
//! portal in the frame: kurir answered (the link is used up), but only the content security
//! policy's `frame-ancestors` stops the page (with origins listed there is no
//! `X-Frame-Options`), so the check fails if the policy is missing. The cookie set in the frame
//! is partitioned by the embedding site: kurir opened at the top level is signed out.

use std::collections::HashMap;
use std::time::Duration;

use axum::extract::Query;
use axum::response::Html;
use fantoccini::{Client, Locator};
use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio::net::TcpListener;

use crate::api::support::{eventually, Backend, Receiver, TestApp, TestDb};
use crate::browser::{browser, chromedriver, click, page_with, start_driver};
use crate::portal_deliveries::subscriber_with_endpoint;

/// The sender's application: `/settings?src=URL` is its settings page framing `URL`.
async fn serve_host(listener: TcpListener) -> tokio::task::JoinHandle<()> {
    async fn settings(Query(q): Query<HashMap<String, String>>) -> Html<String> {
        let src = q
            .get("src")
            .map(String::as_str)
            .unwrap_or_default()
            .replace('&', "&amp;")
            .replace('"', "&quot;");
        Html(format!(
            "<!doctype html><html lang=\"en\"><title>Acme settings</title>\
             <h1 id=\"host\">Acme settings</h1>\
             <iframe id=\"portal\" title=\"Webhooks\" src=\"{src}\" width=\"1100\" height=\"700\"></iframe>"
        ))
    }
    let app = axum::Router::new().route("/settings", axum::routing::get(settings));
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() })
}

/// The settings page on `port`, framing `link`.
fn settings_page(port: u16, link: &str) -> String {
    url::Url::parse_with_params(
        &format!("http://localhost:{port}/settings"),
        [("src", link)],
    )
    .unwrap()
    .to_string()
}

/// A new portal link of `subscriber`, as the sender's backend asks for it.
async fn portal_link(app: &TestApp, subscriber: &str) -> String {
    let (status, made) = app
        .post(
            &format!("/v1/subscribers/{subscriber}/portal-links"),
            json!({}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    made["url"].as_str().unwrap().to_owned()
}

/// Enters the settings page's iframe: the driver's commands act inside it from now on.
async fn enter_portal_frame(c: &Client) {
    c.find(Locator::Id("portal"))
        .await
        .unwrap()
        .enter_frame()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_portal_works_framed_by_a_listed_origin_and_is_refused_by_another() {
    let Some(program) = chromedriver() else {
        return;
    };
    let listed = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let unlisted = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (listed_port, unlisted_port) = (
        listed.local_addr().unwrap().port(),
        unlisted.local_addr().unwrap().port(),
    );
    let hosts = [serve_host(listed).await, serve_host(unlisted).await];
    let database = TestDb::unmigrated(Backend::Sqlite).await.unwrap();
    let ancestors = format!("http://localhost:{listed_port}");
    let app = TestApp::spawn_with(&database, &[("portal_frame_ancestors", &ancestors)]).await;
    let driver = start_driver(&program).await;
    let profile = tempfile::tempdir().unwrap();
    let c = browser(&driver, profile.path()).await;
    let result = tokio::time::timeout(
        Duration::from_secs(180),
        embedded(&c, &app, listed_port, unlisted_port),
    )
    .await;
    c.close().await.unwrap();
    app.stopper().stop().await;
    for host in hosts {
        host.abort();
    }
    result.expect("the flow finishes within three minutes");
}

async fn embedded(c: &Client, app: &TestApp, listed: u16, unlisted: u16) {
    let receiver = Receiver::start().await;
    let id = subscriber_with_endpoint(app, "cus_e", &receiver).await;
    c.set_window_size(1280, 900).await.unwrap();

    // From the listed origin: the link opens inside the frame and signs in.
    let link = portal_link(app, "cus_e").await;
    assert!(link.starts_with("http://127.0.0.1:"), "{link}");
    c.goto(&settings_page(listed, &link)).await.unwrap();
    page_with(c, "Acme settings").await;
    enter_portal_frame(c).await;
    page_with(c, "Add endpoint").await;
    let signed_in = c.find(Locator::Id("signed-in")).await.unwrap();
    assert!(signed_in.text().await.unwrap().contains("cus_e"));

    // The session holds from page to page inside the frame.
    click(c, "nav a[href='/portal/deliveries']").await;
    page_with(c, "Every event sent to your endpoints").await;
    c.find(Locator::Id("signed-in")).await.unwrap();
    click(c, "nav a[href='/portal/endpoints']").await;
    page_with(c, "Add endpoint").await;
    click(c, &format!("a[href='/portal/endpoints/{id}']")).await;
    page_with(c, "Signing secret").await;

    // A form posted inside the frame: its CSRF token and the cookie are accepted.
    click(c, "#disable").await;
    page_with(c, "Endpoint disabled").await;
    let (_, shown) = app.get(&format!("/v1/endpoints/{id}")).await;
    assert_eq!(shown["enabled"], false, "{shown}");
    assert_eq!(
        shown["disabled_reason"], "disabled in the subscriber portal",
        "{shown}"
    );
    // And an htmx request inside it: the secret revealed in place.
    click(c, "#reveal").await;
    eventually("the secret revealed in the frame", || async {
        let secret = c
            .find(Locator::Id("secret"))
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        secret.starts_with("whsec_").then_some(())
    })
    .await;
    // All of it inside the sender's page, which is still the top-level one.
    c.enter_parent_frame().await.unwrap();
    let top = c.current_url().await.unwrap();
    assert_eq!(top.host_str(), Some("localhost"), "{top}");
    assert_eq!(top.port(), Some(listed), "{top}");

    // From an origin not listed: kurir answers, and Chromium refuses to show the answer there.
    let link = portal_link(app, "cus_e").await;
    c.goto(&settings_page(unlisted, &link)).await.unwrap();
    page_with(c, "Acme settings").await;
    enter_portal_frame(c).await;
    let url = eventually("the frame to be refused", || async {
        let url: Value = c.execute("return document.URL;", vec![]).await.ok()?;
        let url = url.as_str()?.to_owned();
        (url != "about:blank").then_some(url)
    })
    .await;
    assert!(
        url.starts_with("chrome-error://"),
        "the portal shown in a frame of an unlisted origin: {url}"
    );
    assert!(
        c.find_all(Locator::Id("signed-in"))
            .await
            .unwrap()
            .is_empty(),
        "portal content in the refused frame"
    );
    c.enter_parent_frame().await.unwrap();
    // The browser did open the link (used up now): it was the policy that kept the page out.
    let again = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .get(&link)
        .send()
        .await
        .unwrap();
    assert_eq!(
        again.status(),
        StatusCode::GONE,
        "the frame opened the link"
    );

    // The cookie belongs to the sender's site's partition: at the top level, kurir's own site
    // has no session.
    c.goto(&format!("{}/portal/endpoints", app.url))
        .await
        .unwrap();
    page_with(c, "Signed out").await;
}
