//! Issue 31 §3, isolation and safety, as a subscriber's people meet them. In a real headless
//! Chromium, subscriber A's session types subscriber B's ids into every portal URL, and edits B's
//! ids into the fields and actions of A's own forms before submitting them: each answer is the
//! page a missing id gets (404), none of B's data shows, and B's endpoint, secret and deliveries
//! are the same afterwards (and A's too: the edited forms reached nothing). And the real
//! `kurir serve` at debug level, driven through a portal link, a secret reveal, a rotation and a
//! test send, logs none of the secrets, the link token, the session cookie or the CSRF token.

use std::time::Duration;

use fantoccini::{Client, Locator};
use reqwest::StatusCode;
use serde_json::{json, Value};

use kurir::endpoint::EndpointId;

use crate::api::support::{eventually, Backend, Receiver, TestApp, TestDb};
use crate::browser::{chromedriver, click, in_chromium};
use crate::cli::{serve_with_env, Serve};
use crate::portal_deliveries::{link_path, publish_to, subscriber_with_endpoint};
use crate::support::eventually_within;

/// Ids of the right shape that name nothing.
const MISSING_ENDPOINT: &str = "0190f2b8-0000-7000-8000-000000000000";
const MISSING_EVENT: &str = "0190f3c2-0000-7000-8000-000000000000";
/// In B's event's payload, B's endpoint's URL and B's name: none may reach A's pages.
const B_MARKER: &str = "b-payload-marker-41d7";
const B_PATH: &str = "b-only-hooks-9e2c";
const B_NAME: &str = "Bolt Private";

/// Everything of B's a portal form could change: its endpoint as the admin API shows it, its
/// secrets as stored, and its event's deliveries and their attempts.
async fn snapshot_of(app: &TestApp, endpoint: &str, event: &str) -> String {
    let (status, shown) = app.get(&format!("/v1/endpoints/{endpoint}")).await;
    assert_eq!(status, StatusCode::OK, "{shown}");
    let stored = app
        .store
        .get_endpoint(&EndpointId::parse(endpoint).unwrap())
        .await
        .unwrap()
        .expect("stored");
    let previous: Vec<&str> = stored
        .previous_secrets
        .iter()
        .map(|p| p.secret.expose())
        .collect();
    let (status, detail) = app.get(&format!("/v1/events/{event}")).await;
    assert_eq!(status, StatusCode::OK, "{detail}");
    format!(
        "{shown}\n{} {previous:?}\n{detail}\n{}",
        stored.secret.expose(),
        app.snapshot().await
    )
}

/// The page's text once it is the portal's error page (its message in `main.login`).
async fn error_page(c: &Client) -> String {
    eventually_within(Duration::from_secs(60), "an error page", || async {
        c.find(Locator::Css("main.login #message")).await.ok()?;
        c.find(Locator::Css("body")).await.ok()?.text().await.ok()
    })
    .await
}

/// Fails unless the page is the portal's not-found page and shows nothing of B's.
async fn assert_not_found_without_b(c: &Client, what: &str, b_secret: &str, b_event: &str) {
    let text = error_page(c).await;
    assert!(
        text.contains("Error 404") && text.contains("Not Found"),
        "{what}: {text}"
    );
    let source = c.source().await.unwrap();
    for (data, shown) in [
        ("B's endpoint URL", B_PATH),
        ("B's payload", B_MARKER),
        ("B's name", B_NAME),
        ("B's secret", b_secret),
    ] {
        assert!(!source.contains(shown), "{what} shows {data}: {source}");
    }
    // B's event id only where A typed it itself, never as data of B's.
    if !what.contains(b_event) {
        assert!(!source.contains(b_event), "{what} shows B's event id");
    }
}

/// A's text with `ids` put as `<id>`, to compare an answer about B's ids with one about
/// missing ones.
fn without(text: &str, ids: &[&str]) -> String {
    ids.iter()
        .fold(text.to_owned(), |t, id| t.replace(id, "<id>"))
}

/// Edits A's form `form` on the current page: its `action`, and its field `field` set to
/// `value` (a select's options all take the value). An htmx form is made a plain one first, so
/// the browser itself posts it.
async fn edit_form(c: &Client, form: &str, action: Option<&str>, field: Option<(&str, &str)>) {
    let (name, value) = field.unwrap_or_default();
    c.execute(
        r"const [form, action, name, value] = arguments;
          let f = document.querySelector(form);
          if (f.hasAttribute('hx-post')) {
            for (const a of ['hx-post', 'hx-target', 'hx-swap']) f.removeAttribute(a);
            const plain = f.cloneNode(true);
            f.replaceWith(plain);
            f = plain;
          }
          if (action) f.setAttribute('action', action);
          if (name) {
            const el = f.elements[name];
            if (el.tagName === 'SELECT') { for (const o of el.options) o.value = value; }
            el.value = value;
          }",
        vec![json!(form), json!(action), json!(name), json!(value)],
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_subscribers_ids_typed_into_urls_or_edited_into_forms_reach_nothing_in_the_browser()
{
    let Some(program) = chromedriver() else {
        return;
    };
    let database = TestDb::unmigrated(Backend::Sqlite).await.unwrap();
    let app = TestApp::spawn_with(&database, &[("retry_max_attempts", "1")]).await;
    in_chromium(&program, &app, Duration::from_secs(300), async |c| {
        isolation_flow(c, &app).await
    })
    .await;
}

async fn isolation_flow(c: &Client, app: &TestApp) {
    let (to_a, to_b) = (Receiver::start().await, Receiver::start().await);
    to_a.respond_with(500);
    to_b.respond_with(500);
    let endpoint_a = subscriber_with_endpoint(app, "cus_a", &to_a).await;
    let (status, body) = app
        .post("/v1/subscribers", json!({"id": "cus_b", "name": B_NAME}))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let endpoint_b = app
        .create_endpoint(
            &format!("{}/{B_PATH}", to_b.url),
            json!({"subscriber_id": "cus_b"}),
        )
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (status, body) = app
        .post(
            "/v1/events",
            json!({"event_type": "order.paid", "data": {"note": B_MARKER}, "subscriber_id": "cus_b"}),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let event_b = body["event_id"].as_str().unwrap().to_owned();
    let event_a = publish_to(app, "cus_a").await;
    app.wait_for_deliveries(&event_b, "dead_letter").await;
    app.wait_for_deliveries(&event_a, "dead_letter").await;
    let b_secret = app
        .store
        .get_endpoint(&EndpointId::parse(&endpoint_b).unwrap())
        .await
        .unwrap()
        .unwrap()
        .secret
        .expose()
        .to_owned();

    c.goto(&format!(
        "{}{}",
        app.url,
        link_path(app, "cus_a", false).await
    ))
    .await
    .unwrap();
    crate::browser::page_with(c, "Endpoints").await;
    let before_b = snapshot_of(app, &endpoint_b, &event_b).await;
    let before_a = snapshot_of(app, &endpoint_a, &event_a).await;
    let sent_to_b = to_b.received().len();

    // (a) B's ids typed into the address bar: the page a missing id gets, nothing of B's.
    let (eb, ea, pb) = (&endpoint_b, &event_a, &event_b);
    let (me, mv) = (MISSING_ENDPOINT, MISSING_EVENT);
    for (typed, missing) in [
        (
            format!("/portal/endpoints/{eb}"),
            format!("/portal/endpoints/{me}"),
        ),
        (
            format!("/portal/endpoints/{eb}/delete"),
            format!("/portal/endpoints/{me}/delete"),
        ),
        (
            format!("/portal/events/{pb}"),
            format!("/portal/events/{mv}"),
        ),
        (
            format!("/portal/events/{pb}/replay?endpoint_id={eb}"),
            format!("/portal/events/{mv}/replay?endpoint_id={me}"),
        ),
        (
            format!("/portal/events/{ea}/replay?endpoint_id={eb}"),
            format!("/portal/events/{ea}/replay?endpoint_id={me}"),
        ),
        (
            format!("/portal/replay?endpoint_id={eb}"),
            format!("/portal/replay?endpoint_id={me}"),
        ),
    ] {
        c.goto(&format!("{}{typed}", app.url)).await.unwrap();
        assert_not_found_without_b(c, &typed, &b_secret, pb).await;
        let theirs = error_page(c).await;
        c.goto(&format!("{}{missing}", app.url)).await.unwrap();
        let nobodys = error_page(c).await;
        assert_eq!(
            without(&theirs, &[eb, pb]),
            without(&nobodys, &[me, mv]),
            "{typed} answers as {missing} does"
        );
    }
    // The log filtered by B's endpoint lists nothing of B's.
    c.goto(&format!("{}/portal/deliveries?endpoint_id={eb}", app.url))
        .await
        .unwrap();
    let source = c.source().await.unwrap();
    assert!(
        !source.contains(pb.as_str()) && !source.contains(B_MARKER) && !source.contains(B_PATH),
        "B's deliveries in A's log: {source}"
    );

    // (b) A's own forms, B's ids edited into them in the page, submitted by a click.
    let endpoint_page = format!("/portal/endpoints/{endpoint_a}");
    let delete_page = format!("/portal/endpoints/{endpoint_a}/delete");
    let replay_page = format!("/portal/events/{ea}/replay?endpoint_id={endpoint_a}");
    // (page, form, its action with B's ids, the field edited to B's endpoint id, the button)
    let edits: [(&str, &str, &str, Option<&str>, &str); 9] = [
        (
            &endpoint_page,
            "#edit-form",
            "/portal/endpoints/{id}",
            None,
            "#save",
        ),
        (
            &endpoint_page,
            "#reveal-form",
            "/portal/endpoints/{id}/secret",
            None,
            "#reveal",
        ),
        (
            &endpoint_page,
            "#rotate-form",
            "/portal/endpoints/{id}/rotate",
            None,
            "#rotate",
        ),
        (
            &endpoint_page,
            "form[action$='/enabled']",
            "/portal/endpoints/{id}/enabled",
            None,
            "#disable",
        ),
        (
            &delete_page,
            "form[action$='/delete']",
            "/portal/endpoints/{id}/delete",
            None,
            "#confirm-delete",
        ),
        (
            &replay_page,
            "form[action$='/replay']",
            "",
            Some("endpoint_id"),
            "#confirm",
        ),
        (
            &replay_page,
            "form[action$='/replay']",
            "/portal/events/{event}/replay",
            Some("endpoint_id"),
            "#confirm",
        ),
        (
            "/portal/test",
            "form[action='/portal/test']",
            "",
            Some("endpoint_id"),
            "#send-test",
        ),
        (
            "/portal/deliveries",
            "form[action='/portal/replay']",
            "",
            Some("endpoint_id"),
            "form[action='/portal/replay'] button[type=submit]",
        ),
    ];
    for (page, form, action, field, button) in edits {
        let mut answers = Vec::new();
        for (id, event) in [(eb.as_str(), pb.as_str()), (me, mv)] {
            c.goto(&format!("{}{page}", app.url)).await.unwrap();
            let action =
                (!action.is_empty()).then(|| action.replace("{id}", id).replace("{event}", event));
            edit_form(c, form, action.as_deref(), field.map(|f| (f, id))).await;
            click(c, button).await;
            let what = format!("{form} on {page} edited to {id} {action:?}");
            assert_not_found_without_b(c, &what, &b_secret, pb).await;
            answers.push(without(&error_page(c).await, &[id, event]));
        }
        assert_eq!(
            answers[0], answers[1],
            "{form} on {page}: B's ids answer as missing ones"
        );
    }

    assert_eq!(
        snapshot_of(app, &endpoint_b, &event_b).await,
        before_b,
        "nothing of B's changed"
    );
    assert_eq!(
        snapshot_of(app, &endpoint_a, &event_a).await,
        before_a,
        "the edited forms changed nothing of A's either"
    );
    assert_eq!(to_b.received().len(), sent_to_b, "nothing sent to B");
}

/// `method path` on the real server with the admin token: the JSON answer.
async fn admin(
    server: &Serve,
    token: &str,
    method: reqwest::Method,
    path: &str,
    body: Value,
) -> Value {
    let response = reqwest::Client::new()
        .request(method, format!("{}{path}", server.url))
        .bearer_auth(token)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let status = response.status();
    let text = response.text().await.unwrap();
    assert!(status.is_success(), "{path}: {status} {text}");
    serde_json::from_str(&text).unwrap_or(Value::Null)
}

/// The text between `start` and the next `"` or `<` in `page`.
fn between(page: &str, start: &str) -> String {
    let (_, rest) = page
        .split_once(start)
        .unwrap_or_else(|| panic!("'{start}' in: {page}"));
    rest.split(['"', '<']).next().unwrap().trim().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_portals_secrets_link_token_session_and_csrf_token_never_reach_the_debug_log() {
    const TOKEN: &str = "portal-log-admin-token-3c8e1a";
    const SECRET: &str = "whsec_cG9ydGFsLXNlY3JldC1uZXZlci1pbi1sb2dzLTQy";
    let dir = tempfile::tempdir().unwrap();
    let server = serve_with_env(
        dir.path(),
        &[
            "--listen",
            "127.0.0.1:0",
            "--allowed-networks",
            "127.0.0.0/8",
            "--admin-token",
            TOKEN,
        ],
        &[("KURIR_LOG", "debug")],
    )
    .await;
    let receiver = Receiver::start().await;
    let post = reqwest::Method::POST;
    admin(
        &server,
        TOKEN,
        post.clone(),
        "/v1/subscribers",
        json!({"id": "cus_log", "name": "Log"}),
    )
    .await;
    let endpoint = admin(
        &server,
        TOKEN,
        post.clone(),
        "/v1/endpoints",
        json!({"url": receiver.url, "subscriber_id": "cus_log", "secret": SECRET}),
    )
    .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let link = admin(
        &server,
        TOKEN,
        post,
        "/v1/subscribers/cus_log/portal-links",
        json!({}),
    )
    .await;
    let url = link["url"].as_str().unwrap();
    let link_token = url.rsplit('/').next().unwrap().to_owned();
    assert!(link_token.len() > 16, "{url}");
    let path = &url[url.find("/portal/").expect("a portal path")..];

    // Opened as a browser does: the session cookie, then the pages with it.
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let entered = http
        .get(format!("{}{path}", server.url))
        .send()
        .await
        .unwrap();
    assert_eq!(entered.status(), StatusCode::SEE_OTHER);
    let cookie = entered
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with("kurir_portal="))
        .and_then(|v| v.split(';').next())
        .expect("the session cookie")
        .to_owned();
    // Opened again: refused, and the refusal is logged too.
    let again = http
        .get(format!("{}{path}", server.url))
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), StatusCode::GONE);
    let value = cookie.split_once('=').unwrap().1.to_owned();
    let mut parts = value.split('.');
    let (session_id, mac) = (
        parts.nth(1).expect("p1.<session id>.<mac>").to_owned(),
        parts.next().expect("p1.<session id>.<mac>").to_owned(),
    );
    let page = |method: reqwest::Method, path: String, form: Vec<(&'static str, String)>| {
        let request = http
            .request(method, format!("{}{path}", server.url))
            .header("cookie", &cookie)
            .form(&form);
        async move {
            let response = request.send().await.unwrap();
            let status = response.status();
            let text = response.text().await.unwrap();
            assert!(
                status.is_success() || status.is_redirection(),
                "{path}: {status} {text}"
            );
            text
        }
    };
    let get = reqwest::Method::GET;
    let post = reqwest::Method::POST;
    let shown = page(get.clone(), format!("/portal/endpoints/{endpoint}"), vec![]).await;
    let csrf = between(&shown, r#"name="csrf" value=""#);
    let revealed = page(
        post.clone(),
        format!("/portal/endpoints/{endpoint}/secret"),
        vec![("csrf", csrf.clone())],
    )
    .await;
    assert!(
        revealed.contains(SECRET),
        "the reveal shows the secret: {revealed}"
    );
    page(
        post.clone(),
        format!("/portal/endpoints/{endpoint}/rotate"),
        vec![
            ("csrf", csrf.clone()),
            ("grace_period_seconds", "3600".into()),
        ],
    )
    .await;
    let revealed = page(
        post.clone(),
        format!("/portal/endpoints/{endpoint}/secret"),
        vec![("csrf", csrf.clone())],
    )
    .await;
    let rotated = between(&revealed, r#"id="secret">"#);
    let whole = rotated
        .chars()
        .all(|ch| ch.is_ascii_alphanumeric() || "_+/=".contains(ch));
    assert!(
        whole && rotated.len() > 16 && rotated != SECRET,
        "a new secret: {revealed}"
    );
    let tested = page(
        post,
        "/portal/test".into(),
        vec![("csrf", csrf.clone()), ("endpoint_id", endpoint.clone())],
    )
    .await;
    eventually("the test event", || async {
        (!receiver.received().is_empty()).then_some(())
    })
    .await;
    let signature = receiver.received()[0]
        .header("webhook-signature")
        .to_owned();
    assert!(tested.contains(&signature), "{tested}");
    page(get, "/portal/deliveries".into(), vec![]).await;

    // The log is read from the child's stderr as it comes: a request made last, once logged,
    // says everything before it is in.
    admin(
        &server,
        TOKEN,
        reqwest::Method::GET,
        "/v1/subscribers/cus_log",
        Value::Null,
    )
    .await;
    eventually("the last request logged", || async {
        let log = server.log.lock().unwrap().clone();
        log.contains("/v1/subscribers/cus_log\"").then_some(())
    })
    .await;
    let log = server.log.lock().unwrap().clone();
    assert!(
        log.contains("\"level\":\"DEBUG\""),
        "the server logs at debug level:\n{log}"
    );
    for (what, secret) in [
        ("the endpoint secret", SECRET.trim_start_matches("whsec_")),
        ("the rotated secret", rotated.trim_start_matches("whsec_")),
        ("the link token", &link_token),
        ("the session cookie", &value),
        ("the session id", &session_id),
        ("the session cookie's MAC", &mac),
        ("the CSRF token", &csrf),
        ("a signature", signature.trim_start_matches("v1,")),
    ] {
        assert!(!log.contains(secret), "{what} appears in the log:\n{log}");
    }
}
