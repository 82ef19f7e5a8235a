//! The dashboard on a phone: at 390 px, in a real headless Chromium, every page shows every
//! navigation item and every table's key columns (the cells marked `key` in the markup) inside
//! the viewport, neither clipped by a scrolling box nor hidden. "No horizontal overflow" alone
//! passes a page whose navigation or table scrolls its content off-screen.
//!
//! Every table a page draws must mark its key columns, and a row's key cells must sit under the
//! key headings: a table added without them fails here. An action a row offers (a button in
//! it, such as a dead letter's replay) is in sight too: hidden, the phone cannot do it at all.

use std::time::Duration;

use fantoccini::{Client, Locator};
use reqwest::Method;
use serde_json::{json, Value};

use crate::api::support::{eventually, Backend, Receiver, TestApp, TestDb, TOKEN};
use crate::browser::{chromedriver, click, fill, in_chromium, page_with};
use crate::gateway::{create_source, post_inbox, standard_webhook, PARTNER_SECRET};

/// A phone's width in CSS pixels (an iPhone 12 to 15).
const PHONE: u32 = 390;

/// The sections whose list [`seed`] fills, so that their tables are checked with rows.
const LISTS: [&str; 6] = [
    "/ui/endpoints",
    "/ui/events",
    "/ui/event-types",
    "/ui/dead-letters",
    "/ui/audit",
    "/ui/inbox",
];

/// What the page shows wrongly at this width, and how many tables and rows it checked. A
/// visible element has a box, is not `visibility: hidden`, lies within the viewport's width,
/// and no ancestor that clips (any `overflow` but `visible`) cuts it off.
const CHECK: &str = r#"
const problems = [];
const width = document.documentElement.clientWidth;
const name = (el) => (el.innerText || el.getAttribute('aria-label') || el.tagName).trim().slice(0, 40);
function unseen(el) {
  const r = el.getBoundingClientRect();
  if (r.width < 1 || r.height < 1) return 'is not displayed';
  if (getComputedStyle(el).visibility === 'hidden') return 'is invisible';
  if (r.left < -0.5 || r.right > width + 0.5)
    return `lies outside the viewport (${Math.round(r.left)} to ${Math.round(r.right)} of ${width} px)`;
  for (let a = el.parentElement; a && a !== document.documentElement; a = a.parentElement) {
    const s = getComputedStyle(a);
    if (s.overflowX === 'visible' && s.overflowY === 'visible') continue;
    const b = a.getBoundingClientRect();
    if (r.left < b.left - 0.5 || r.right > b.right + 0.5 || r.top < b.top - 0.5 || r.bottom > b.bottom + 0.5)
      return `is cut off by a scrolling <${a.tagName.toLowerCase()} class="${a.className}">`;
  }
  return null;
}
function check(el, what) {
  const why = unseen(el);
  if (why) problems.push(`${what} '${name(el)}' ${why}`);
}
document.querySelectorAll('header nav a, header form button').forEach((a) => check(a, 'navigation item'));
const tables = [...document.querySelectorAll('main table')];
let rows = 0;
tables.forEach((table, t) => {
  const heads = [...table.querySelectorAll('thead th')];
  const keys = heads.flatMap((th, i) => th.classList.contains('key') ? [i] : []);
  if (keys.length === 0) problems.push(`table ${t + 1} (${heads.map(name).join(', ')}) marks no key column`);
  keys.forEach((i) => check(heads[i], `table ${t + 1}'s key heading`));
  table.querySelectorAll('tbody tr').forEach((tr) => {
    rows += 1;
    const cells = [...tr.children];
    const marked = cells.flatMap((td, i) => td.classList.contains('key') ? [i] : []);
    if (marked.join() !== keys.join())
      problems.push(`table ${t + 1}: a row's key cells are columns ${marked} but its key headings ${keys}`);
    marked.forEach((i) => check(cells[i], `table ${t + 1}'s key cell (${heads[i] ? name(heads[i]) : i})`));
    tr.querySelectorAll('a.button, button').forEach((b) => check(b, `table ${t + 1}'s row action`));
  });
});
if (document.documentElement.scrollWidth > window.innerWidth)
  problems.push(`the page is ${document.documentElement.scrollWidth} px wide in a ${window.innerWidth} px window`);
return { problems, tables: tables.length, rows, width: window.innerWidth };
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_page_at_390_px_shows_every_nav_item_and_every_tables_key_columns() {
    let Some(program) = chromedriver() else {
        return;
    };
    let database = TestDb::unmigrated(Backend::Sqlite).await.unwrap();
    let app = TestApp::spawn_with(&database, &[("retry_max_attempts", "2")]).await;
    let pages = seed(&app).await;
    let problems = in_chromium(&program, &app, Duration::from_secs(120), async |c| {
        visit(c, &app, &pages).await
    })
    .await;
    assert!(
        problems.is_empty(),
        "at {PHONE} px:\n{}",
        problems.join("\n")
    );
}

/// Something in every list: a healthy and a failing endpoint, a sent event and a dead letter
/// with its attempts, a replay in the audit, an event type, and an inbox source with a failed
/// forward. The pages that are not in the navigation: `(path, whether it draws a table)`.
async fn seed(app: &TestApp) -> Vec<(String, bool)> {
    let up = Receiver::start().await;
    let down = Receiver::start().await;
    down.respond_with(500);
    let healthy = app
        .create_endpoint(
            &up.url,
            json!({"description": "Billing partner", "event_types": ["order.*"]}),
        )
        .await;
    let failing = app
        .create_endpoint(
            &down.url,
            json!({"description": "Down for maintenance", "event_types": ["invoice.*"]}),
        )
        .await;
    let sent = app.publish("order.paid", json!({"order": "ord_1"})).await;
    let dead = app
        .publish("invoice.paid", json!({"invoice": "inv_42"}))
        .await;
    // A second failing endpoint and its dead letter, replayed below for the audit's row.
    let also_down = Receiver::start().await;
    also_down.respond_with(503);
    app.create_endpoint(&also_down.url, json!({"event_types": ["refund.*"]}))
        .await;
    let replayed = app
        .publish("refund.issued", json!({"refund": "ref_7"}))
        .await;
    app.wait_for_deliveries(&sent, "sent").await;
    app.wait_for_deliveries(&dead, "dead_letter").await;
    app.wait_for_deliveries(&replayed, "dead_letter").await;
    // One replay for the audit; the other dead letter stays for the dead letters' list.
    let (status, body) = app
        .post(
            &format!("/v1/events/{replayed}/replay"),
            json!({"reason": "the partner says it is back"}),
        )
        .await;
    assert_eq!(status, reqwest::StatusCode::ACCEPTED, "{body}");
    let schema = json!({"description": "An order was paid.", "schema": {"type": "object"},
        "examples": [{"order": "ord_1"}]});
    let put = app
        .request(Method::PUT, "/v1/event-types/order.paid/versions/1")
        .header("content-type", "application/json")
        .body(schema.to_string());
    let (status, body) = app.send(put).await;
    assert!(status.is_success(), "{body}");
    let gone = Receiver::start().await;
    gone.respond_with(410);
    create_source(
        app,
        "billing",
        "standard-webhooks",
        PARTNER_SECRET,
        &gone.url,
    )
    .await;
    let webhook = standard_webhook("msg_2f1c9a7e0b3d4c5e8f6a", "invoice.paid");
    assert_eq!(
        post_inbox(app, "billing", &webhook).await.0,
        reqwest::StatusCode::ACCEPTED
    );
    eventually("the inbox forward to fail", || async {
        let (_, list) = app.get("/v1/inbox/sources/billing/events").await;
        let failed = list["data"]
            .as_array()?
            .iter()
            .any(|e| e["status"] == "failed");
        failed.then_some(())
    })
    .await;
    let healthy = healthy["id"].as_str().unwrap();
    let failing = failing["id"].as_str().unwrap();
    vec![
        (format!("/ui/endpoints/{healthy}"), false),
        (format!("/ui/endpoints/{failing}"), false),
        ("/ui/endpoints/new".to_owned(), false),
        (format!("/ui/events/{dead}"), true),
        (format!("/ui/events/{sent}"), true),
        ("/ui/event-types/order.paid/1".to_owned(), false),
        ("/ui/inbox/billing".to_owned(), true),
        ("/ui/dead-letters/replay".to_owned(), false),
        ("/docs".to_owned(), true),
    ]
}

/// Signs in at phone width and checks each navigation page and each of `others`; what is wrong.
async fn visit(c: &Client, app: &TestApp, others: &[(String, bool)]) -> Vec<String> {
    c.set_window_size(PHONE, 844).await.unwrap();
    c.goto(&format!("{}/ui/login", app.url)).await.unwrap();
    page_with(c, "Sign in to kurir").await;
    let mut problems = check(c, "/ui/login", false).await;
    fill(c, "token", TOKEN).await;
    click(c, "button[type=submit]").await;
    page_with(c, "Backlog").await;
    let nav: Value = c
        .execute(
            "return [...document.querySelectorAll('header nav a')].map(a => a.getAttribute('href'));",
            vec![],
        )
        .await
        .unwrap();
    let nav: Vec<(String, bool)> = nav
        .as_array()
        .unwrap()
        .iter()
        .map(|href| href.as_str().unwrap().to_owned())
        .filter(|href| href.starts_with("/ui/"))
        .map(|href| {
            let table = LISTS.contains(&href.as_str());
            (href, table)
        })
        .collect();
    assert!(nav.len() >= 7, "the sections: {nav:?}");
    for (path, table) in nav.iter().chain(others) {
        c.goto(&format!("{}{path}", app.url)).await.unwrap();
        c.find(Locator::Css("main")).await.unwrap();
        problems.extend(check(c, path, *table).await);
    }
    problems
}

/// What the page in `c` shows wrongly at its current width: each navigation item, key heading
/// or key cell that is out of sight, each table that marks no key column.
pub(crate) async fn unseen(c: &Client) -> Vec<String> {
    let found = c.execute(CHECK, vec![]).await.unwrap();
    found["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap().to_owned())
        .collect()
}

/// What is wrong with the page at `path` at phone width, each line naming the page.
async fn check(c: &Client, path: &str, table: bool) -> Vec<String> {
    let found = c.execute(CHECK, vec![]).await.unwrap();
    assert_eq!(found["width"], PHONE, "the window is a phone's width");
    if table {
        assert!(
            found["rows"].as_u64().unwrap() > 0,
            "{path} should show a table with rows for this test to check: {found}"
        );
    }
    let problems = found["problems"].as_array().unwrap();
    // A page that fails fails on many rows alike: its first few lines say why.
    let mut lines: Vec<String> = problems
        .iter()
        .take(8)
        .map(|p| format!("{path}: {}", p.as_str().unwrap()))
        .collect();
    if problems.len() > lines.len() {
        lines.push(format!(
            "{path}: … and {} more",
            problems.len() - lines.len()
        ));
    }
    lines
}
