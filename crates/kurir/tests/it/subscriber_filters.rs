//! The operator's surfaces for one subscriber's share (issue 29, item 4): `kurir subscribers
//! token create|list|revoke`, `--subscriber` on `kurir endpoints list`, `kurir events list` and
//! `kurir deliveries list`, and the dashboard's subscriber filter on the Endpoints, Events and
//! Dead letters pages (whole page and htmx rows), carried into the bulk replay, which then
//! replays that subscriber's dead letters only; on every database. The htmx path in Chromium is
//! in `browser.rs`.
//!
//! The subscriber id holds `&`, `+`, `%`, `#`, `?` and `/`: each must reach the API and come
//! back in every link exactly as it is, through percent-encoding.

use reqwest::header::{COOKIE, LOCATION};
use reqwest::redirect::Policy;
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::api::support::{eventually, on_both_backends, Receiver, TestApp};
use crate::cli::{cli_at, cli_ok};
use crate::ui::sign_in;

on_both_backends!(
    the_cli_creates_lists_and_revokes_a_subscribers_tokens,
    the_cli_lists_filter_by_subscriber_and_refuse_an_unknown_one,
    the_dashboard_lists_filter_by_subscriber_and_its_bulk_replay_takes_only_its_dead_letters,
);

/// An awkward subscriber id: every character a query string or a path could misread.
const AWKWARD: &str = "cus/a&b+c%#?1";

fn json_of(out: &str) -> Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
}

/// `value` percent-encoded as a form (and the dashboard's links) would send it.
fn enc(value: &str) -> String {
    url::form_urlencoded::byte_serialize(value.as_bytes()).collect()
}

/// `value` as askama writes it into HTML.
fn html(value: &str) -> String {
    value
        .replace('&', "&#38;")
        .replace('<', "&#60;")
        .replace('>', "&#62;")
        .replace('"', "&#34;")
        .replace('\'', "&#39;")
}

async fn create_subscriber(app: &TestApp, id: &str) {
    let (status, body) = app
        .post("/v1/subscribers", json!({"id": id, "name": "Shop"}))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
}

/// Publishes an event to subscriber `id` (or to none); returns its id.
async fn publish_to(app: &TestApp, id: Option<&str>) -> String {
    let body = json!({"event_type": "order.paid", "data": {"n": 1}, "subscriber_id": id});
    let (status, answer) = app.post("/v1/events", body).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
    answer["event_id"].as_str().unwrap().to_owned()
}

/// `GET /v1/whoami` with `token`: its status and answer.
async fn whoami(app: &TestApp, token: &str) -> (StatusCode, Value) {
    let response = reqwest::Client::new()
        .get(format!("{}/v1/whoami", app.url))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    let status = response.status();
    let text = response.text().await.unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or_default())
}

async fn the_cli_creates_lists_and_revokes_a_subscribers_tokens(app: TestApp) {
    create_subscriber(&app, AWKWARD).await;
    let create = [
        "subscribers",
        "token",
        "create",
        AWKWARD,
        "--name",
        "acme-ci",
        "--expires-in",
        "30d",
    ];
    let created = cli_ok(&app, &create).await;
    let token = created
        .lines()
        .find_map(|l| l.strip_prefix("token: "))
        .unwrap_or_else(|| panic!("the token is printed: {created}"))
        .trim()
        .to_owned();
    assert!(token.starts_with("kurir_sub_"), "{created}");
    assert!(
        created.contains("will not be shown again"),
        "says it is shown once: {created}"
    );
    let token_id = created
        .lines()
        .find_map(|l| l.strip_prefix("id:"))
        .unwrap()
        .trim()
        .to_owned();
    let (status, me) = whoami(&app, &token).await;
    assert_eq!(status, StatusCode::OK, "{me}");
    assert_eq!(me["subscriber_id"], AWKWARD, "{me}");
    assert_eq!(me["name"], "acme-ci", "{me}");

    // The expiry is the duration from now; `--json` answers the API's view, token included.
    let before = chrono::Utc::now();
    let other = cli_ok(
        &app,
        &[
            "subscribers",
            "token",
            "create",
            AWKWARD,
            "--expires-in",
            "2h",
            "--json",
        ],
    )
    .await;
    let other = json_of(&other);
    let expires: chrono::DateTime<chrono::Utc> =
        other["expires_at"].as_str().unwrap().parse().unwrap();
    let ahead = expires - before;
    assert!(
        ahead > chrono::Duration::minutes(110) && ahead <= chrono::Duration::minutes(130),
        "expires in about 2h: {other}"
    );
    assert!(other["token"].as_str().unwrap().starts_with("kurir_sub_"));
    assert_eq!(other["subscriber_id"], AWKWARD);

    let listed = cli_ok(&app, &["subscribers", "token", "list", AWKWARD]).await;
    let header: Vec<&str> = listed.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header[..3], ["ID", "NAME", "STATUS"], "{listed}");
    let row = listed
        .lines()
        .find(|l| l.starts_with(&token_id))
        .unwrap_or_else(|| panic!("{token_id} listed: {listed}"));
    assert!(row.contains("acme-ci") && row.contains("active"), "{row}");
    assert!(!listed.contains(&token), "never the secret: {listed}");
    let page = json_of(&cli_ok(&app, &["subscribers", "token", "list", AWKWARD, "--json"]).await);
    assert_eq!(page["data"].as_array().unwrap().len(), 2, "{page}");
    assert!(!page.to_string().contains("kurir_sub_"), "{page}");

    let revoke = ["subscribers", "token", "revoke", AWKWARD, &token_id];
    let revoked = cli_ok(&app, &revoke).await;
    assert!(
        revoked.contains(&format!("revoked token {token_id}"))
            && revoked.contains("no longer works"),
        "{revoked}"
    );
    let (status, _) = whoami(&app, &token).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "refused once revoked");
    let listed = cli_ok(&app, &["subscribers", "token", "list", AWKWARD]).await;
    let row = listed.lines().find(|l| l.starts_with(&token_id)).unwrap();
    assert!(row.contains("revoked"), "{listed}");

    // Bad input: an error naming what is wrong, and nothing created.
    let (ok, _, stderr) = cli_at(
        &app,
        &[
            "subscribers",
            "token",
            "create",
            AWKWARD,
            "--expires-in",
            "soon",
        ],
    )
    .await;
    assert!(
        !ok && stderr.contains("--expires-in") && stderr.contains("not a duration"),
        "{stderr}"
    );
    let (ok, _, stderr) = cli_at(&app, &["subscribers", "token", "create", "cus_missing"]).await;
    assert!(
        !ok && stderr.contains("no subscriber with id 'cus_missing'"),
        "{stderr}"
    );
    let (ok, _, stderr) = cli_at(
        &app,
        &["subscribers", "token", "revoke", AWKWARD, "tok_nothing"],
    )
    .await;
    assert!(!ok && stderr.contains("HTTP 404"), "{stderr}");
    let page = json_of(&cli_ok(&app, &["subscribers", "token", "list", AWKWARD, "--json"]).await);
    assert_eq!(page["data"].as_array().unwrap().len(), 2, "{page}");
}

/// The ids of `column` (by its header) in a CLI table.
fn column(table: &str, header: &str) -> Vec<String> {
    let mut lines = table.lines();
    let head = lines.next().unwrap_or_default();
    let at = head
        .find(header)
        .unwrap_or_else(|| panic!("no {header}: {table}"));
    lines
        .filter(|l| !l.starts_with('('))
        .map(|l| {
            l.get(at..)
                .unwrap_or_default()
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_owned()
        })
        .collect()
}

async fn the_cli_lists_filter_by_subscriber_and_refuse_an_unknown_one(app: TestApp) {
    let receiver = Receiver::start().await;
    let (a, b) = (AWKWARD, "cus_b");
    create_subscriber(&app, a).await;
    create_subscriber(&app, b).await;
    create_subscriber(&app, "cus_quiet").await;
    let ea = app
        .create_endpoint(&receiver.url, json!({"subscriber_id": a}))
        .await;
    let eb = app
        .create_endpoint(&receiver.url, json!({"subscriber_id": b}))
        .await;
    let own = app.create_endpoint(&receiver.url, json!({})).await;
    let (ea, eb, own) = (
        ea["id"].as_str().unwrap(),
        eb["id"].as_str().unwrap(),
        own["id"].as_str().unwrap(),
    );
    let event_a = publish_to(&app, Some(a)).await;
    let event_b = publish_to(&app, Some(b)).await;
    let event_own = publish_to(&app, None).await;
    for event in [&event_a, &event_b, &event_own] {
        app.wait_for_deliveries(event, "sent").await;
    }

    let listed = cli_ok(&app, &["endpoints", "list", "--subscriber", a]).await;
    assert_eq!(column(&listed, "ID"), [ea], "{listed}");
    let page = json_of(&cli_ok(&app, &["endpoints", "list", "--subscriber", b, "--json"]).await);
    assert_eq!(page["data"][0]["id"], eb, "{page}");
    assert_eq!(page["data"].as_array().unwrap().len(), 1, "{page}");
    let all = cli_ok(&app, &["endpoints", "list"]).await;
    assert_eq!(column(&all, "ID").len(), 3, "unfiltered, every one: {all}");
    assert!(all.contains(own), "{all}");

    let listed = cli_ok(&app, &["events", "list", "--subscriber", a]).await;
    assert_eq!(column(&listed, "EVENT ID"), [event_a.as_str()], "{listed}");
    let page = json_of(&cli_ok(&app, &["events", "list", "--subscriber", b, "--json"]).await);
    assert_eq!(page["data"][0]["event_id"], event_b.as_str(), "{page}");
    assert_eq!(page["data"].as_array().unwrap().len(), 1, "{page}");

    let listed = cli_ok(&app, &["deliveries", "list", "--subscriber", a]).await;
    assert_eq!(column(&listed, "EVENT ID"), [event_a.as_str()], "{listed}");
    assert_eq!(column(&listed, "ENDPOINT ID"), [ea], "{listed}");
    let page = json_of(
        &cli_ok(
            &app,
            &[
                "deliveries",
                "list",
                "--subscriber",
                b,
                "--status",
                "sent",
                "--json",
            ],
        )
        .await,
    );
    assert_eq!(page["data"][0]["endpoint_id"], eb, "{page}");
    assert_eq!(page["data"].as_array().unwrap().len(), 1, "{page}");

    // A subscriber with nothing yet lists nothing; an id kurir does not know is an error.
    for list in ["endpoints", "events", "deliveries"] {
        let quiet = cli_ok(&app, &[list, "list", "--subscriber", "cus_quiet"]).await;
        assert_eq!(
            quiet.lines().count(),
            1,
            "{list}: the header alone: {quiet}"
        );
        for json in [false, true] {
            let mut args = vec![list, "list", "--subscriber", "cus_nobody"];
            if json {
                args.push("--json");
            }
            let (ok, stdout, stderr) = cli_at(&app, &args).await;
            assert!(
                !ok && stderr.contains("no subscriber cus_nobody"),
                "{args:?}: {stderr}"
            );
            assert!(stdout.is_empty(), "{args:?}: no list: {stdout}");
        }
    }
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(Policy::none())
        .build()
        .unwrap()
}

/// `GET path` with the session `cookie`, as htmx asks (`htmx`) or as a page load.
async fn page(app: &TestApp, cookie: &str, path: &str, htmx: bool) -> String {
    let mut request = client()
        .get(format!("{}{path}", app.url))
        .header(COOKIE, cookie);
    if htmx {
        request = request.header("HX-Request", "true");
    }
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK, "{path}");
    let text = response.text().await.unwrap();
    assert_eq!(
        text.contains("<html"),
        !htmx,
        "{path}: the whole page only without htmx: {text}"
    );
    text
}

/// The `href` of the element whose `id` is given, as the browser follows it.
fn href_of(page: &str, id: &str) -> String {
    page.split(&format!("id=\"{id}\""))
        .next()
        .and_then(|before| before.rsplit("href=\"").next())
        .and_then(|rest| rest.split('"').next())
        .filter(|_| page.contains(&format!("id=\"{id}\"")))
        .unwrap_or_else(|| panic!("no #{id}: {page}"))
        .replace("&amp;", "&")
}

/// How many attempts `event_id`'s one delivery has had.
async fn attempts(app: &TestApp, event_id: &str) -> usize {
    let (_, event) = app.get(&format!("/v1/events/{event_id}")).await;
    event["deliveries"][0]["attempts"].as_array().unwrap().len()
}

async fn the_dashboard_lists_filter_by_subscriber_and_its_bulk_replay_takes_only_its_dead_letters(
    app: TestApp,
) {
    let (a, b) = (AWKWARD, "cus_b");
    let (ra, rb, ro) = (
        Receiver::start().await,
        Receiver::start().await,
        Receiver::start().await,
    );
    for r in [&ra, &rb, &ro] {
        r.respond_with(500);
    }
    create_subscriber(&app, a).await;
    create_subscriber(&app, b).await;
    let once =
        |subscriber: Option<&str>| json!({"subscriber_id": subscriber, "retry_max_attempts": 1});
    app.create_endpoint(&ra.url, once(Some(a))).await;
    app.create_endpoint(&rb.url, once(Some(b))).await;
    app.create_endpoint(&ro.url, once(None)).await;
    let event_a = publish_to(&app, Some(a)).await;
    let event_b = publish_to(&app, Some(b)).await;
    let event_own = publish_to(&app, None).await;
    for event in [&event_a, &event_b, &event_own] {
        app.wait_for_deliveries(event, "dead_letter").await;
    }
    let (cookie, csrf) = sign_in(&app, None).await;
    let query = format!("subscriber_id={}", enc(a));
    let field = "id=\"subscriber_id\" name=\"subscriber_id\"";

    // Each list, as a page and as htmx rows, shows the subscriber's rows only; the page's
    // filter field holds the id as it is.
    let lists = [
        ("/ui/endpoints", &ra.url, [&rb.url, &ro.url]),
        ("/ui/events", &event_a, [&event_b, &event_own]),
        ("/ui/dead-letters", &ra.url, [&rb.url, &ro.url]),
    ];
    for (list, shown, hidden) in lists {
        let path = format!("{list}?{query}");
        let whole = page(&app, &cookie, &path, false).await;
        assert!(
            whole.contains(&format!("{field} type=\"text\" class=\"mono\" placeholder=\"every subscriber\" value=\"{}\"", html(a))),
            "{list}: the field holds the filter: {whole}"
        );
        for text in [whole, page(&app, &cookie, &path, true).await] {
            assert!(text.contains(shown.as_str()), "{list}: {text}");
            for other in hidden {
                assert!(
                    !text.contains(other.as_str()),
                    "{list}: not {other}: {text}"
                );
            }
        }
        let unfiltered = page(&app, &cookie, list, true).await;
        for other in hidden {
            assert!(unfiltered.contains(other.as_str()), "{list}: {unfiltered}");
        }
        let unknown = page(
            &app,
            &cookie,
            &format!("{list}?subscriber_id=cus_nobody"),
            true,
        )
        .await;
        assert!(
            unknown.contains("No subscriber has the id <span class=\"mono\">cus_nobody</span>"),
            "{list}: {unknown}"
        );
    }

    // The subscriber's page links each list filtered by it.
    let path_id = enc(a);
    let own = page(&app, &cookie, &format!("/ui/subscribers/{path_id}"), false).await;
    for list in ["/ui/endpoints", "/ui/events", "/ui/dead-letters"] {
        let link = format!("href=\"{list}?{query}\"");
        assert!(own.contains(&link), "{link}: {own}");
    }

    // The bulk replay's link, in the htmx rows and in the page, carries the filter exactly; its
    // dry run counts the subscriber's one dead letter, and its form carries the filter on.
    let rows = page(&app, &cookie, &format!("/ui/dead-letters?{query}"), true).await;
    let link = href_of(&rows, "bulk-replay");
    assert_eq!(link, format!("/ui/dead-letters/replay?{query}"));
    let dry_run = page(&app, &cookie, &link, false).await;
    assert!(
        dry_run.contains("<strong>1</strong> dead-lettered delivery matches"),
        "{dry_run}"
    );
    assert!(
        dry_run.contains(&format!("name=\"subscriber_id\" value=\"{}\"", html(a))),
        "{dry_run}"
    );
    let everyone = page(&app, &cookie, "/ui/dead-letters/replay", false).await;
    assert!(
        everyone.contains("<strong>3</strong> dead-lettered deliveries match"),
        "{everyone}"
    );
    let replayed = client()
        .post(format!("{}/ui/dead-letters/replay", app.url))
        .header(COOKIE, &cookie)
        .form(&[
            ("csrf", csrf.as_str()),
            ("endpoint_id", ""),
            ("subscriber_id", a),
            ("event_type", ""),
            ("since", ""),
            ("until", ""),
            ("reason", "their server is back"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(replayed.status(), StatusCode::SEE_OTHER);
    assert_eq!(replayed.headers()[LOCATION], "/ui/audit");
    let (_, audit) = app.get("/v1/replays").await;
    assert_eq!(
        audit["data"][0]["filter"],
        json!({"status": "dead_letter", "subscriber_id": a}),
        "{audit}"
    );
    assert_eq!(audit["data"][0]["count"], 1, "{audit}");
    eventually("the subscriber's dead letter to be tried again", || async {
        (attempts(&app, &event_a).await == 2).then_some(())
    })
    .await;
    app.wait_for_deliveries(&event_a, "dead_letter").await;
    for other in [&event_b, &event_own] {
        assert_eq!(attempts(&app, other).await, 1, "{other} was not replayed");
        app.wait_for_deliveries(other, "dead_letter").await;
    }
    assert_eq!(ra.received().len(), 2);
    assert_eq!((rb.received().len(), ro.received().len()), (1, 1));
}
