//! The dashboard's security and answers over plain HTTP, on both backends: pages need a session,
//! the session cookie's attributes, a state-changing form without the session's CSRF token is
//! refused and changes nothing, a list answers htmx with its rows only, and `/` leads to `/ui/`.

use reqwest::header::{COOKIE, LOCATION, SET_COOKIE};
use reqwest::redirect::Policy;
use reqwest::StatusCode;
use serde_json::json;

use crate::api::support::{on_both_backends, TestApp, TOKEN};

on_both_backends!(
    pages_need_a_session_and_forms_need_its_csrf_token,
    lists_answer_htmx_with_their_rows_only
);

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(Policy::none())
        .build()
        .unwrap()
}

/// Signs in; the `Cookie` header value of the session and the CSRF token of its forms.
async fn sign_in(app: &TestApp, forwarded_proto: Option<&str>) -> (String, String) {
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
            json!([]),
            "nothing created"
        );
    }
    let created = create(Some(&csrf)).await.unwrap();
    assert_eq!(created.status(), StatusCode::OK);
    let page = created.text().await.unwrap();
    assert!(page.contains("Signing secret") && page.contains("whsec_"));
    assert_eq!(
        app.get("/v1/endpoints").await.1.as_array().unwrap().len(),
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
