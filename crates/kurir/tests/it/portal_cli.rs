//! Issue 31: `kurir subscribers portal-link ID [--read-only] [--expires-in D] [--return-url U]`,
//! the real binary against a running server on every database. The printed URL opens (raw HTTP)
//! into a session of the subscriber, with the options asked for; its expiry is the one asked for
//! (15 minutes by default). An unknown subscriber, an expiry out of range (`--expires-in 0`) or
//! a bad return URL is refused with the flag or the id named, and makes no link.

use chrono::{DateTime, Utc};
use reqwest::header::{COOKIE, LOCATION, SET_COOKIE};
use reqwest::StatusCode;
use serde_json::{json, Value};

use kurir::store::Store;

use crate::api::support::TestApp;
use crate::api::support::TOKEN;
use crate::cli::{cli_at, cli_ok, kurir};

crate::on_both_backends!(kurir_subscribers_portal_link_prints_a_link_that_opens_a_session);

/// How many portal links are stored.
async fn links(store: &Store) -> i64 {
    let sql = "SELECT COUNT(*) FROM kurir_portal_links";
    match store {
        Store::Sqlite(s) => sqlx::query_scalar(sql).fetch_one(s.pool()).await,
        Store::Postgres(s) => sqlx::query_scalar(sql).fetch_one(s.pool()).await,
        Store::Mysql(s) => sqlx::query_scalar(sql).fetch_one(s.pool()).await,
    }
    .unwrap()
}

/// Opens `url` as a browser would (cookie kept, redirect followed by hand): the page it lands
/// on.
async fn open(url: &str, base: &str) -> String {
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let entered = http.get(url).send().await.unwrap();
    assert_eq!(entered.status(), StatusCode::SEE_OTHER, "{url}");
    assert_eq!(entered.headers()[LOCATION], "/portal/endpoints");
    let cookie = entered.headers()[SET_COOKIE].to_str().unwrap();
    let cookie = cookie.split(';').next().unwrap().to_owned();
    assert!(cookie.starts_with("kurir_portal="), "{cookie}");
    let page = http
        .get(format!("{base}/portal/endpoints"))
        .header(COOKIE, cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    page.text().await.unwrap()
}

/// Whether `at` is `ttl` after a moment between `before` and `after`, give or take 2 s.
fn expires(at: DateTime<Utc>, ttl: chrono::Duration, before: DateTime<Utc>, after: DateTime<Utc>) {
    let slack = chrono::Duration::seconds(2);
    assert!(
        at >= before + ttl - slack && at <= after + ttl + slack,
        "expires at {at}, not {ttl} after {before}"
    );
}

async fn kurir_subscribers_portal_link_prints_a_link_that_opens_a_session(app: TestApp) {
    let (status, body) = app
        .post(
            "/v1/subscribers",
            json!({"id": "cus_8Hq2", "name": "Toko Makmur"}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    app.create_endpoint(
        "https://erp.toko.example/hooks",
        json!({"subscriber_id": "cus_8Hq2"}),
    )
    .await;

    // The defaults: the URL on the first line, its expiry (15 minutes) on the next.
    let before = Utc::now();
    let out = cli_ok(&app, &["subscribers", "portal-link", "cus_8Hq2"]).await;
    let after = Utc::now();
    let mut lines = out.lines();
    let url = lines.next().unwrap();
    assert!(
        url.starts_with(&format!("{}/portal/enter/kurir_portal_", app.url)),
        "{out}"
    );
    let until = lines
        .next()
        .and_then(|l| l.strip_prefix("Opens once, until "))
        .and_then(|l| l.strip_suffix('.'))
        .unwrap_or_else(|| panic!("{out}"));
    expires(
        until.parse().unwrap(),
        chrono::Duration::minutes(15),
        before,
        after,
    );
    let page = open(url, &app.url).await;
    assert!(
        page.contains("erp.toko.example") && page.contains("Toko Makmur"),
        "{page}"
    );
    assert!(
        page.contains("Add endpoint"),
        "a session that may change things"
    );
    let used = reqwest::Client::new().get(url).send().await.unwrap();
    assert_eq!(used.status(), StatusCode::GONE, "single use");

    // A reader that has gone (`kurir subscribers portal-link … | head -1` after its line): the
    // command still ends well. Its stdout is closed before it has made its request, so its
    // first line meets a closed pipe (it panicked there, as `println!` does).
    let dir = tempfile::tempdir().unwrap();
    let mut child = kurir(dir.path())
        .args(["subscribers", "portal-link", "cus_8Hq2"])
        .env("KURIR_URL", &app.url)
        .env("KURIR_ADMIN_TOKEN", TOKEN)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let ended = child.wait_with_output().await.unwrap();
    let stderr = String::from_utf8_lossy(&ended.stderr);
    assert!(
        ended.status.success() && !stderr.contains("panicked"),
        "{}: {stderr}",
        ended.status
    );

    // Every option.
    let before = Utc::now();
    let made = cli_ok(
        &app,
        &[
            "subscribers",
            "portal-link",
            "cus_8Hq2",
            "--read-only",
            "--expires-in",
            "2h",
            "--return-url",
            "https://app.example/settings",
            "--json",
        ],
    )
    .await;
    let after = Utc::now();
    let made: Value = serde_json::from_str(&made).unwrap_or_else(|e| panic!("{e}: {made}"));
    let at = made["expires_at"].as_str().unwrap().parse().unwrap();
    expires(at, chrono::Duration::hours(2), before, after);
    let page = open(made["url"].as_str().unwrap(), &app.url).await;
    assert!(page.contains("A read-only session"), "{page}");
    assert!(!page.contains("Add endpoint"), "{page}");
    assert!(
        page.contains("href=\"https://app.example/settings\""),
        "the Back link: {page}"
    );

    // Bad input: named, and no link made.
    let stored = links(&app.store).await;
    for (args, named) in [
        (
            vec!["subscribers", "portal-link", "cus_nobody"],
            "no subscriber with id 'cus_nobody'",
        ),
        (
            vec![
                "subscribers",
                "portal-link",
                "cus_8Hq2",
                "--expires-in",
                "0",
            ],
            "'--expires-in <EXPIRES_IN>': 0s is out of range: a link may wait from 1m to 7days",
        ),
        (
            vec![
                "subscribers",
                "portal-link",
                "cus_8Hq2",
                "--expires-in",
                "8d",
            ],
            "'--expires-in <EXPIRES_IN>': 8days is out of range",
        ),
        (
            vec![
                "subscribers",
                "portal-link",
                "cus_8Hq2",
                "--expires-in",
                "soon",
            ],
            "'--expires-in <EXPIRES_IN>'",
        ),
        (
            vec![
                "subscribers",
                "portal-link",
                "cus_8Hq2",
                "--return-url",
                "javascript:alert(1)",
            ],
            "return_url: must start with http:// or https://",
        ),
    ] {
        let (ok, stdout, stderr) = cli_at(&app, &args).await;
        assert!(!ok, "{args:?}: {stdout}");
        assert!(stderr.contains(named), "{args:?}: {stderr}");
        assert!(!stdout.contains("/portal/enter/"), "{args:?}: {stdout}");
    }
    assert_eq!(links(&app.store).await, stored, "no link made");
}
