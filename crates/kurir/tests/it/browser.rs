//! The dashboard in a real headless Chromium, driven through ChromeDriver (WebDriver): sign in,
//! create an endpoint, send it a test event and see it delivered, find a dead letter and replay
//! it with a reason after a dry-run count, see the replay on the audit page, sign out. Each
//! main page is checked at 1280 and 390 px for horizontal overflow, and at 390 px for its
//! navigation and its tables' key columns in sight (see `phone.rs`). A viewer's pages show no
//! control that changes anything, and the server refuses the form a viewer forges.
//!
//! ChromeDriver comes from `KURIR_CHROMEDRIVER` (what `.ci/run` sets) or the PATH. Without it the
//! test is skipped with a notice, except under CI, where it fails. `KURIR_SCREENSHOTS=1` saves a
//! screenshot of each main page under `docs/screenshots/`.

use std::process::Stdio;
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};
use tokio::process::{Child, Command};

use crate::api::support::{eventually, Backend, Receiver, TestApp, TestDb, TOKEN};

/// A ChromeDriver on a free loopback port, killed with the test.
pub(crate) struct Driver {
    _child: Child,
    url: String,
}

pub(crate) fn chromedriver() -> Option<String> {
    let candidate = std::env::var("KURIR_CHROMEDRIVER").unwrap_or_else(|_| "chromedriver".into());
    let runs = std::process::Command::new(&candidate)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    match runs {
        true => Some(candidate),
        false if std::env::var_os("CI").is_some() => {
            panic!("CI is set but {candidate} does not run: .ci/run installs chromium-driver")
        }
        false => {
            eprintln!("notice: {candidate} is not installed; skipping the browser test");
            None
        }
    }
}

pub(crate) async fn start_driver(program: &str) -> Driver {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(program)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("chromedriver starts");
    let url = format!("http://127.0.0.1:{port}");
    eventually("chromedriver to answer", || async {
        let status = reqwest::get(format!("{url}/status")).await.ok()?;
        status.status().is_success().then_some(())
    })
    .await;
    Driver { _child: child, url }
}

/// Runs `flow` in a fresh Chromium (a profile of its own) against `app`, for at most
/// `patience`; closes the browser and stops `app` whatever the flow did, then fails the test if
/// the flow ran out of time. Returns what the flow returns.
pub(crate) async fn in_chromium<T>(
    program: &str,
    app: &TestApp,
    patience: Duration,
    flow: impl AsyncFnOnce(&Client) -> T,
) -> T {
    let driver = start_driver(program).await;
    let profile = tempfile::tempdir().unwrap();
    let c = browser(&driver, profile.path()).await;
    let result = tokio::time::timeout(patience, flow(&c)).await;
    c.close().await.unwrap();
    app.stopper().stop().await;
    result.unwrap_or_else(|_| panic!("the flow did not finish within {patience:?}"))
}

pub(crate) async fn browser(driver: &Driver, profile: &std::path::Path) -> Client {
    let args = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--hide-scrollbars",
    ];
    let mut args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    args.push(format!("--user-data-dir={}", profile.display()));
    let mut caps = serde_json::Map::new();
    caps.insert("goog:chromeOptions".into(), json!({ "args": args }));
    let connector = hyper_util::client::legacy::connect::HttpConnector::new();
    ClientBuilder::new(connector)
        .capabilities(caps)
        .connect(&driver.url)
        .await
        .expect("a Chromium session")
}

/// The visible text of the page.
async fn text(c: &Client) -> String {
    c.find(Locator::Css("body"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// The page's text once it contains `needle` (a click's navigation may still be under way).
pub(crate) async fn page_with(c: &Client, needle: &str) -> String {
    let what = format!("a page with '{needle}'");
    let found = eventually(&what, || async {
        let body = c.find(Locator::Css("body")).await.ok()?;
        let text = body.text().await.ok()?;
        text.contains(needle).then_some(text)
    });
    match tokio::time::timeout(Duration::from_secs(10), found).await {
        Ok(text) => text,
        Err(_) => panic!("no page with '{needle}'; the page says: {}", text(c).await),
    }
}

pub(crate) async fn fill(c: &Client, id: &str, value: &str) {
    let field = c.find(Locator::Id(id)).await.unwrap();
    field.clear().await.unwrap();
    field.send_keys(value).await.unwrap();
}

pub(crate) async fn click(c: &Client, css: &str) {
    c.find(Locator::Css(css))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
}

/// Checks the page has no horizontal overflow at 1280 and 390 px, and at 390 px that every
/// navigation item and every table's key columns are in sight ([`crate::phone`]); saves a
/// screenshot at 1280 when asked to.
pub(crate) async fn check_widths(c: &Client, name: &str) {
    for width in [390, 1280] {
        c.set_window_size(width, 900).await.unwrap();
        if width == 390 && name == "overview" {
            screenshot(c, "overview-390").await;
        }
        if width == 390 {
            let unseen = crate::phone::unseen(c).await;
            assert!(
                unseen.is_empty(),
                "{name} at 390 px:\n{}",
                unseen.join("\n")
            );
        }
        let sizes = c
            .execute(
                "return [document.documentElement.scrollWidth, window.innerWidth];",
                vec![],
            )
            .await
            .unwrap();
        let (scroll, inner) = (sizes[0].as_i64().unwrap(), sizes[1].as_i64().unwrap());
        assert!(
            scroll <= inner,
            "{name} overflows at {width} px: {scroll} > {inner}"
        );
    }
    screenshot(c, name).await;
}

/// Saves a screenshot of the window as `docs/screenshots/<name>.png` when `KURIR_SCREENSHOTS` is
/// set.
pub(crate) async fn screenshot(c: &Client, name: &str) {
    if std::env::var_os("KURIR_SCREENSHOTS").is_some() {
        let png = c.screenshot().await.unwrap();
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/screenshots");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("{name}.png")), png).unwrap();
    }
}

/// Every labelled control's label points at it, and every input has a label.
pub(crate) async fn check_labels(c: &Client, page: &str) {
    let unlabelled = c
        .execute(
            "return [...document.querySelectorAll('input:not([type=hidden]), select, textarea')]
                .filter(e => !(e.labels && e.labels.length) && !e.getAttribute('aria-label'))
                .map(e => e.name);",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(unlabelled, json!([]), "controls without a label on {page}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_signs_in_sets_up_an_endpoint_replays_a_dead_letter_and_signs_out() {
    let Some(program) = chromedriver() else {
        return;
    };
    let database = TestDb::unmigrated(Backend::Sqlite).await.unwrap();
    let app = TestApp::spawn_with(&database, &[("retry_max_attempts", "2")]).await;
    in_chromium(&program, &app, Duration::from_secs(120), async |c| {
        flows(c, &app).await
    })
    .await;
}

async fn flows(c: &Client, app: &TestApp) {
    sign_in(c, app).await;
    let receiver = Receiver::start().await;
    let endpoint_page = create_endpoint_and_test_it(c, &receiver).await;
    replay_a_dead_letter(c, app).await;
    visit_the_other_pages(c, app, &endpoint_page).await;
    sign_out(c, app).await;
}

async fn sign_in(c: &Client, app: &TestApp) {
    c.goto(&format!("{}/", app.url)).await.unwrap();
    assert!(
        c.current_url().await.unwrap().path().ends_with("/ui/login"),
        "signed out: the login page"
    );
    page_with(c, "Sign in to kurir").await;
    check_widths(c, "login").await;
    check_labels(c, "login").await;
    fill(c, "token", "not-the-token").await;
    click(c, "button[type=submit]").await;
    page_with(c, "That token does not work").await;
    fill(c, "token", TOKEN).await;
    click(c, "button[type=submit]").await;
    let page = page_with(c, "Backlog").await;
    assert!(page.contains("Overview"), "{page}");
    let cookie = c.get_named_cookie("kurir_session").await.unwrap();
    assert_eq!(cookie.http_only(), Some(true));
    assert_eq!(format!("{:?}", cookie.same_site()), "Some(Strict)");
}

async fn create_endpoint_and_test_it(c: &Client, receiver: &Receiver) -> String {
    click(c, "nav a[href='/ui/endpoints']").await;
    page_with(c, "No endpoint yet").await;
    click(c, "a[href='/ui/endpoints/new']").await;
    page_with(c, "New endpoint").await;
    check_labels(c, "new endpoint").await;
    fill(c, "url", &receiver.url).await;
    fill(c, "description", "Billing partner").await;
    fill(c, "event_types", "order.*").await;
    click(c, "main form[action='/ui/endpoints'] button").await;
    let page = page_with(c, "Signing secret").await;
    assert!(
        page.contains("Signing secret") && page.contains("whsec_"),
        "the secret, once: {page}"
    );
    let test_form = c.find(Locator::Css("form[action$='/test']")).await.unwrap();
    let action = test_form.attr("action").await.unwrap().unwrap();
    let endpoint_page = action.trim_end_matches("/test").to_owned();
    click(c, "form[action$='/test'] button").await;
    page_with(c, "Test event delivered").await;
    let result = c
        .find(Locator::Id("test-result"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        result.contains("Test event delivered") && result.contains("HTTP 200"),
        "{result}"
    );
    let got = receiver.wait_for(1).await;
    assert_eq!(got[0].json()["event_type"], "kurir.test");
    assert!(
        !text(c).await.contains("whsec_"),
        "the secret is shown only once"
    );
    check_labels(c, "endpoint").await;
    check_widths(c, "endpoint").await;
    endpoint_page
}

async fn replay_a_dead_letter(c: &Client, app: &TestApp) {
    let down = Receiver::start().await;
    down.respond_with(500);
    let failing = app
        .create_endpoint(
            &down.url,
            json!({"description": "Down for maintenance", "event_types": ["invoice.*"]}),
        )
        .await;
    let event_id = app
        .publish("invoice.paid", json!({"invoice": "inv_42"}))
        .await;
    app.wait_for_deliveries(&event_id, "dead_letter").await;
    let base = app.url.clone();
    c.goto(&format!("{base}/ui/dead-letters")).await.unwrap();
    let id = failing["id"].as_str().unwrap();
    // The endpoint filter is its id, typed or pasted (no list of every endpoint to pick from).
    fill(c, "endpoint_id", id).await;
    click(c, "form.filters button[type=submit]").await;
    eventually("the filtered rows", || async {
        let rows = c.find(Locator::Id("rows")).await.ok()?.text().await.ok()?;
        (rows.contains(&event_id) && rows.contains(&down.url)).then_some(())
    })
    .await;
    check_labels(c, "dead letters").await;
    check_widths(c, "dead-letters").await;
    // The bulk replay shows its dry-run count and asks why before doing anything.
    click(c, "#bulk-replay").await;
    page_with(c, "Replay dead letters").await;
    let dry_run = c
        .find(Locator::Id("dry-run"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        dry_run.starts_with("1 dead-lettered delivery matches"),
        "{dry_run}"
    );
    let (_, audit) = app.get("/v1/replays").await;
    assert_eq!(audit["data"], json!([]), "nothing replayed yet");
    check_labels(c, "replay").await;
    check_widths(c, "replay").await;
    down.respond_with(200);
    fill(c, "reason", "partner fixed their TLS certificate").await;
    click(c, "form[action='/ui/dead-letters/replay'] button").await;
    let audit = page_with(c, "partner fixed their TLS certificate").await;
    assert!(
        audit.contains("Replay audit") && audit.contains("partner fixed their TLS certificate"),
        "{audit}"
    );
    app.wait_for_deliveries(&event_id, "sent").await;
    check_widths(c, "audit").await;
    c.goto(&format!("{base}/ui/events/{event_id}"))
        .await
        .unwrap();
    let event = page_with(c, "inv_42").await;
    assert!(
        event.contains("inv_42") && event.contains(&down.url) && event.contains("replay"),
        "{event}"
    );
    check_widths(c, "event").await;
}

/// An hour of history for the screenshots' charts: events every minute, delivered after a
/// varying delay, a few of them after a failed first attempt (SQLite, written as kurir writes).
async fn seed_history(app: &TestApp) {
    let kurir::store::Store::Sqlite(sq) = &app.store else {
        return;
    };
    let endpoint: String =
        sqlx::query_scalar("SELECT id FROM kurir_endpoints ORDER BY created_at LIMIT 1")
            .fetch_one(sq.pool())
            .await
            .unwrap();
    let now = chrono::Utc::now();
    let ts = kurir::store::sqlite_ts;
    for minute in 1..60i64 {
        for n in 0..(3 + (minute * 7) % 11) {
            let at = now - chrono::Duration::seconds(minute * 60 - n * 3);
            let latency = 40 + (minute * 37 + n * 53) % 900;
            let failed_first = (minute + n) % 9 == 0;
            let id: i64 = sqlx::query_scalar(
                "INSERT INTO kurir_outbox (event_type, payload, occurred_at, created_at, dispatched_at) \
                 VALUES ('order.paid', '{}', ?1, ?1, ?1) RETURNING id",
            )
            .bind(ts(at))
            .fetch_one(sq.pool())
            .await
            .unwrap();
            let delivery: i64 = sqlx::query_scalar(
                "INSERT INTO kurir_deliveries (outbox_id, event_id, endpoint_id, status, attempt_count, sent_at, created_at) \
                 SELECT id, event_id, ?2, 'sent', ?3, ?4, created_at FROM kurir_outbox WHERE id = ?1 RETURNING id",
            )
            .bind(id)
            .bind(&endpoint)
            .bind(if failed_first { 2 } else { 1 })
            .bind(ts(at + chrono::Duration::milliseconds(latency)))
            .fetch_one(sq.pool())
            .await
            .unwrap();
            let attempts: &[(i64, Option<i64>)] = if failed_first {
                &[(503, Some(0)), (200, None)]
            } else {
                &[(200, None)]
            };
            for (i, (code, _)) in attempts.iter().enumerate() {
                sqlx::query(
                    "INSERT INTO kurir_attempts (delivery_id, attempt, started_at, duration_ms, status_code) VALUES (?1, ?2, ?3, ?4, ?5)",
                )
                .bind(delivery)
                .bind(i as i64 + 1)
                .bind(ts(at + chrono::Duration::milliseconds(latency * (i as i64 + 1) / 2)))
                .bind(20 + (latency % 180))
                .bind(code)
                .execute(sq.pool())
                .await
                .unwrap();
            }
        }
    }
}

async fn visit_the_other_pages(c: &Client, app: &TestApp, endpoint_page: &str) {
    if std::env::var_os("KURIR_SCREENSHOTS").is_some() {
        seed_history(app).await;
    }
    let base = &app.url;
    c.goto(&format!("{base}/ui/")).await.unwrap();
    let overview = page_with(c, "Success ratio").await;
    assert!(
        overview.contains("Delivery attempts") && overview.contains("Success ratio"),
        "{overview}"
    );
    check_widths(c, "overview").await;
    for (path, expect, name) in [
        ("/ui/endpoints", "Billing partner", "endpoints"),
        ("/ui/events", "Aggregate id", "events"),
        ("/ui/inbox", "No source yet", "inbox"),
        ("/docs", "test_endpoint", "docs"),
    ] {
        c.goto(&format!("{base}{path}")).await.unwrap();
        let page = text(c).await;
        assert!(page.contains(expect), "{path}: {page}");
        check_labels(c, path).await;
        check_widths(c, name).await;
    }
    // The search form answers through htmx with the rows only, and keeps the URL bookmarkable.
    c.goto(&format!("{base}/ui/events")).await.unwrap();
    fill(c, "event_type", "order.none").await;
    click(c, "form.filters button[type=submit]").await;
    eventually("htmx to swap the rows", || async {
        let rows = c.find(Locator::Id("rows")).await.ok()?.text().await.ok()?;
        rows.contains("No event matches").then_some(())
    })
    .await;
    assert!(c
        .current_url()
        .await
        .unwrap()
        .query()
        .unwrap_or_default()
        .contains("event_type=order.none"));
    assert_eq!(
        c.find_all(Locator::Css("header.top")).await.unwrap().len(),
        1,
        "one page, not one inside another"
    );
    c.goto(&format!("{base}{endpoint_page}")).await.unwrap();
    let focusable: Value = c
        .execute(
            "document.querySelector('#url').focus(); return document.activeElement.id;",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(focusable, "url", "form fields take keyboard focus");
}

async fn sign_out(c: &Client, app: &TestApp) {
    click(c, "form[action='/ui/logout'] button").await;
    page_with(c, "You are signed out.").await;
    c.goto(&format!("{}/ui/endpoints", app.url)).await.unwrap();
    assert!(
        c.current_url().await.unwrap().path().ends_with("/ui/login"),
        "the session is gone"
    );
}

/// Regression: the Filter button refreshes the rows through htmx, and "Replay all that match…"
/// kept the filter of the first page load, so the dry run counted (and the replay replayed)
/// every dead letter while the list showed one endpoint's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_replay_after_an_htmx_filter_carries_the_filter_shown() {
    let Some(program) = chromedriver() else {
        return;
    };
    let database = TestDb::unmigrated(Backend::Sqlite).await.unwrap();
    let app = TestApp::spawn_with(&database, &[("retry_max_attempts", "1")]).await;
    in_chromium(&program, &app, Duration::from_secs(120), async |c| {
        sign_in(c, &app).await;
        filter_then_follow_the_bulk_replay_link(c, &app).await;
    })
    .await;
}

async fn filter_then_follow_the_bulk_replay_link(c: &Client, app: &TestApp) {
    let (a, b) = (Receiver::start().await, Receiver::start().await);
    a.respond_with(500);
    b.respond_with(500);
    let ea = app.create_endpoint(&a.url, json!({})).await;
    let eb = app.create_endpoint(&b.url, json!({})).await;
    let event_id = app.publish("invoice.paid", json!({"invoice": 1})).await;
    app.wait_for_deliveries(&event_id, "dead_letter").await;
    let base = &app.url;
    c.goto(&format!("{base}/ui/dead-letters")).await.unwrap();
    page_with(c, &b.url).await;
    // Each filter change goes through htmx; the confirm page must carry the one shown.
    for (endpoint, shown, hidden) in [(&ea, &a.url, &b.url), (&eb, &b.url, &a.url)] {
        let id = endpoint["id"].as_str().unwrap();
        fill(c, "endpoint_id", id).await;
        click(c, "form.filters button[type=submit]").await;
        eventually("the rows of one endpoint", || async {
            let rows = c.find(Locator::Id("rows")).await.ok()?.text().await.ok()?;
            (rows.contains(shown.as_str()) && !rows.contains(hidden.as_str())).then_some(())
        })
        .await;
        assert!(
            c.current_url()
                .await
                .unwrap()
                .query()
                .unwrap_or_default()
                .contains(id),
            "the address bar carries the filter"
        );
        click(c, "#bulk-replay").await;
        let dry_run = page_with(c, "Replay dead letters").await;
        assert!(
            dry_run.contains("1 dead-lettered delivery matches")
                && dry_run.contains(shown.as_str()),
            "the dry run of the filter shown: {dry_run}"
        );
        c.back().await.unwrap();
        page_with(c, "Dead letters").await;
    }
    // The replay itself takes the filter shown: b's dead letter only.
    click(c, "#bulk-replay").await;
    page_with(c, "Replay dead letters").await;
    fill(c, "reason", "b is back").await;
    click(c, "form[action='/ui/dead-letters/replay'] button").await;
    page_with(c, "b is back").await;
    let (_, audit) = app.get("/v1/replays").await;
    assert_eq!(
        audit["data"][0]["filter"],
        json!({"status": "dead_letter", "endpoint_id": eb["id"]})
    );
    assert_eq!(audit["data"][0]["count"], 1);

    // Issue 29: the subscriber filter, through htmx, into the address bar and the dry run.
    let c_receiver = Receiver::start().await;
    c_receiver.respond_with(500);
    let subscriber = "cus/x&y+z%1";
    let (status, body) = app
        .post("/v1/subscribers", json!({"id": subscriber, "name": "Toko"}))
        .await;
    assert!(status.is_success(), "{body}");
    app.create_endpoint(&c_receiver.url, json!({"subscriber_id": subscriber}))
        .await;
    let body = json!({"event_type": "invoice.paid", "data": {"n": 2}, "subscriber_id": subscriber});
    let (_, sent) = app.post("/v1/events", body).await;
    let event_c = sent["event_id"].as_str().unwrap().to_owned();
    app.wait_for_deliveries(&event_c, "dead_letter").await;
    c.goto(&format!("{base}/ui/dead-letters")).await.unwrap();
    page_with(c, &c_receiver.url).await;
    fill(c, "subscriber_id", subscriber).await;
    click(c, "form.filters button[type=submit]").await;
    eventually("the rows of one subscriber", || async {
        let rows = c.find(Locator::Id("rows")).await.ok()?.text().await.ok()?;
        (rows.contains(c_receiver.url.as_str()) && !rows.contains(a.url.as_str())).then_some(())
    })
    .await;
    let encoded: String = url::form_urlencoded::byte_serialize(subscriber.as_bytes()).collect();
    let query = c
        .current_url()
        .await
        .unwrap()
        .query()
        .unwrap_or_default()
        .to_owned();
    assert!(
        query.contains(&format!("subscriber_id={encoded}")),
        "the address bar carries the subscriber: {query}"
    );
    click(c, "#bulk-replay").await;
    let dry_run = page_with(c, "Replay dead letters").await;
    assert!(
        dry_run.contains("1 dead-lettered delivery matches") && dry_run.contains(subscriber),
        "the dry run of the subscriber's dead letters: {dry_run}"
    );
}

/// Issue 33: a viewer, signed in through the login form with a named token, sees who is signed
/// in and no control that changes anything on any page (after an htmx filter too), and a form
/// forged from its own page, with the page's CSRF token, is refused by the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_viewers_dashboard_shows_no_control_and_the_server_refuses_a_forged_form() {
    let Some(program) = chromedriver() else {
        return;
    };
    let database = TestDb::unmigrated(Backend::Sqlite).await.unwrap();
    let app = TestApp::spawn_with(&database, &[("retry_max_attempts", "1")]).await;
    in_chromium(&program, &app, Duration::from_secs(120), async |c| {
        viewer_flow(c, &app).await
    })
    .await;
}

/// The controls on the page that would change something: forms that post (but signing out),
/// and the links to a form's page.
async fn changing_controls(c: &Client) -> Value {
    c.execute(
        "return [...document.querySelectorAll('form')]
            .filter(f => f.method === 'post' && f.getAttribute('action') !== '/ui/logout')
            .map(f => f.getAttribute('action'))
            .concat([...document.querySelectorAll('a[href^=\"/ui/endpoints/new\"], a[href^=\"/ui/dead-letters/replay\"]')]
            .map(a => a.getAttribute('href')));",
        vec![],
    )
    .await
    .unwrap()
}

async fn viewer_flow(c: &Client, app: &TestApp) {
    let down = Receiver::start().await;
    down.respond_with(500);
    let endpoint = app.create_endpoint(&down.url, json!({})).await;
    let endpoint_id = endpoint["id"].as_str().unwrap();
    let event_id = app.publish("invoice.paid", json!({"invoice": 7})).await;
    app.wait_for_deliveries(&event_id, "dead_letter").await;
    let (_, created) = app
        .post("/v1/tokens", json!({"name": "auditor", "role": "viewer"}))
        .await;
    let viewer = created["token"].as_str().unwrap();
    // An event the catalog refused: its page and the catalog's offer a recheck to operators only.
    let entry =
        json!({"schema": {"properties": {"n": {"type": "integer"}}}, "examples": [{"n": 1}]});
    let put = app.request(
        reqwest::Method::PUT,
        "/v1/event-types/invoice.sent/versions/1",
    );
    assert!(app.send(put.body(entry.to_string())).await.0.is_success());
    let kurir::store::Store::Sqlite(sqlite) = &app.store else {
        unreachable!("a SQLite app")
    };
    sqlx::query(
        "INSERT INTO kurir_outbox (event_id, event_type, payload) \
         VALUES ('refused-for-viewer', 'invoice.sent', '{\"n\":\"x\"}')",
    )
    .execute(sqlite.pool())
    .await
    .unwrap();
    eventually("the SQL row to be refused", || async {
        let (_, e) = app.get("/v1/events/refused-for-viewer").await;
        e["refused_reason"].is_string().then_some(())
    })
    .await;

    let base = &app.url;
    c.goto(&format!("{base}/ui/login")).await.unwrap();
    fill(c, "token", viewer).await;
    click(c, "button[type=submit]").await;
    page_with(c, "Backlog").await;
    let who = c
        .find(Locator::Id("signed-in"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(who.contains("auditor") && who.contains("viewer"), "{who}");
    for path in [
        "/ui/".to_owned(),
        "/ui/endpoints".to_owned(),
        format!("/ui/endpoints/{endpoint_id}"),
        format!("/ui/events/{event_id}"),
        "/ui/dead-letters".to_owned(),
        "/ui/audit".to_owned(),
        "/ui/inbox".to_owned(),
        "/ui/event-types".to_owned(),
        "/ui/events/refused-for-viewer".to_owned(),
    ] {
        c.goto(&format!("{base}{path}")).await.unwrap();
        page_with(c, "you can look at everything here, but not change it").await;
        assert_eq!(changing_controls(c).await, json!([]), "{path}");
    }
    // The rows an htmx filter swaps in carry no replay link either.
    c.goto(&format!("{base}/ui/dead-letters")).await.unwrap();
    fill(c, "endpoint_id", endpoint_id).await;
    click(c, "form.filters button[type=submit]").await;
    eventually("the filtered rows", || async {
        let url = c.current_url().await.ok()?;
        url.query()?.contains(endpoint_id).then_some(())
    })
    .await;
    page_with(c, &event_id).await;
    assert_eq!(
        changing_controls(c).await,
        json!([]),
        "after the htmx filter"
    );

    // The form a viewer's page does not show, posted from that page with its CSRF token.
    c.goto(&format!("{base}/ui/events/{event_id}"))
        .await
        .unwrap();
    let status = c
        .execute(
            "const csrf = document.querySelector('form[action=\"/ui/logout\"] input[name=csrf]').value;
             return fetch(arguments[0], {method: 'POST', body: new URLSearchParams({csrf, reason: 'forged'})})
                 .then(r => r.status);",
            vec![json!(format!("/ui/events/{event_id}/replay"))],
        )
        .await
        .unwrap();
    assert_eq!(status, json!(403), "the server refuses a viewer's form");
    let (_, audit) = app.get("/v1/replays").await;
    assert_eq!(audit["data"], json!([]), "nothing replayed");
    assert_eq!(down.received().len(), 1, "nothing sent again");

    // Issue 33, item 3: the endpoint's settings and Delete, a dead letter's own replay and an
    // inbox event's retry are neither shown to a viewer nor accepted from one.
    let failing_app = Receiver::start().await;
    failing_app.respond_with(500);
    crate::gateway::create_source(
        app,
        "viewed",
        "standard-webhooks",
        crate::gateway::PARTNER_SECRET,
        &failing_app.url,
    )
    .await;
    let webhook = crate::gateway::standard_webhook("msg_viewed", "invoice.paid");
    crate::gateway::post_inbox(app, "viewed", &webhook).await;
    let inbox_event = "/v1/inbox/sources/viewed/events/msg_viewed";
    eventually("the forward to fail", || async {
        let (_, e) = app.get(inbox_event).await;
        (e["status"] == "failed").then_some(())
    })
    .await;
    for path in [
        "/ui/inbox/viewed".to_owned(),
        "/ui/inbox/viewed/events/msg_viewed".to_owned(),
        format!("/ui/dead-letters/replay-one?event_id={event_id}&endpoint_id={endpoint_id}"),
    ] {
        c.goto(&format!("{base}{path}")).await.unwrap();
        let page = text(c).await;
        assert_eq!(changing_controls(c).await, json!([]), "{path}: {page}");
    }
    c.goto(&format!("{base}/ui/endpoints/{endpoint_id}"))
        .await
        .unwrap();
    page_with(c, "Delivery settings").await;
    for (action, extra) in [
        (
            format!("/ui/endpoints/{endpoint_id}/settings"),
            json!({"retry_max_attempts": "3"}),
        ),
        (
            format!("/ui/endpoints/{endpoint_id}/delete"),
            json!({"confirm": "yes"}),
        ),
        (
            "/ui/inbox/viewed/events/msg_viewed/retry".to_owned(),
            json!({}),
        ),
    ] {
        let status = c
            .execute(
                "const csrf = document.querySelector('form[action=\"/ui/logout\"] input[name=csrf]').value;
                 return fetch(arguments[0], {method: 'POST', body: new URLSearchParams({csrf, ...arguments[1]})})
                     .then(r => r.status);",
                vec![json!(action), extra],
            )
            .await
            .unwrap();
        assert_eq!(status, json!(403), "{action}");
    }
    let (status, shown) = app.get(&format!("/v1/endpoints/{endpoint_id}")).await;
    assert_eq!(status, reqwest::StatusCode::OK, "not deleted");
    assert!(
        shown["retry_max_attempts"].is_null(),
        "not changed: {shown}"
    );
    let (_, e) = app.get(inbox_event).await;
    assert_eq!(e["status"], "failed", "not retried: {e}");
    assert_eq!(e["retries"], json!([]), "{e}");
}

/// The Event types page: the catalog with each version's schema and its events of the last 24
/// hours, an event the relay refused with its reason, and the recheck that delivers it once the
/// schema is fixed (issue 30).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_catalog_page_shows_schemas_and_refusals_and_rechecks_them() {
    let Some(program) = chromedriver() else {
        return;
    };
    let database = TestDb::unmigrated(Backend::Sqlite).await.unwrap();
    let app = TestApp::spawn(&database).await;
    in_chromium(&program, &app, Duration::from_secs(120), async |c| {
        catalog_flow(c, &app).await
    })
    .await;
}

async fn catalog_flow(c: &Client, app: &TestApp) {
    let receiver = Receiver::start().await;
    app.create_endpoint(&receiver.url, json!({})).await;
    let entry = |total: Value| {
        json!({
            "description": "An order was paid in full.",
            "schema": {"type": "object", "required": ["total"], "properties": {"total": total}},
            "examples": [{"total": 250000}],
        })
    };
    let put = |body: Value| async move {
        let req = app.request(
            reqwest::Method::PUT,
            "/v1/event-types/order.paid/versions/1",
        );
        let (status, answer) = app.send(req.body(body.to_string())).await;
        assert!(status.is_success(), "{answer}");
    };
    put(entry(json!({"type": "integer"}))).await;
    app.publish("order.paid", json!({"total": 5})).await;
    let kurir::store::Store::Sqlite(sqlite) = &app.store else {
        unreachable!("a SQLite app")
    };
    sqlx::query(
        "INSERT INTO kurir_outbox (event_id, event_type, payload) \
         VALUES ('from-sql', 'order.paid', '{\"total\":\"250000\"}')",
    )
    .execute(sqlite.pool())
    .await
    .unwrap();
    eventually("the SQL row to be refused", || async {
        let (_, e) = app.get("/v1/events/from-sql").await;
        e["refused_reason"].is_string().then_some(())
    })
    .await;
    sign_in(c, app).await;
    c.goto(&format!("{}/ui/events/from-sql", app.url))
        .await
        .unwrap();
    let event = page_with(c, "Never delivered").await;
    assert!(
        event.contains(r#"schema: /total: "250000" is not of type "integer""#),
        "{event}"
    );
    c.goto(&format!("{}/ui/event-types", app.url))
        .await
        .unwrap();
    let page = page_with(c, "Refused events").await;
    assert!(
        page.contains("order.paid") && page.contains("checked"),
        "{page}"
    );
    assert!(
        page.contains("1 event(s) written with SQL were refused"),
        "{page}"
    );
    check_labels(c, "/ui/event-types").await;
    check_widths(c, "catalog").await;
    c.goto(&format!("{}/ui/event-types/order.paid/1", app.url))
        .await
        .unwrap();
    let one = page_with(c, "Schema of data").await;
    assert!(
        one.contains("\"required\"") && one.contains("250000"),
        "{one}"
    );
    check_widths(c, "catalog-entry").await;

    put(entry(json!({"type": ["integer", "string"]}))).await;
    c.goto(&format!("{}/ui/event-types", app.url))
        .await
        .unwrap();
    click(c, "form[action='/ui/events/recheck'] button[type=submit]").await;
    let done = page_with(c, "now pass").await;
    assert!(
        done.contains("Checked 1 refused events: 1 now pass"),
        "{done}"
    );
    app.wait_for_deliveries("from-sql", "sent").await;
}

/// Issue 29: the Subscribers page in the navigation, searched by id, and a subscriber's page
/// with its endpoints, backlog and failures, at 1280 and 390 px with a 120-character id (which
/// must wrap, not overflow), every control labelled; disabling, enabling and deleting it
/// through its controls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_subscribers_pages_fit_both_widths_and_their_controls_work() {
    let Some(program) = chromedriver() else {
        return;
    };
    let database = TestDb::unmigrated(Backend::Sqlite).await.unwrap();
    let app = TestApp::spawn(&database).await;
    in_chromium(&program, &app, Duration::from_secs(120), async |c| {
        subscribers_flow(c, &app).await
    })
    .await;
}

async fn subscribers_flow(c: &Client, app: &TestApp) {
    let (up, down) = (Receiver::start().await, Receiver::start().await);
    down.respond_with(500);
    let id = format!("cus/{}", "8Hq2".repeat(29));
    let (status, body) = app
        .post(
            "/v1/subscribers",
            json!({"id": id, "name": "Toko Makmur", "metadata": {"plan": "pro"}}),
        )
        .await;
    assert!(status.is_success(), "{body}");
    app.create_endpoint(
        &up.url,
        json!({"subscriber_id": id, "description": "Their ERP"}),
    )
    .await;
    let failing = json!({"subscriber_id": id, "retry_initial_delay_ms": 3_600_000, "retry_max_delay_ms": 3_600_000});
    app.create_endpoint(&down.url, failing).await;
    let event = json!({"event_type": "order.paid", "data": {"n": 1}, "subscriber_id": id});
    let (_, sent) = app.post("/v1/events", event).await;
    let event_id = sent["event_id"].as_str().unwrap().to_owned();
    eventually("a retrying delivery", || async {
        let (_, e) = app.get(&format!("/v1/events/{event_id}")).await;
        let deliveries = e["deliveries"].as_array()?;
        deliveries
            .iter()
            .any(|d| d["status"] == "retrying")
            .then_some(())
    })
    .await;

    sign_in(c, app).await;
    click(c, "nav a[href='/ui/subscribers']").await;
    page_with(c, "Toko Makmur").await;
    check_labels(c, "subscribers").await;
    check_widths(c, "subscribers").await;
    fill(c, "q", &id).await;
    click(c, "form[role=search] button[type=submit]").await;
    eventually("the search to answer", || async {
        let url = c.current_url().await.ok()?;
        url.query()?.starts_with("q=").then_some(())
    })
    .await;
    click(c, "table a.mono").await;
    let page = page_with(c, "Recent failures").await;
    assert!(
        page.contains("Their ERP") && page.contains(&down.url) && page.contains("HTTP 500"),
        "{page}"
    );
    check_labels(c, "subscriber").await;
    check_widths(c, "subscriber").await;

    click(c, "form[action$='/enabled'] button").await;
    page_with(c, "Enable subscriber").await;
    let (_, s) = app.get("/v1/subscribers?name=Toko+Makmur").await;
    assert_eq!(s["data"][0]["enabled"], false, "{s}");
    click(c, "form[action$='/enabled'] button").await;
    page_with(c, "Disable subscriber").await;
    fill(c, "confirm", &id).await;
    click(c, "form[action$='/delete'] button").await;
    let gone = page_with(c, "its id stays taken").await;
    assert!(gone.contains("deleted"), "{gone}");
    check_widths(c, "subscriber-deleted").await;
    let (_, s) = app.get("/v1/subscribers?name=Toko+Makmur").await;
    assert_eq!(s["data"], json!([]), "deleted: {s}");
}

/// Issue 33, item 3: what the operator could not see or do. The events list says what became
/// of each event's deliveries (not "Fanned out: yes"); a dead letter is replayed from its own
/// row after a dry run, with a reason, audited; the endpoint page shows the last error with its
/// time and as past once the endpoint recovered, shows and changes its delivery settings, and
/// deletes it; an inbox event's page keeps every forward attempt across a retry, which it
/// names with who retried. All through the real forms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_sees_outcomes_replays_one_dead_letter_edits_settings_and_deletes_an_endpoint()
{
    let Some(program) = chromedriver() else {
        return;
    };
    let database = TestDb::unmigrated(Backend::Sqlite).await.unwrap();
    let app = TestApp::spawn_with(&database, &[("retry_max_attempts", "1")]).await;
    in_chromium(&program, &app, Duration::from_secs(120), async |c| {
        sign_in(c, &app).await;
        operator_controls(c, &app).await;
        inbox_history(c, &app).await;
    })
    .await;
}

async fn operator_controls(c: &Client, app: &TestApp) {
    let ok = Receiver::start().await;
    let down = Receiver::start().await;
    down.respond_with(500);
    app.create_endpoint(&ok.url, json!({})).await;
    let endpoint = app.create_endpoint(&down.url, json!({})).await;
    let endpoint_id = endpoint["id"].as_str().unwrap().to_owned();
    let event_id = app.publish("invoice.paid", json!({"invoice": 9})).await;
    eventually("one delivery sent and one dead-lettered", || async {
        let (_, e) = app.get(&format!("/v1/events/{event_id}")).await;
        let statuses: Vec<String> = e["deliveries"]
            .as_array()?
            .iter()
            .map(|d| d["status"].as_str().unwrap_or_default().to_owned())
            .collect();
        (statuses.contains(&"sent".into()) && statuses.contains(&"dead_letter".into()))
            .then_some(())
    })
    .await;
    let base = &app.url;

    // The events list: the outcome, in words.
    c.goto(&format!("{base}/ui/events")).await.unwrap();
    let list = page_with(c, &event_id).await;
    assert!(list.contains("1 sent · 1 dead letter"), "{list}");
    assert!(!list.contains("Fanned out"), "{list}");

    // The endpoint page while it fails: the last error with its time.
    c.goto(&format!("{base}/ui/endpoints/{endpoint_id}"))
        .await
        .unwrap();
    page_with(c, "Delivery settings").await;
    let last_error = c.find(Locator::Id("last-error")).await.unwrap();
    let failing = last_error.text().await.unwrap();
    assert!(
        failing.contains("UTC: HTTP 500") && !failing.contains("recovered"),
        "{failing}"
    );
    c.goto(&format!("{base}/ui/endpoints")).await.unwrap();
    let shown = last_errors(c).await;
    assert!(
        shown.contains("HTTP 500") && shown.contains("UTC") && !shown.contains("recovered"),
        "the list shows the error with its time: {shown}"
    );

    // One dead letter's replay, from its row: a dry run, then a reason.
    down.respond_with(200);
    c.goto(&format!("{base}/ui/dead-letters")).await.unwrap();
    page_with(c, &event_id).await;
    click(c, "a[href^='/ui/dead-letters/replay-one']").await;
    let dry_run = page_with(c, "Replay a dead letter").await;
    assert!(
        dry_run.contains("1 delivery of event") && dry_run.contains(&down.url),
        "{dry_run}"
    );
    fill(c, "reason", "partner is back").await;
    click(c, "form[action$='/replay'] button").await;
    page_with(c, "Deliveries").await;
    let (_, audit) = app.get("/v1/replays").await;
    let replay = &audit["data"][0];
    assert_eq!(replay["reason"], "partner is back", "{audit}");
    assert_eq!(replay["via"], "dashboard", "{audit}");
    assert_eq!(replay["count"], 1, "{audit}");
    assert_eq!(replay["filter"]["endpoint_id"], endpoint_id, "{audit}");
    down.wait_for(2).await;

    // Recovered: the last error is shown as past.
    eventually("the endpoint page to show the recovery", || async {
        c.goto(&format!("{base}/ui/endpoints/{endpoint_id}"))
            .await
            .ok()?;
        let text = c
            .find(Locator::Id("last-error"))
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        (text.contains("recovered") && text.contains("HTTP 500")).then_some(())
    })
    .await;
    // The endpoints list says so too, in its last-error column.
    c.goto(&format!("{base}/ui/endpoints")).await.unwrap();
    let shown = last_errors(c).await;
    assert!(
        shown.contains("recovered") && shown.contains("HTTP 500") && shown.contains("UTC"),
        "{shown}"
    );
    c.goto(&format!("{base}/ui/endpoints/{endpoint_id}"))
        .await
        .unwrap();
    page_with(c, "Delivery settings").await;

    // The delivery settings, changed through the form, then one cleared again.
    assert!(text(c).await.contains("global setting"));
    fill(c, "retry_max_attempts", "7").await;
    fill(c, "request_timeout_ms", "3000").await;
    fill(c, "rate_limit_per_second", "5").await;
    c.find(Locator::Css("#ordering-choice option[value=aggregate]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    click(c, "form[action$='/settings'] button").await;
    let settings = page_with(c, "5 / s").await;
    assert!(settings.contains("3000 ms"), "{settings}");
    let (_, shown) = app.get(&format!("/v1/endpoints/{endpoint_id}")).await;
    assert_eq!(shown["retry_max_attempts"], 7, "{shown}");
    assert_eq!(shown["request_timeout_ms"], 3000, "{shown}");
    assert_eq!(shown["rate_limit_per_second"], 5, "{shown}");
    assert_eq!(shown["ordering"], "aggregate", "{shown}");
    fill(c, "retry_max_attempts", "").await;
    click(c, "form[action$='/settings'] button").await;
    eventually("the override cleared", || async {
        let (_, shown) = app.get(&format!("/v1/endpoints/{endpoint_id}")).await;
        shown["retry_max_attempts"].is_null().then_some(())
    })
    .await;
    // A number the API refuses is named.
    fill(c, "retry_max_attempts", "99").await;
    click(c, "form[action$='/settings'] button").await;
    page_with(c, "retry_max_attempts").await;

    // Delete, confirmed.
    c.goto(&format!("{base}/ui/endpoints/{endpoint_id}"))
        .await
        .unwrap();
    page_with(c, "Delete endpoint").await;
    click(c, "form[action$='/delete'] input[name=confirm]").await;
    click(c, "form[action$='/delete'] button").await;
    page_with(c, "Endpoints").await;
    let (status, _) = app.get(&format!("/v1/endpoints/{endpoint_id}")).await;
    assert_eq!(status, reqwest::StatusCode::NOT_FOUND);
}

async fn inbox_history(c: &Client, app: &TestApp) {
    let target = Receiver::start().await;
    target.respond_with(500);
    crate::gateway::create_source(
        app,
        "billing",
        "standard-webhooks",
        crate::gateway::PARTNER_SECRET,
        &target.url,
    )
    .await;
    let webhook = crate::gateway::standard_webhook("msg_ui", "invoice.paid");
    let (status, _) = crate::gateway::post_inbox(app, "billing", &webhook).await;
    assert_eq!(status, reqwest::StatusCode::ACCEPTED);
    let path = "/v1/inbox/sources/billing/events/msg_ui";
    eventually("the forward to fail", || async {
        let (_, e) = app.get(path).await;
        (e["status"] == "failed").then_some(())
    })
    .await;
    let base = &app.url;
    c.goto(&format!("{base}/ui/inbox/billing")).await.unwrap();
    page_with(c, "msg_ui").await;
    click(c, "a[href='/ui/inbox/billing/events/msg_ui']").await;
    let failed = page_with(c, "Inbox event").await;
    assert!(
        failed.contains("attempt 1") && failed.contains("500"),
        "{failed}"
    );
    target.respond_with(200);
    click(c, "form[action$='/retry'] button").await;
    let page = eventually("the event forwarded after the retry", || async {
        c.refresh().await.ok()?;
        let page = text(c).await;
        page.contains("completed").then_some(page)
    })
    .await;
    assert!(
        page.contains("Retry 1 by admin via dashboard") && page.contains("retry 1, attempt 1"),
        "{page}"
    );
    let count = c.find(Locator::Id("attempt-count")).await.unwrap();
    let count = count.text().await.unwrap();
    assert!(count.starts_with("2 "), "both attempts counted: {count}");
}

/// The endpoints list's last-error cells, one line each.
async fn last_errors(c: &Client) -> String {
    let mut shown = Vec::new();
    for cell in c.find_all(Locator::Css("td.last-error")).await.unwrap() {
        shown.push(cell.text().await.unwrap());
    }
    shown.join("\n")
}
