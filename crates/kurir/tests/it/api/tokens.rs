//! Named operator tokens (issue 33, "who did it"): what each role may do on every `/v1` route
//! (the routes read from the OpenAPI document, so a route added later is covered), bad input,
//! revocation and expiry taking effect at once (on a second process sharing the database too),
//! the secret shown once, and the audit recording the token's name and where a replay came from.

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use super::support::{on_both_backends, TestApp, TestDb};
use crate::on_shared_servers;

on_both_backends!(
    a_viewer_only_reads_and_only_an_admin_manages_tokens,
    bad_token_requests_are_refused_naming_what_is_wrong,
    a_named_token_works_until_revoked_or_expired_and_its_secret_is_shown_once,
    the_audit_records_the_tokens_name_and_where_the_replay_came_from,
);

on_shared_servers!(a_token_revoked_on_one_process_is_refused_at_once_by_another);

/// A token created by the admin token: its id and its secret.
pub(crate) async fn create_token(app: &TestApp, name: &str, role: &str) -> (String, String) {
    let (status, body) = app
        .post("/v1/tokens", json!({"name": name, "role": role}))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let secret = body["token"].as_str().expect("the secret, once").to_owned();
    (body["id"].as_str().unwrap().to_owned(), secret)
}

/// `method path` with `token` and `body`; the status and the JSON answer.
pub(crate) async fn call(
    app: &TestApp,
    token: &str,
    method: Method,
    path: &str,
    body: Value,
) -> (StatusCode, Value) {
    let req = reqwest::Client::new()
        .request(method, format!("{}{path}", app.url))
        .bearer_auth(token)
        .header("content-type", "application/json")
        .body(body.to_string());
    app.send(req).await
}

/// Every operation of the OpenAPI document under `/v1` that needs a token, with its path made
/// concrete (each `{parameter}` a value no row has).
pub(crate) async fn v1_operations(app: &TestApp) -> Vec<(Method, String, Value)> {
    let (status, doc) = app.get("/v1/openapi.json").await;
    assert_eq!(status, StatusCode::OK);
    let mut operations = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        if !path.starts_with("/v1/") || path == "/v1/openapi.json" {
            continue;
        }
        let concrete: String = path
            .split('/')
            .map(|segment| match segment.starts_with('{') {
                true => "no-such-thing",
                false => segment,
            })
            .collect::<Vec<_>>()
            .join("/");
        for (method, operation) in item.as_object().unwrap() {
            let method: Method = method.to_uppercase().parse().unwrap();
            operations.push((method, concrete.clone(), operation.clone()));
        }
    }
    assert!(
        operations.len() > 25,
        "the document lists the API: {operations:?}"
    );
    operations
}

async fn a_viewer_only_reads_and_only_an_admin_manages_tokens(app: TestApp) {
    let (_, viewer) = create_token(&app, "grafana", "viewer").await;
    let (_, operator) = create_token(&app, "oncall", "operator").await;
    let (_, admin) = create_token(&app, "platform-team", "admin").await;
    // A subscriber token too (issue 29): which routes it is refused is its own test's
    // business (`api::subscriber_tokens`); here, that each refusal is documented.
    let (status, _) = app
        .post("/v1/subscribers", json!({"id": "cus_1", "name": "One"}))
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, made) = app.post("/v1/subscribers/cus_1/tokens", json!({})).await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    let subscriber = made["token"].as_str().unwrap().to_owned();
    let before = app.snapshot().await;
    let mut operations = v1_operations(&app).await;
    // A route nobody documented is refused to a viewer all the same: any method but GET changes.
    operations.push((Method::PUT, "/v1/a-route-added-later".into(), Value::Null));
    let is_tokens = |path: &str| path == "/v1/tokens" || path.starts_with("/v1/tokens/");
    // A subscriber's tokens are the operators' to manage, not the viewers'.
    let is_subscriber_tokens = |path: &str| {
        path.starts_with("/v1/subscribers/") && path.split('/').nth(4) == Some("tokens")
    };
    for (method, path, documented) in &operations {
        let reads = *method == Method::GET;
        let responses = &documented["responses"];
        for (who, token, allowed) in [
            (
                "viewer",
                &viewer,
                reads && !is_tokens(path) && !is_subscriber_tokens(path),
            ),
            ("operator", &operator, !is_tokens(path)),
            ("admin", &admin, true),
        ] {
            let (status, body) = call(&app, token, method.clone(), path, json!({})).await;
            assert_ne!(status, StatusCode::UNAUTHORIZED, "{who} {method} {path}");
            if allowed {
                assert_ne!(
                    status,
                    StatusCode::FORBIDDEN,
                    "{who} {method} {path}: {body}"
                );
            } else {
                assert_eq!(
                    status,
                    StatusCode::FORBIDDEN,
                    "{who} {method} {path}: {body}"
                );
                assert_eq!(body["error"]["code"], "forbidden");
                let message = body["error"]["message"].as_str().unwrap();
                assert!(message.contains(who), "{message}");
            }
        }
        let (status, _) = call(&app, &subscriber, method.clone(), path, json!({})).await;
        assert_ne!(
            status,
            StatusCode::UNAUTHORIZED,
            "subscriber {method} {path}"
        );
        let subscriber_refused = status == StatusCode::FORBIDDEN;
        if documented.is_object() {
            assert!(
                responses["401"].is_object(),
                "{method} {path} documents its 401"
            );
            assert_eq!(
                responses["403"].is_object(),
                !reads || is_tokens(path) || is_subscriber_tokens(path) || subscriber_refused,
                "{method} {path} documents its 403 exactly when a role or a subscriber token \
                 may be refused"
            );
        }
    }
    assert_eq!(
        app.snapshot().await,
        before,
        "no refused request changed anything"
    );
    let (_, tokens) = call(&app, &admin, Method::GET, "/v1/tokens", Value::Null).await;
    assert_eq!(
        tokens["data"].as_array().unwrap().len(),
        4,
        "the subscriber's token is listed with the others: {tokens}"
    );
}

async fn bad_token_requests_are_refused_naming_what_is_wrong(app: TestApp) {
    let (revoked, _) = create_token(&app, "old-bot", "operator").await;
    assert_eq!(
        app.delete(&format!("/v1/tokens/{revoked}")).await.0,
        StatusCode::NO_CONTENT
    );
    create_token(&app, "alice", "viewer").await;
    let (_, before) = app.get("/v1/tokens").await;
    let past = (chrono::Utc::now() - chrono::Duration::minutes(1)).to_rfc3339();
    let cases = [
        (
            json!({"name": "bob", "role": "root"}),
            400,
            "role",
            "admin, operator or viewer",
        ),
        (json!({"name": "bob"}), 400, "role", "role"),
        (
            json!({"name": "", "role": "viewer"}),
            400,
            "name",
            "1 to 100",
        ),
        (
            json!({"name": "   ", "role": "viewer"}),
            400,
            "name",
            "1 to 100",
        ),
        (
            json!({"name": "x".repeat(101), "role": "viewer"}),
            400,
            "name",
            "1 to 100",
        ),
        (
            json!({"name": "bob\nadmin", "role": "viewer"}),
            400,
            "name",
            "control",
        ),
        (
            json!({"name": "bob", "role": "viewer", "expires_at": past}),
            400,
            "expires_at",
            "not in the future",
        ),
        (
            json!({"name": "bob", "role": "viewer", "expires_at": "tomorrow"}),
            400,
            "expires_at",
            "",
        ),
        (
            json!({"name": "bob", "role": "viewer", "scope": "all"}),
            400,
            "scope",
            "",
        ),
        (
            json!({"name": "alice", "role": "admin"}),
            409,
            "",
            "'alice'",
        ),
        (
            json!({"name": " alice ", "role": "admin"}),
            409,
            "",
            "'alice'",
        ),
        (
            json!({"name": "old-bot", "role": "viewer"}),
            409,
            "",
            "revoked token keeps its name",
        ),
        (
            json!({"name": "admin", "role": "viewer"}),
            409,
            "",
            "'admin'",
        ),
    ];
    for (body, status, field, says) in cases {
        let (got, answer) = app.post("/v1/tokens", body.clone()).await;
        assert_eq!(got.as_u16(), status, "{body}: {answer}");
        let error = &answer["error"];
        if status == 409 {
            assert_eq!(error["code"], "token_name_taken", "{body}: {answer}");
        } else {
            assert_eq!(error["field"], field, "{body}: {answer}");
        }
        let message = error["message"].as_str().unwrap();
        assert!(message.contains(says), "{body}: {message}");
    }
    for (path, field) in [
        ("/v1/tokens?limit=0", "limit"),
        ("/v1/tokens?cursor=bm9wZQ", "cursor"),
    ] {
        let (status, answer) = app.get(path).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {answer}");
        assert_eq!(answer["error"]["field"], field, "{path}");
    }
    for id in ["tok_0190f3c2aaaa7000800000000000beef", "not-a-token-id"] {
        let (status, answer) = app.delete(&format!("/v1/tokens/{id}")).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{id}: {answer}");
        assert!(answer["error"]["message"].as_str().unwrap().contains(id));
    }
    assert_eq!(
        app.get("/v1/tokens").await.1,
        before,
        "nothing stored changed"
    );
}

/// Sets a token's expiry a second into the past, by the database's clock.
async fn expire(app: &TestApp, id: &str) {
    use kurir::store::Store;
    let done = match &app.store {
        Store::Postgres(pg) => sqlx::query(
            "UPDATE kurir_tokens SET expires_at = now() - interval '1 second' WHERE id = $1",
        )
        .bind(id)
        .execute(pg.pool())
        .await
        .map(|d| d.rows_affected()),
        Store::Sqlite(sq) => sqlx::query(
            "UPDATE kurir_tokens SET expires_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-1 second') \
             WHERE id = ?1",
        )
        .bind(id)
        .execute(sq.pool())
        .await
        .map(|d| d.rows_affected()),
        Store::Mysql(my) => sqlx::query(
            "UPDATE kurir_tokens SET expires_at = UTC_TIMESTAMP(3) - INTERVAL 1 SECOND WHERE id = ?",
        )
        .bind(id)
        .execute(my.pool())
        .await
        .map(|d| d.rows_affected()),
    };
    assert_eq!(done.unwrap(), 1);
}

async fn a_named_token_works_until_revoked_or_expired_and_its_secret_is_shown_once(app: TestApp) {
    let in_an_hour = chrono::Utc::now() + chrono::Duration::hours(1);
    let (status, created) = app
        .post(
            "/v1/tokens",
            json!({"name": "deploy-bot", "role": "operator", "expires_at": in_an_hour}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let (id, secret) = (
        created["id"].as_str().unwrap(),
        created["token"].as_str().unwrap(),
    );
    assert!(
        secret.starts_with("kurir_") && secret.len() == 70,
        "{secret}"
    );
    assert_eq!(created["role"], "operator");
    assert_eq!(created["status"], "active");
    assert_eq!(created["created_by"], "admin");
    assert_eq!(created["created_via"], "api");
    let get = |token: &str, path: &'static str| {
        let token = token.to_owned();
        let app = &app;
        async move { call(app, &token, Method::GET, path, Value::Null).await }
    };
    let (status, me) = get(secret, "/v1/whoami").await;
    assert_eq!(status, StatusCode::OK, "{me}");
    assert_eq!(
        me,
        json!({"name": "deploy-bot", "role": "operator", "token_id": id, "via": "api"})
    );
    let (_, me) = app.get("/v1/whoami").await;
    assert_eq!(me, json!({"name": "admin", "role": "admin", "via": "api"}));

    let (_, list) = app.get("/v1/tokens").await;
    assert!(
        !list.to_string().contains(secret),
        "the list never shows the secret: {list}"
    );
    assert!(list["data"][0].get("token").is_none(), "{list}");
    let stored = kurir::store::tokens::token_hash(secret);
    assert_eq!(
        crate::support::scalar(
            &app.store,
            &format!("SELECT COUNT(*) FROM kurir_tokens WHERE secret_hash = '{stored}'")
        )
        .await,
        1,
        "stored as its hash"
    );

    assert_eq!(
        app.delete(&format!("/v1/tokens/{id}")).await.0,
        StatusCode::NO_CONTENT
    );
    let (status, refused) = get(secret, "/v1/stats").await;
    assert_eq!(
        status,
        StatusCode::UNAUTHORIZED,
        "refused at once: {refused}"
    );
    let (_, list) = app.get("/v1/tokens").await;
    let row = &list["data"][0];
    assert_eq!(
        (&row["status"], &row["revoked_by"], &row["revoked_via"]),
        (&json!("revoked"), &json!("admin"), &json!("api")),
        "{row}"
    );
    let revoked_at = row["revoked_at"].clone();
    let (_, admin) = create_token(&app, "second-admin", "admin").await;
    let again = call(
        &app,
        &admin,
        Method::DELETE,
        &format!("/v1/tokens/{id}"),
        Value::Null,
    )
    .await;
    assert_eq!(
        again.0,
        StatusCode::NO_CONTENT,
        "revoking twice is no error"
    );
    let (_, list) = app.get("/v1/tokens").await;
    let row = list["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == id)
        .unwrap();
    assert_eq!(
        (&row["revoked_at"], &row["revoked_by"]),
        (&revoked_at, &json!("admin"))
    );

    let (expiring, secret) = create_token(&app, "contractor", "viewer").await;
    assert_eq!(get(&secret, "/v1/stats").await.0, StatusCode::OK);
    expire(&app, &expiring).await;
    assert_eq!(get(&secret, "/v1/stats").await.0, StatusCode::UNAUTHORIZED);
    let (_, list) = app.get("/v1/tokens").await;
    assert_eq!(list["data"][0]["name"], "contractor");
    assert_eq!(list["data"][0]["status"], "expired");
    let (_, first) = app.get("/v1/tokens?limit=2").await;
    let cursor = first["next_cursor"].as_str().expect("a second page");
    let (_, next) = app
        .get(&format!("/v1/tokens?limit=2&cursor={cursor}"))
        .await;
    assert_eq!(next["data"][0]["name"], "deploy-bot", "{next}");
    assert!(next.get("next_cursor").is_none(), "{next}");
}

async fn the_audit_records_the_tokens_name_and_where_the_replay_came_from(app: TestApp) {
    let (_, operator) = create_token(&app, "oncall-alice", "operator").await;
    let replay = |client: Option<&'static str>| {
        let mut req = reqwest::Client::new()
            .post(format!("{}/v1/replays", app.url))
            .bearer_auth(&operator)
            .body(json!({"reason": "partner is back"}).to_string());
        if let Some(client) = client {
            req = req.header("x-kurir-client", client);
        }
        app.send(req)
    };
    for client in [None, Some("cli"), Some("dashboard")] {
        let (status, body) = replay(client).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    }
    app.post(
        "/v1/replays",
        json!({"reason": "by the environment's token"}),
    )
    .await;
    let (_, audit) = app.get("/v1/replays").await;
    let who: Vec<(&str, &str)> = audit["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["actor"].as_str().unwrap(), r["via"].as_str().unwrap()))
        .collect();
    assert_eq!(
        who,
        [
            ("admin", "api"),
            // Only the CLI's own label counts; a client cannot claim to be the dashboard.
            ("oncall-alice", "api"),
            ("oncall-alice", "cli"),
            ("oncall-alice", "api"),
        ]
    );
}

/// Two `kurir serve` processes on one database (in this test process, each with its own pool):
/// a token created on one works on the other, and once revoked on one, the other refuses it on
/// the next request, the API and a dashboard session alike.
async fn a_token_revoked_on_one_process_is_refused_at_once_by_another(db: TestDb) {
    let one = TestApp::spawn(&db).await;
    let other = TestApp::spawn(&db).await;
    let (id, secret) = create_token(&one, "ci-runner", "operator").await;
    let whoami = || call(&other, &secret, Method::GET, "/v1/whoami", Value::Null);
    assert_eq!(
        whoami().await.0,
        StatusCode::OK,
        "works on the other process"
    );
    let no_redirects = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let signed_in = no_redirects
        .post(format!("{}/ui/login", other.url))
        .form(&[("token", secret.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(signed_in.status(), StatusCode::SEE_OTHER);
    let cookie = signed_in.headers()["set-cookie"].to_str().unwrap();
    let cookie = cookie.split(';').next().unwrap().to_owned();
    let dashboard = || {
        no_redirects
            .get(format!("{}/ui/events", other.url))
            .header("cookie", &cookie)
            .send()
    };
    assert_eq!(dashboard().await.unwrap().status(), StatusCode::OK);

    assert_eq!(
        one.delete(&format!("/v1/tokens/{id}")).await.0,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        whoami().await.0,
        StatusCode::UNAUTHORIZED,
        "the other process refuses it on the very next request"
    );
    let after = dashboard().await.unwrap();
    assert_eq!(
        after.status(),
        StatusCode::SEE_OTHER,
        "its session ended too"
    );
    assert_eq!(after.headers()["location"], "/ui/login");
    one.stopper().stop().await;
    other.stopper().stop().await;
}
