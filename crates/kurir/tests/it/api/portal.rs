//! The subscriber portal over raw HTTP (issue 31), on every database: links (options, single
//! use, expiry), sessions re-checked on every request by every process (revoked, disabled,
//! deleted), who may make links, the dashboard refusing a portal cookie, and isolation: with
//! A's session, B's endpoint ids in every portal URL and form answer as missing ones, and
//! nothing of B's changes.

use reqwest::header::{COOKIE, LOCATION, SET_COOKIE};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use super::support::{on_both_backends, TestApp, TestDb};
use kurir::store::Store;

on_both_backends!(portal_links_sessions_and_isolation);

/// A client that shows redirects instead of following them.
fn browser() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

pub(super) async fn link(app: &TestApp, subscriber: &str, body: Value) -> String {
    let (status, made) = app
        .post(&format!("/v1/subscribers/{subscriber}/portal-links"), body)
        .await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    assert!(made["expires_at"].is_string(), "{made}");
    made["url"].as_str().unwrap().to_owned()
}

/// Opens `url`; the status and the session cookie (`name=value`) it set, if any.
pub(super) async fn open(url: &str) -> (StatusCode, Option<String>, String) {
    let resp = browser().get(url).send().await.unwrap();
    let status = resp.status();
    let cookie = resp
        .headers()
        .get(SET_COOKIE)
        .map(|c| c.to_str().unwrap().split(';').next().unwrap().to_owned());
    if status == StatusCode::SEE_OTHER {
        assert_eq!(
            resp.headers()[LOCATION],
            "/portal/endpoints",
            "no token in it"
        );
    }
    (status, cookie, resp.text().await.unwrap())
}

pub(super) async fn page(
    app: &TestApp,
    cookie: &str,
    method: Method,
    path: &str,
    form: &str,
) -> (StatusCode, String) {
    let resp = browser()
        .request(method, format!("{}{path}", app.url))
        .header(COOKIE, cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form.to_owned())
        .send()
        .await
        .unwrap();
    let status = resp.status();
    let cache = resp
        .headers()
        .get("cache-control")
        .map(|v| v.to_str().unwrap().to_owned());
    assert_eq!(cache.as_deref(), Some("no-store"), "{path}");
    (status, resp.text().await.unwrap())
}

/// The CSRF token of a page's forms.
fn csrf(html: &str) -> String {
    let at = html
        .find("name=\"csrf\" value=\"")
        .expect("a form with a CSRF token")
        + 19;
    html[at..].split('"').next().unwrap().to_owned()
}

async fn sql(store: &Store, text: &str) {
    match store {
        Store::Postgres(s) => sqlx::query(text).execute(s.pool()).await.map(drop),
        Store::Sqlite(s) => sqlx::query(text).execute(s.pool()).await.map(drop),
        Store::Mysql(s) => sqlx::query(text).execute(s.pool()).await.map(drop),
    }
    .unwrap();
}

async fn portal_links_sessions_and_isolation(db: TestDb) {
    let app = TestApp::spawn(&db).await;
    let other = TestApp::spawn(&db).await;
    for (id, name) in [("cus_a", "Acme"), ("cus_b", "Bolt")] {
        let (status, body) = app
            .post("/v1/subscribers", json!({"id": id, "name": name}))
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    let mine = app
        .create_endpoint("https://a.example/hook", json!({"subscriber_id": "cus_a"}))
        .await;
    let theirs = app
        .create_endpoint("https://b.example/hook", json!({"subscriber_id": "cus_b"}))
        .await;
    let theirs_id = theirs["id"].as_str().unwrap();

    // Options are checked, each error naming its field.
    for (body, field) in [
        (json!({"expires_in": 5}), "expires_in"),
        (json!({"expires_in": 999_999_999}), "expires_in"),
        (json!({"return_url": "javascript:alert(1)"}), "return_url"),
        (json!({"colour": 1}), "colour"),
    ] {
        let (status, refused) = app.post("/v1/subscribers/cus_a/portal-links", body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
        assert!(refused.to_string().contains(field), "{refused}");
    }
    let (status, _) = app
        .post("/v1/subscribers/cus_nobody/portal-links", json!({}))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // A subscriber token makes no link.
    let (_, token) = app.post("/v1/subscribers/cus_a/tokens", json!({})).await;
    let sub_token = token["token"].as_str().unwrap();
    let refused = reqwest::Client::new()
        .post(format!("{}/v1/subscribers/cus_a/portal-links", app.url))
        .bearer_auth(sub_token)
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);

    // Single use: the second opening says so in plain words.
    let url = link(
        &app,
        "cus_a",
        json!({"return_url": "https://app.example/settings"}),
    )
    .await;
    assert!(url.starts_with(&app.url), "{url}");
    let (status, cookie, _) = open(&url).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let cookie = cookie.expect("a session cookie");
    let (status, again, text) = open(&url).await;
    assert_eq!(status, StatusCode::GONE);
    assert!(
        again.is_none() && text.contains("already been used"),
        "{text}"
    );
    let (status, _, text) = open(&format!("{}/portal/enter/kurir_portal_nothing", app.url)).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(text.contains("does not work"), "{text}");

    // An expired link.
    let stale = link(&app, "cus_a", json!({})).await;
    sql(
        &app.store,
        "UPDATE kurir_portal_links SET expires_at = created_at WHERE used_at IS NULL",
    )
    .await;
    let (status, _, text) = open(&stale).await;
    assert_eq!(status, StatusCode::GONE);
    assert!(text.contains("expired"), "{text}");

    // The session works on both processes, shows A's endpoint and not B's.
    let (status, list) = page(&other, &cookie, Method::GET, "/portal/endpoints", "").await;
    assert_eq!(status, StatusCode::OK, "{list}");
    assert!(
        list.contains("a.example") && !list.contains("b.example"),
        "{list}"
    );
    assert!(list.contains("Acme") && list.contains("https://app.example/settings"));
    let token = csrf(&list);

    // The dashboard refuses the portal's cookie, under its own name too.
    let value = cookie.split_once('=').unwrap().1;
    for sent in [cookie.clone(), format!("kurir_session={value}")] {
        let resp = browser()
            .get(format!("{}/ui/", app.url))
            .header(COOKIE, sent)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.headers()[LOCATION], "/ui/login");
    }

    // Isolation: B's endpoint id in every portal URL and form, as a missing id.
    let before = app.snapshot().await;
    let missing = "0190f2b8-0000-7000-8000-000000000000";
    for id in [theirs_id, missing] {
        let form = format!("csrf={token}&url=https%3A%2F%2Fevil.example%2F&enabled=false");
        for (method, path) in [
            (Method::GET, format!("/portal/endpoints/{id}")),
            (Method::POST, format!("/portal/endpoints/{id}")),
            (Method::POST, format!("/portal/endpoints/{id}/enabled")),
            (Method::GET, format!("/portal/endpoints/{id}/delete")),
            (Method::POST, format!("/portal/endpoints/{id}/delete")),
            (Method::POST, format!("/portal/endpoints/{id}/secret")),
            (Method::POST, format!("/portal/endpoints/{id}/rotate")),
        ] {
            let (status, body) = page(&app, &cookie, method.clone(), &path, &form).await;
            assert_eq!(status, StatusCode::NOT_FOUND, "{method} {path}: {body}");
            assert!(
                body.contains("no endpoint with id") && body.contains(id),
                "{body}"
            );
        }
    }
    assert_eq!(app.snapshot().await, before, "nothing of B's changed");
    // A form without the session's CSRF token is refused.
    let path = format!("/portal/endpoints/{}/enabled", mine["id"].as_str().unwrap());
    let (status, _) = page(
        &app,
        &cookie,
        Method::POST,
        &path,
        "csrf=forged&enabled=false",
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(app.snapshot().await, before);

    // Read-only: the page hides the controls and the server refuses them.
    let (_, reader, _) = open(&link(&app, "cus_a", json!({"read_only": true})).await).await;
    let reader = reader.unwrap();
    let mine_path = format!("/portal/endpoints/{}", mine["id"].as_str().unwrap());
    let (status, shown) = page(&app, &reader, Method::GET, &mine_path, "").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        !shown.contains("Rotate secret") && !shown.contains("Save changes"),
        "{shown}"
    );
    let reader_csrf = csrf(&shown);
    for suffix in ["/enabled", "/secret", "/rotate", "/delete", ""] {
        let form = format!("csrf={reader_csrf}&enabled=false&url=https%3A%2F%2Fx.example%2F");
        let (status, _) = page(
            &app,
            &reader,
            Method::POST,
            &format!("{mine_path}{suffix}"),
            &form,
        )
        .await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{suffix}");
    }
    assert_eq!(
        app.snapshot().await,
        before,
        "a read-only session changed nothing"
    );

    // Revoking signs every session out at its next request, on the other process too, and
    // withdraws unused links.
    let unused = link(&app, "cus_a", json!({})).await;
    let (status, _) = app.delete("/v1/subscribers/cus_a/portal-sessions").await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = page(&other, &cookie, Method::GET, "/portal/endpoints", "").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _, text) = open(&unused).await;
    assert_eq!(status, StatusCode::GONE, "{text}");

    // Disabling, then deleting, the subscriber signs its new session out.
    let (_, fresh, _) = open(&link(&app, "cus_a", json!({})).await).await;
    let fresh = fresh.unwrap();
    let (status, _) = page(&other, &fresh, Method::GET, "/portal/endpoints", "").await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = app
        .patch("/v1/subscribers/cus_a", json!({"enabled": false}))
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = page(&other, &fresh, Method::GET, "/portal/endpoints", "").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _) = app
        .patch("/v1/subscribers/cus_a", json!({"enabled": true}))
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = page(&other, &fresh, Method::GET, "/portal/endpoints", "").await;
    assert_eq!(status, StatusCode::OK, "enabled again, within its time");
    let (status, _) = app.delete("/v1/subscribers/cus_a").await;
    assert!(status.is_success());
    let (status, _) = page(&other, &fresh, Method::GET, "/portal/endpoints", "").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    other.stopper().stop().await;
    app.stopper().stop().await;
}
