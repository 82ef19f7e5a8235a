//! The dashboard's security and answers over plain HTTP, on both backends: pages need a session,
//! the session cookie's attributes, a state-changing form without the session's CSRF token is
//! refused and changes nothing, a list answers htmx with its rows only, and `/` leads to `/ui/`.

use reqwest::header::{COOKIE, LOCATION, SET_COOKIE};
use reqwest::redirect::Policy;
use reqwest::StatusCode;
use serde_json::json;

use crate::api::replays::sent_and_dead_lettered;
use crate::api::support::{on_both_backends, Receiver, TestApp, TOKEN};
use crate::api::tokens::create_token;

on_both_backends!(
    pages_need_a_session_and_forms_need_its_csrf_token,
    lists_answer_htmx_with_their_rows_only,
    the_dead_letter_rows_carry_the_bulk_replay_link_of_their_filter,
    the_event_page_replays_what_failed_and_resends_only_when_asked,
    the_endpoints_page_shows_a_page_at_a_time_and_links_the_next,
    a_viewer_sees_no_control_and_the_server_refuses_its_forms,
    the_inbox_retries_audit_lists_every_retry_newest_first_a_page_at_a_time,
);

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(Policy::none())
        .build()
        .unwrap()
}

/// Signs in; the `Cookie` header value of the session and the CSRF token of its forms.
pub(crate) async fn sign_in(app: &TestApp, forwarded_proto: Option<&str>) -> (String, String) {
    let mut request = client()
        .post(format!("{}/ui/login", app.url))
        .form(&[("token", TOKEN)]);
    if let Some(proto) = forwarded_proto {
        request = request.header("x-forwarded-proto", proto);
    }
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), StatusCode::SEE_OTHER);
    let set = response.headers()[SET_COOKIE].to_str().unwrap().to_owned();
    assert!(
        set.contains("HttpOnly") && set.contains("SameSite=Strict") && set.contains("Path=/"),
        "{set}"
    );
    assert_eq!(
        set.contains("; Secure"),
        forwarded_proto == Some("https"),
        "{set}"
    );
    let cookie = set.split(';').next().unwrap().to_owned();
    let page = client()
        .get(format!("{}/ui/endpoints/new", app.url))
        .header(COOKIE, &cookie)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let csrf = page
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("the form carries a CSRF token")
        .to_owned();
    (cookie, csrf)
}

async fn pages_need_a_session_and_forms_need_its_csrf_token(app: TestApp) {
    let root = client().get(format!("{}/", app.url)).send().await.unwrap();
    assert_eq!(root.headers()[LOCATION], "/ui/");
    let login = client()
        .get(format!("{}/ui/login", app.url))
        .send()
        .await
        .unwrap();
    let policy = login.headers()["content-security-policy"].to_str().unwrap();
    assert!(policy.contains("frame-ancestors 'none'"), "{policy}");
    assert_eq!(login.headers()["x-frame-options"], "DENY");
    for path in [
        "/ui/",
        "/ui/endpoints",
        "/ui/dead-letters",
        "/ui/audit",
        "/ui/inbox",
    ] {
        let page = client()
            .get(format!("{}{path}", app.url))
            .send()
            .await
            .unwrap();
        assert_eq!(page.status(), StatusCode::SEE_OTHER, "{path}");
        assert_eq!(page.headers()[LOCATION], "/ui/login", "{path}");
    }
    let forged = client()
        .get(format!("{}/ui/endpoints", app.url))
        .header(COOKIE, "kurir_session=v1.99999999999.00.forged")
        .send()
        .await
        .unwrap();
    assert_eq!(
        forged.headers()[LOCATION],
        "/ui/login",
        "a forged cookie is no session"
    );
    let wrong = client()
        .post(format!("{}/ui/login", app.url))
        .form(&[("token", "nope")])
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    assert!(wrong.headers().get(SET_COOKIE).is_none());

    sign_in(&app, Some("https")).await;
    let (cookie, csrf) = sign_in(&app, None).await;
    let create = |token: Option<&str>| {
        let mut form = vec![("url", "https://partner.example/hooks")];
        if let Some(token) = token {
            form.push(("csrf", token));
        }
        client()
            .post(format!("{}/ui/endpoints", app.url))
            .header(COOKIE, &cookie)
            .form(&form)
            .send()
    };
    for bad in [None, Some("0123abcd")] {
        let refused = create(bad).await.unwrap();
        assert!(
            refused.status().is_client_error(),
            "{bad:?}: {}",
            refused.status()
        );
        assert_eq!(
            app.get("/v1/endpoints").await.1,
            json!({"data": []}),
            "nothing created"
        );
    }
    let created = create(Some(&csrf)).await.unwrap();
    assert_eq!(created.status(), StatusCode::OK);
    let page = created.text().await.unwrap();
    assert!(page.contains("Signing secret") && page.contains("whsec_"));
    assert_eq!(
        app.get("/v1/endpoints").await.1["data"]
            .as_array()
            .unwrap()
            .len(),
        1
    );

    let signed_out = client()
        .post(format!("{}/ui/logout", app.url))
        .header(COOKIE, &cookie)
        .form(&[("csrf", csrf.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(signed_out.headers()[LOCATION], "/ui/login?signed_out=1");
    assert!(signed_out.headers()[SET_COOKIE]
        .to_str()
        .unwrap()
        .contains("Max-Age=0"));
}

async fn lists_answer_htmx_with_their_rows_only(app: TestApp) {
    app.publish("order.paid", json!({"n": 1})).await;
    let (cookie, _) = sign_in(&app, None).await;
    let get = |htmx: bool| {
        let mut request = client()
            .get(format!("{}/ui/events?event_type=order.paid", app.url))
            .header(COOKIE, &cookie);
        if htmx {
            request = request.header("hx-request", "true");
        }
        request.send()
    };
    let page = get(false).await.unwrap().text().await.unwrap();
    assert!(page.starts_with("<!doctype html>") && page.contains("order.paid"));
    let rows = get(true).await.unwrap().text().await.unwrap();
    assert!(!rows.contains("<html") && rows.contains("<table") && rows.contains("order.paid"));
    let docs = client()
        .get(format!("{}/docs", app.url))
        .send()
        .await
        .unwrap();
    assert_eq!(
        docs.status(),
        StatusCode::OK,
        "the reference needs no session"
    );
    assert!(docs.text().await.unwrap().contains("list_inbox_events"));
}

/// Regression: the htmx answer to a filter change left "Replay all that match…" outside the
/// rows it replaced, so the link kept the filter of the first page load.
async fn the_dead_letter_rows_carry_the_bulk_replay_link_of_their_filter(app: TestApp) {
    let (cookie, _) = sign_in(&app, None).await;
    let id = "01900000-0000-7000-8000-000000000001";
    let rows = client()
        .get(format!(
            "{}/ui/dead-letters?endpoint_id={id}&event_type=a.b",
            app.url
        ))
        .header(COOKIE, &cookie)
        .header("hx-request", "true")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
        .replace("&#38;", "&");
    assert!(!rows.contains("<html"), "{rows}");
    assert!(
        rows.contains(&format!(
            "href=\"/ui/dead-letters/replay?endpoint_id={id}&event_type=a.b\""
        )),
        "the swapped rows bring the link of their own filter: {rows}"
    );
}

/// Regression: the event page's replay re-sent deliveries that had succeeded. Its replay of
/// the whole event takes what did not succeed; re-sending a sent one is asked for explicitly.
async fn the_event_page_replays_what_failed_and_resends_only_when_asked(app: TestApp) {
    let (ok, down) = (Receiver::start().await, Receiver::start().await);
    let (event_id, healthy, _) = sent_and_dead_lettered(&app, &ok, &down).await;
    let (cookie, csrf) = sign_in(&app, None).await;
    let post = |form: Vec<(&'static str, String)>| {
        client()
            .post(format!("{}/ui/events/{event_id}/replay", app.url))
            .header(COOKIE, &cookie)
            .form(&form)
            .send()
    };
    let refused = post(vec![
        ("csrf", csrf.clone()),
        ("endpoint_id", healthy.clone()),
        ("reason", "again".into()),
    ])
    .await
    .unwrap();
    assert_eq!(
        refused.status(),
        StatusCode::CONFLICT,
        "a sent delivery is not re-sent unasked"
    );
    let whole = post(vec![
        ("csrf", csrf.clone()),
        ("reason", "partner is back".into()),
    ])
    .await
    .unwrap();
    assert_eq!(whole.status(), StatusCode::SEE_OTHER);
    down.wait_for(2).await;
    app.wait_for_deliveries(&event_id, "sent").await;
    assert_eq!(
        ok.received().len(),
        1,
        "the healthy receiver got no duplicate"
    );

    let page = client()
        .get(format!("{}/ui/events/{event_id}", app.url))
        .header(COOKIE, &cookie)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        page.contains("name=\"include_sent\" type=\"checkbox\""),
        "the event's replay offers re-sending explicitly: {page}"
    );
    let resend = post(vec![
        ("csrf", csrf),
        ("endpoint_id", healthy),
        ("include_sent", "true".into()),
        ("reason", "resend".into()),
    ])
    .await
    .unwrap();
    assert_eq!(resend.status(), StatusCode::SEE_OTHER);
    ok.wait_for(2).await;
    let (_, audit) = app.get("/v1/replays").await;
    let filters: Vec<_> = audit["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["filter"].clone())
        .collect();
    assert_eq!(
        filters.len(),
        2,
        "the refused one is not audited: {filters:?}"
    );
    assert_eq!(filters[1], json!({"event_id": event_id}));
}

/// Issues 27 and 33: the endpoints page shows one page, the oldest first, with a link to the
/// next; the dead letters' endpoint filter is a field for the id, not a list of every endpoint.
async fn the_endpoints_page_shows_a_page_at_a_time_and_links_the_next(app: TestApp) {
    for n in 0..51 {
        let url = format!("https://e{n:02}.example/");
        let new = kurir::endpoint::NewEndpoint::new(&url);
        app.store.create_endpoint(new).await.unwrap();
    }
    let (cookie, _) = sign_in(&app, None).await;
    let page = |path: String| {
        let cookie = cookie.clone();
        async move {
            let response = client()
                .get(path)
                .header(COOKIE, cookie)
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), StatusCode::OK);
            response.text().await.unwrap()
        }
    };
    let first = page(format!("{}/ui/endpoints", app.url)).await;
    assert!(
        first.contains("https://e00.example/") && first.contains("https://e49.example/"),
        "the oldest 50: {first}"
    );
    assert!(!first.contains("https://e50.example/"), "{first}");
    let next = first
        .split("href=\"/ui/endpoints?cursor=")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("a link to the next page");
    let second = page(format!("{}/ui/endpoints?cursor={next}", app.url)).await;
    assert!(second.contains("https://e50.example/"), "{second}");
    assert!(!second.contains("https://e49.example/"), "{second}");
    assert!(!second.contains("/ui/endpoints?cursor="), "the last page");

    let id = "01900000-0000-7000-8000-000000000001";
    let dead = page(format!("{}/ui/dead-letters?endpoint_id={id}", app.url)).await;
    assert!(
        dead.contains(&format!("name=\"endpoint_id\" type=\"text\" class=\"mono\" placeholder=\"every endpoint\" value=\"{id}\"")),
        "{dead}"
    );
    assert!(
        !dead.contains("https://e00.example/"),
        "no endpoint read for the filter"
    );
}

/// Signs in with `token`; the `Cookie` header value and the CSRF token of the sign-out form
/// (the one form every role's pages carry).
pub(crate) async fn sign_in_with(app: &TestApp, token: &str) -> (String, String) {
    let response = client()
        .post(format!("{}/ui/login", app.url))
        .form(&[("token", token)])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::SEE_OTHER);
    let set = response.headers()[SET_COOKIE].to_str().unwrap();
    let cookie = set.split(';').next().unwrap().to_owned();
    let page = client()
        .get(format!("{}/ui/", app.url))
        .header(COOKIE, &cookie)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let csrf = page
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("the sign-out form carries a CSRF token")
        .to_owned();
    (cookie, csrf)
}

/// Issue 33: a viewer's dashboard shows no control that changes something, and the server
/// refuses each of those forms from a viewer's session even with its valid CSRF token. An
/// operator's pages keep them; every role signs out.
async fn a_viewer_sees_no_control_and_the_server_refuses_its_forms(app: TestApp) {
    let (ok, down) = (Receiver::start().await, Receiver::start().await);
    let (event_id, healthy, _) = sent_and_dead_lettered(&app, &ok, &down).await;
    let (_, viewer) = create_token(&app, "auditor", "viewer").await;
    let (_, operator) = create_token(&app, "oncall", "operator").await;
    let (cookie, csrf) = sign_in_with(&app, &viewer).await;
    let base = app.url.clone();
    let get = |cookie: String, path: String| {
        let url = format!("{base}{path}");
        async move {
            let response = client()
                .get(url)
                .header(COOKIE, cookie)
                .send()
                .await
                .unwrap();
            (response.status(), response.text().await.unwrap())
        }
    };
    let pages = [
        "/ui/".to_owned(),
        "/ui/endpoints".to_owned(),
        format!("/ui/endpoints/{healthy}"),
        format!("/ui/events/{event_id}"),
        "/ui/dead-letters".to_owned(),
        "/ui/audit".to_owned(),
        "/ui/inbox".to_owned(),
    ];
    for path in &pages {
        let (status, page) = get(cookie.clone(), path.clone()).await;
        assert_eq!(status, StatusCode::OK, "{path}");
        assert!(
            page.contains("id=\"signed-in\"")
                && page.contains("auditor")
                && page.contains("viewer"),
            "{path} says who is signed in: {page}"
        );
        assert!(
            page.contains("id=\"read-only\""),
            "{path} says it is read-only"
        );
        assert_eq!(
            page.matches("method=\"post\"").count(),
            1,
            "{path}: no form but signing out: {page}"
        );
        for control in ["/ui/endpoints/new", "/ui/dead-letters/replay"] {
            assert!(!page.contains(control), "{path} links {control}: {page}");
        }
    }
    for path in ["/ui/endpoints/new", "/ui/dead-letters/replay"] {
        let (status, page) = get(cookie.clone(), path.to_owned()).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{path}: {page}");
    }
    let before = app.snapshot().await;
    let forged: [(String, &[(&str, &str)]); 8] = [
        (
            "/ui/endpoints".into(),
            &[("url", "https://forged.example/")],
        ),
        (
            format!("/ui/endpoints/{healthy}"),
            &[("url", "https://forged.example/")],
        ),
        (
            format!("/ui/endpoints/{healthy}/enabled"),
            &[("enabled", "false")],
        ),
        (format!("/ui/endpoints/{healthy}/rotate"), &[]),
        (format!("/ui/endpoints/{healthy}/test"), &[]),
        (
            format!("/ui/events/{event_id}/replay"),
            &[("reason", "forged")],
        ),
        ("/ui/dead-letters/replay".into(), &[("reason", "forged")]),
        ("/ui/inbox/billing/events/evt_1/retry".into(), &[]),
    ];
    for (path, fields) in &forged {
        let mut form = vec![("csrf", csrf.as_str())];
        form.extend_from_slice(fields);
        let refused = client()
            .post(format!("{}{path}", app.url))
            .header(COOKIE, &cookie)
            .form(&form)
            .send()
            .await
            .unwrap();
        assert_eq!(refused.status(), StatusCode::FORBIDDEN, "{path}");
        let page = refused.text().await.unwrap();
        assert!(page.contains("viewer"), "{path} says why: {page}");
    }
    assert_eq!(
        app.snapshot().await,
        before,
        "no forged form changed anything"
    );
    assert_eq!(
        ok.received().len() + down.received().len(),
        2,
        "nothing was sent"
    );

    let (operator_cookie, _) = sign_in_with(&app, &operator).await;
    let (_, page) = get(operator_cookie, format!("/ui/events/{event_id}")).await;
    assert!(
        page.contains(&format!("action=\"/ui/events/{event_id}/replay\""))
            && !page.contains("id=\"read-only\""),
        "an operator keeps the controls: {page}"
    );
    let signed_out = client()
        .post(format!("{}/ui/logout", app.url))
        .header(COOKIE, &cookie)
        .form(&[("csrf", csrf.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(
        signed_out.headers()[LOCATION],
        "/ui/login?signed_out=1",
        "a viewer signs out"
    );
}

async fn the_inbox_retries_audit_lists_every_retry_newest_first_a_page_at_a_time(app: TestApp) {
    use kurir::access::{Actor, Via};
    let actor = Actor::bootstrap("admin", Via::Cli);
    for n in 0..51 {
        let event_id = format!("evt_{n:02}");
        app.store
            .record_inbox_retry("billing", &event_id, &actor)
            .await
            .unwrap();
    }
    let (cookie, _) = sign_in(&app, None).await;
    let get = |path: String| {
        let cookie = cookie.clone();
        async move {
            let response = client()
                .get(path)
                .header(COOKIE, cookie)
                .send()
                .await
                .unwrap();
            (response.status(), response.text().await.unwrap())
        }
    };
    let (status, replays) = get(format!("{}/ui/audit", app.url)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(replays.contains("href=\"/ui/audit/inbox\""), "{replays}");
    let (status, first) = get(format!("{}/ui/audit/inbox", app.url)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        first.contains("href=\"/ui/inbox/billing/events/evt_50\"")
            && first.contains("/events/evt_01\""),
        "the newest 50 link to their events: {first}"
    );
    assert!(!first.contains("/events/evt_00\""), "{first}");
    assert!(first.contains(">cli<"), "from where: {first}");
    let next = first
        .split("href=\"/ui/audit/inbox?before=")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("a link to the older page");
    let (_, older) = get(format!("{}/ui/audit/inbox?before={next}", app.url)).await;
    assert!(older.contains("/events/evt_00\""), "{older}");
    assert!(!older.contains("/events/evt_01\""), "{older}");
    let (status, bad) = get(format!("{}/ui/audit/inbox?before=soon", app.url)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
}
