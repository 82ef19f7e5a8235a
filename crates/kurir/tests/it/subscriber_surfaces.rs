//! Subscribers through the operator's surfaces (issue 29, item 4): the `kurir subscribers`
//! commands, `--subscriber` on `kurir endpoints create` and `kurir events send`, `kurir events
//! show` naming the subscriber; and the dashboard's Subscribers pages over plain HTTP (search,
//! paging, a subscriber's endpoints, backlog and failures, its controls refused to a viewer),
//! on every database. The pages in Chromium are in `browser.rs`.
//!
//! The subscriber ids hold `/`, `?`, `#` and `%`: an id is the sender's own, any visible ASCII,
//! and every link and request must carry it percent-encoded.

use reqwest::header::{COOKIE, LOCATION};
use reqwest::redirect::Policy;
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::api::support::{eventually, on_both_backends, Receiver, TestApp};
use crate::api::tokens::create_token;
use crate::cli::{cli_at, cli_ok};
use crate::ui::{sign_in, sign_in_with};

on_both_backends!(
    the_subscriber_list_pages_every_subscriber_once_whatever_its_id_holds,
    the_cli_manages_subscribers_and_addresses_endpoints_and_events_to_them,
    the_subscriber_pages_search_page_and_show_endpoints_backlog_and_failures,
    a_subscribers_controls_are_refused_to_a_viewer_and_work_for_an_operator,
    subscribers_show_lists_its_actions_newest_first_and_says_how_many_more,
);

/// Regression: on MySQL the list sorted by the select list's `CAST(id AS CHAR)` (the
/// connection's collation, in which `_` sorts before `/`) while its cursor compared the column
/// (binary), so a page ended at `cus_1` and the next one, `id > 'cus_1'`, skipped `cus/2`.
async fn the_subscriber_list_pages_every_subscriber_once_whatever_its_id_holds(app: TestApp) {
    let ids = ["cus/2", "cus_1", "cus-3", "Cus_4", "cus.5", "cus~6"];
    for id in ids {
        create_subscriber(&app, id, "Shop").await;
    }
    let mut listed = Vec::new();
    let mut path = "/v1/subscribers?limit=2".to_owned();
    for _ in 0..ids.len() {
        let (status, page) = app.get(&path).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        for s in page["data"].as_array().unwrap() {
            listed.push(s["id"].as_str().unwrap().to_owned());
        }
        match page["next_cursor"].as_str() {
            Some(cursor) => path = format!("/v1/subscribers?limit=2&cursor={cursor}"),
            None => break,
        }
    }
    let mut want: Vec<String> = ids.iter().map(|s| s.to_string()).collect();
    want.sort();
    let mut got = listed.clone();
    got.sort();
    assert_eq!(
        got, want,
        "every subscriber once, in pages of two: {listed:?}"
    );
}

fn json_of(out: &str) -> Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
}

async fn the_cli_manages_subscribers_and_addresses_endpoints_and_events_to_them(app: TestApp) {
    let (theirs, ours) = (Receiver::start().await, Receiver::start().await);
    let id = "cus/8Hq2?x#1%";
    let created = cli_ok(
        &app,
        &[
            "subscribers",
            "create",
            id,
            "--name",
            "Toko Makmur",
            "--metadata",
            r#"{"plan":"pro"}"#,
            "--json",
        ],
    )
    .await;
    let created = json_of(&created);
    assert_eq!(created["id"], id, "{created}");
    assert_eq!(created["metadata"], json!({"plan": "pro"}));
    assert_eq!(created["enabled"], true);

    let listed = cli_ok(&app, &["subscribers", "list"]).await;
    let header: Vec<&str> = listed.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header[..3], ["ID", "NAME", "ENABLED"], "{listed}");
    assert!(
        listed.contains(id) && listed.contains("Toko Makmur"),
        "{listed}"
    );
    let named = cli_ok(&app, &["subscribers", "list", "--name", "Toko Makmur"]).await;
    assert!(named.contains(id), "{named}");
    let other = cli_ok(&app, &["subscribers", "list", "--name", "Nobody"]).await;
    assert!(!other.contains(id), "{other}");
    let shown = cli_ok(&app, &["subscribers", "show", id]).await;
    assert!(
        shown.contains("Toko Makmur") && shown.contains(r#""plan":"pro""#),
        "{shown}"
    );

    let endpoint = cli_ok(
        &app,
        &[
            "endpoints",
            "create",
            &theirs.url,
            "--subscriber",
            id,
            "--event-type",
            "order.*",
            "--json",
        ],
    )
    .await;
    let endpoint = json_of(&endpoint);
    assert_eq!(endpoint["subscriber_id"], id, "{endpoint}");
    let endpoint_id = endpoint["id"].as_str().unwrap();
    let shown = cli_ok(&app, &["endpoints", "show", endpoint_id]).await;
    assert!(
        shown.contains("subscriber_id:") && shown.contains(id),
        "{shown}"
    );
    app.create_endpoint(&ours.url, json!({})).await;

    let sent = cli_ok(
        &app,
        &[
            "events",
            "send",
            "--type",
            "order.paid",
            "--data",
            r#"{"order_id":"98765"}"#,
            "--subscriber",
            id,
            "--json",
        ],
    )
    .await;
    let event_id = json_of(&sent)["event_id"].as_str().unwrap().to_owned();
    app.wait_for_deliveries(&event_id, "sent").await;
    let shown = cli_ok(&app, &["events", "show", &event_id]).await;
    let line = shown
        .lines()
        .find(|l| l.starts_with("subscriber_id:"))
        .unwrap_or_else(|| panic!("events show names the subscriber: {shown}"));
    assert!(line.ends_with(id), "{line}");
    let shown = json_of(&cli_ok(&app, &["events", "show", &event_id, "--json"]).await);
    assert_eq!(shown["subscriber_id"], id);
    assert_eq!(shown["deliveries"].as_array().unwrap().len(), 1, "{shown}");
    assert_eq!(theirs.received().len(), 1);
    assert!(ours.received().is_empty(), "the operator's endpoint got it");
    // An event to no subscriber says so.
    let own = app.publish("order.paid", json!({"n": 2})).await;
    let shown = cli_ok(&app, &["events", "show", &own]).await;
    assert!(
        shown
            .lines()
            .any(|l| l.starts_with("subscriber_id:") && l.ends_with(" -")),
        "{shown}"
    );

    let off = json_of(&cli_ok(&app, &["subscribers", "disable", id, "--json"]).await);
    assert_eq!(off["enabled"], false, "{off}");
    assert!(off["disabled_at"].is_string(), "{off}");
    let on = cli_ok(&app, &["subscribers", "enable", id]).await;
    let enabled = on.lines().find(|l| l.starts_with("enabled:")).unwrap();
    assert!(enabled.ends_with("true"), "{on}");

    // Bad input gets an error naming what is wrong.
    let bad_metadata = [
        "subscribers",
        "create",
        "cus_x",
        "--name",
        "X",
        "--metadata",
        "[1]",
    ];
    let (ok, _, stderr) = cli_at(&app, &bad_metadata).await;
    assert!(
        !ok && stderr.contains("--metadata") && stderr.contains("JSON object"),
        "{stderr}"
    );
    let unknown = [
        "events",
        "send",
        "--type",
        "order.paid",
        "--data",
        "{}",
        "--subscriber",
        "cus_missing",
    ];
    let (ok, _, stderr) = cli_at(&app, &unknown).await;
    assert!(
        !ok && stderr.contains("subscriber_id") && stderr.contains("cus_missing"),
        "{stderr}"
    );
    let (ok, _, stderr) = cli_at(&app, &["subscribers", "show", "cus_missing"]).await;
    assert!(
        !ok && stderr.contains("no subscriber with id 'cus_missing'"),
        "{stderr}"
    );
    let (ok, _, stderr) = cli_at(&app, &["subscribers", "show", ".."]).await;
    assert!(
        !ok && stderr.contains("cannot be used in a URL path"),
        "{stderr}"
    );

    let deleted = cli_ok(&app, &["subscribers", "delete", id, "--yes"]).await;
    assert!(
        deleted.contains(&format!("deleted subscriber {id}")),
        "{deleted}"
    );
    let shown = json_of(&cli_ok(&app, &["subscribers", "show", id, "--json"]).await);
    assert!(shown["deleted_at"].is_string(), "{shown}");
    let listed = cli_ok(&app, &["subscribers", "list"]).await;
    assert!(
        !listed.contains(id),
        "a deleted subscriber is not listed: {listed}"
    );
    let (ok, _, stderr) = cli_at(&app, &["subscribers", "delete", id, "--yes"]).await;
    assert!(!ok && stderr.contains("HTTP 404"), "{stderr}");
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(Policy::none())
        .build()
        .unwrap()
}

/// `GET path` with the session `cookie`: the status and the page.
async fn page(app: &TestApp, cookie: &str, path: &str) -> (StatusCode, String) {
    let response = client()
        .get(format!("{}{path}", app.url))
        .header(COOKIE, cookie)
        .send()
        .await
        .unwrap();
    (response.status(), response.text().await.unwrap())
}

/// `POST path` of a dashboard form with the session `cookie`.
async fn post_form(
    app: &TestApp,
    cookie: &str,
    path: &str,
    form: &[(&str, &str)],
) -> reqwest::Response {
    client()
        .post(format!("{}{path}", app.url))
        .header(COOKIE, cookie)
        .form(form)
        .send()
        .await
        .unwrap()
}

async fn create_subscriber(app: &TestApp, id: &str, name: &str) {
    let (status, body) = app
        .post("/v1/subscribers", json!({"id": id, "name": name}))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
}

/// Publishes an event of `event_type` addressed to subscriber `id`; returns its id.
async fn publish_to(app: &TestApp, id: &str, event_type: &str) -> String {
    let body = json!({"event_type": event_type, "data": {"n": 1}, "subscriber_id": id});
    let (status, answer) = app.post("/v1/events", body).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
    answer["event_id"].as_str().unwrap().to_owned()
}

/// Waits until `event_id` has one delivery per status of `statuses` (in any order).
async fn wait_for_statuses(app: &TestApp, event_id: &str, statuses: &[&str]) {
    let mut want: Vec<&str> = statuses.to_vec();
    want.sort_unstable();
    eventually(&format!("{event_id} to be {want:?}"), || async {
        let (_, event) = app.get(&format!("/v1/events/{event_id}")).await;
        let mut got: Vec<String> = event["deliveries"]
            .as_array()?
            .iter()
            .map(|d| d["status"].as_str().unwrap_or_default().to_owned())
            .collect();
        got.sort_unstable();
        (got == want).then_some(())
    })
    .await;
}

/// The subscriber ids a list page links, in order.
fn linked_ids(page: &str) -> Vec<String> {
    page.split("href=\"/ui/subscribers/")
        .skip(1)
        .map(|rest| rest.split('"').next().unwrap().to_owned())
        .collect()
}

async fn the_subscriber_pages_search_page_and_show_endpoints_backlog_and_failures(app: TestApp) {
    let (up, down, ours) = (
        Receiver::start().await,
        Receiver::start().await,
        Receiver::start().await,
    );
    down.respond_with(500);
    let id = "cus/9#x?y";
    let path_id = "cus%2F9%23x%3Fy";
    create_subscriber(&app, id, "Toko Makmur").await;
    let filter = json!({"subscriber_id": id, "event_types": ["order.*"]});
    let mut up_fields = filter.clone();
    up_fields["description"] = json!("Their ERP");
    app.create_endpoint(&up.url, up_fields).await;
    // Its retry waits an hour: the delivery stays `retrying` while the pages are read.
    let mut down_fields = filter.clone();
    down_fields["retry_initial_delay_ms"] = json!(3_600_000);
    down_fields["retry_max_delay_ms"] = json!(3_600_000);
    app.create_endpoint(&down.url, down_fields).await;
    app.create_endpoint(&ours.url, json!({"description": "Our own"}))
        .await;
    let event_id = publish_to(&app, id, "order.paid").await;
    wait_for_statuses(&app, &event_id, &["retrying", "sent"]).await;
    for n in 0..50 {
        create_subscriber(&app, &format!("cus_{n:02}"), &format!("Shop {n}")).await;
    }
    let (cookie, _) = sign_in(&app, None).await;

    // The list: every subscriber, a page at a time, each linked by its encoded id.
    let (status, first) = page(&app, &cookie, "/ui/subscribers").await;
    assert_eq!(status, StatusCode::OK, "{first}");
    assert!(
        first.contains("aria-current=\"page\">Subscribers<"),
        "in the navigation: {first}"
    );
    let mut ids = linked_ids(&first);
    assert_eq!(ids.len(), 50, "a page of 50: {ids:?}");
    let next = first
        .split("class=\"button secondary\" href=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_else(|| panic!("a link to the next page: {first}"))
        .replace("&amp;", "&");
    let (_, second) = page(&app, &cookie, &next).await;
    ids.extend(linked_ids(&second));
    ids.sort();
    let mut want: Vec<String> = (0..50).map(|n| format!("cus_{n:02}")).collect();
    want.push(path_id.to_owned());
    want.sort();
    assert_eq!(ids, want, "both pages together list every subscriber once");
    assert!(!second.contains("More subscribers"), "the last page");

    // Search by id and by name, through the index each has.
    for q in [view_enc(id), "Toko+Makmur".to_owned()] {
        let (_, found) = page(&app, &cookie, &format!("/ui/subscribers?q={q}")).await;
        assert_eq!(linked_ids(&found), [path_id], "q={q}: {found}");
        assert!(found.contains("Toko Makmur"), "{found}");
    }
    let (_, none) = page(&app, &cookie, "/ui/subscribers?q=Toko").await;
    assert!(
        none.contains("No subscriber has the id or the name"),
        "{none}"
    );
    assert!(linked_ids(&none).is_empty(), "{none}");

    // Its page: endpoints with their health, the backlog, the failures.
    let (status, one) = page(&app, &cookie, &format!("/ui/subscribers/{path_id}")).await;
    assert_eq!(status, StatusCode::OK, "{one}");
    assert!(
        one.contains(&up.url) && one.contains("Their ERP") && one.contains(&down.url),
        "its endpoints: {one}"
    );
    assert!(!one.contains(&ours.url), "not the operator's: {one}");
    assert!(
        one.contains("id=\"backlog-retrying\">1<") && one.contains("id=\"backlog-waiting\">0<"),
        "its backlog: {one}"
    );
    let failures = one
        .split("Recent failures")
        .nth(1)
        .expect("a recent failures section");
    assert!(
        failures.contains(&event_id)
            && failures.contains(&down.url)
            && failures.contains("retrying")
            && !failures.contains(&up.url),
        "the retrying delivery, not the sent one: {failures}"
    );
    for action in ["enabled", "delete"] {
        let form = format!("action=\"/ui/subscribers/{path_id}/{action}\"");
        assert!(one.contains(&form), "{form}: {one}");
    }

    // The event page names the subscriber and links its page.
    let (_, event) = page(&app, &cookie, &format!("/ui/events/{event_id}")).await;
    assert!(
        event.contains(&format!("href=\"/ui/subscribers/{path_id}\""))
            && event.contains("Toko Makmur"),
        "{event}"
    );
    let own = app.publish("order.paid", json!({"n": 2})).await;
    let (_, event) = page(&app, &cookie, &format!("/ui/events/{own}")).await;
    assert!(event.contains("none: your own endpoints"), "{event}");

    let (status, _) = page(&app, &cookie, "/ui/subscribers/cus_missing").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

/// A query value percent-encoded as a form would send it.
fn view_enc(value: &str) -> String {
    url::form_urlencoded::byte_serialize(value.as_bytes()).collect()
}

async fn a_subscribers_controls_are_refused_to_a_viewer_and_work_for_an_operator(app: TestApp) {
    let receiver = Receiver::start().await;
    let id = "cus/7%z";
    let path_id = "cus%2F7%25z";
    create_subscriber(&app, id, "Warung Sejahtera").await;
    let endpoint = json!({"subscriber_id": id});
    let endpoint = app.create_endpoint(&receiver.url, endpoint).await;
    let endpoint_id = endpoint["id"].as_str().unwrap();
    let subscriber = || async {
        let (status, s) = app.get(&format!("/v1/subscribers/{path_id}")).await;
        assert_eq!(status, StatusCode::OK, "{s}");
        s
    };

    let (_, viewer) = create_token(&app, "auditor", "viewer").await;
    let (cookie, csrf) = sign_in_with(&app, &viewer).await;
    for path in [
        "/ui/subscribers".to_owned(),
        format!("/ui/subscribers/{path_id}"),
    ] {
        let (status, shown) = page(&app, &cookie, &path).await;
        assert_eq!(status, StatusCode::OK, "{path}");
        assert!(shown.contains("id=\"read-only\""), "{path}: {shown}");
        assert_eq!(
            shown.matches("method=\"post\"").count(),
            1,
            "{path}: no form but signing out: {shown}"
        );
    }
    let forged: [(&str, &[(&str, &str)]); 3] = [
        ("enabled", &[("enabled", "false")]),
        ("delete", &[("confirm", id)]),
        ("delete", &[]),
    ];
    for (action, fields) in forged {
        let mut form = vec![("csrf", csrf.as_str())];
        form.extend_from_slice(fields);
        let path = format!("/ui/subscribers/{path_id}/{action}");
        let refused = post_form(&app, &cookie, &path, &form).await;
        assert_eq!(refused.status(), StatusCode::FORBIDDEN, "{path}");
        let answer = refused.text().await.unwrap();
        assert!(answer.contains("viewer"), "{path} says why: {answer}");
    }
    let s = subscriber().await;
    assert_eq!(s["enabled"], true, "{s}");
    assert!(s["deleted_at"].is_null(), "{s}");

    let (cookie, csrf) = sign_in(&app, None).await;
    let csrf = csrf.as_str();
    let here = format!("/ui/subscribers/{path_id}");
    let enabled = format!("{here}/enabled");
    let off = post_form(
        &app,
        &cookie,
        &enabled,
        &[("csrf", csrf), ("enabled", "false")],
    )
    .await;
    assert_eq!(off.status(), StatusCode::SEE_OTHER);
    assert_eq!(off.headers()[LOCATION], here.as_str());
    assert_eq!(subscriber().await["enabled"], false);
    let (_, shown) = page(&app, &cookie, &here).await;
    assert!(
        shown.contains("Enable subscriber") && shown.contains("their deliveries wait"),
        "{shown}"
    );
    let on = post_form(
        &app,
        &cookie,
        &enabled,
        &[("csrf", csrf), ("enabled", "true")],
    )
    .await;
    assert_eq!(on.status(), StatusCode::SEE_OTHER);
    assert_eq!(subscriber().await["enabled"], true);

    let delete = format!("{here}/delete");
    let wrong = post_form(
        &app,
        &cookie,
        &delete,
        &[("csrf", csrf), ("confirm", "cus")],
    )
    .await;
    assert_eq!(wrong.status(), StatusCode::BAD_REQUEST);
    let answer = wrong.text().await.unwrap();
    assert!(answer.contains("type the subscriber"), "{answer}");
    assert!(subscriber().await["deleted_at"].is_null(), "not deleted");
    let done = post_form(&app, &cookie, &delete, &[("csrf", csrf), ("confirm", id)]).await;
    assert_eq!(done.status(), StatusCode::SEE_OTHER);
    assert!(subscriber().await["deleted_at"].is_string(), "deleted");
    let (status, _) = app.get(&format!("/v1/endpoints/{endpoint_id}")).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "its endpoint was deleted");
    let (_, shown) = page(&app, &cookie, &here).await;
    assert!(shown.contains("Deleted "), "{shown}");
    assert_eq!(
        shown.matches("method=\"post\"").count(),
        1,
        "a deleted subscriber has no controls: {shown}"
    );
}

/// Issue 29: `kurir subscribers show` prints the subscriber's action history (who disabled,
/// enabled or deleted it, from where, when), newest first, the newest ten, and says how many
/// older ones it left out; `--json` carries the API's answer whole.
async fn subscribers_show_lists_its_actions_newest_first_and_says_how_many_more(app: TestApp) {
    let id = "cus/act?1";
    create_subscriber(&app, id, "Acts").await;
    let shown = cli_ok(&app, &["subscribers", "show", id]).await;
    assert!(
        shown.contains("actions: none") && !shown.contains("ACTION"),
        "{shown}"
    );

    // The oldest through the API, the twelve after it through the CLI: thirteen in all.
    let (status, body) = app
        .patch(
            &format!("/v1/subscribers/{}", view_enc(id)),
            json!({"enabled": false}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    for step in 0..12 {
        let verb = if step % 2 == 0 { "enable" } else { "disable" };
        cli_ok(&app, &["subscribers", verb, id]).await;
    }

    let shown = cli_ok(&app, &["subscribers", "show", id]).await;
    let lines: Vec<&str> = shown.lines().collect();
    let header = lines
        .iter()
        .position(|l| l.starts_with("WHEN"))
        .unwrap_or_else(|| panic!("a table of actions: {shown}"));
    let columns: Vec<&str> = lines[header].split_whitespace().collect();
    assert_eq!(columns, ["WHEN", "ACTION", "BY", "VIA"], "{shown}");
    let rows: Vec<Vec<&str>> = lines[header + 1..]
        .iter()
        .take_while(|l| !l.starts_with('('))
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), 10, "the newest ten: {shown}");
    // Newest first: the last CLI step was a disable, and they alternate back from it.
    for (i, row) in rows.iter().enumerate() {
        let action = if i % 2 == 0 { "disable" } else { "enable" };
        assert_eq!(row[1..], [action, "admin", "cli"], "row {i}: {shown}");
        assert!(
            row[0].parse::<chrono::DateTime<chrono::Utc>>().is_ok(),
            "{shown}"
        );
    }
    let times: Vec<&str> = rows.iter().map(|r| r[0]).collect();
    let mut newest_first = times.clone();
    newest_first.sort_by(|a, b| b.cmp(a));
    assert_eq!(times, newest_first, "{shown}");
    assert!(
        shown.contains("(3 older actions not listed; --json lists all 13)"),
        "{shown}"
    );

    let json = json_of(&cli_ok(&app, &["subscribers", "show", id, "--json"]).await);
    assert_eq!(json["id"], id, "{json}");
    assert_eq!(json["actions"]["total"], 13, "{json}");
    let all = json["actions"]["data"].as_array().unwrap();
    assert_eq!(all.len(), 13, "{json}");
    assert_eq!(all[0]["action"], "disable");
    assert_eq!(all[12]["action"], "disable");
    assert_eq!(all[12]["via"], "api", "the oldest, through the API: {json}");
}
