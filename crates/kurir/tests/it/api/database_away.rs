//! The database goes away under a running kurir (PostgreSQL behind a proxy the test cuts):
//! readiness says so quickly, publishing answers 503 with `Retry-After` (not 500), and both
//! recover when the database is back.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;

use super::support::{Backend, TestApp, TestDb};
use crate::support::proxy::Proxy;

/// `url` with its host and port replaced by `addr`.
fn through(url: &str, addr: std::net::SocketAddr) -> String {
    let mut url = url::Url::parse(url).unwrap();
    url.set_host(Some(&addr.ip().to_string())).unwrap();
    url.set_port(Some(addr.port())).unwrap();
    url.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_database_away_readiness_fails_fast_and_publishing_answers_503() {
    let Some(database) = TestDb::unmigrated(Backend::Postgres).await else {
        return;
    };
    let server = url::Url::parse(&database.url).unwrap();
    let target = format!(
        "{}:{}",
        server.host_str().unwrap(),
        server.port().unwrap_or(5432)
    );
    let target = tokio::net::lookup_host(target)
        .await
        .unwrap()
        .next()
        .unwrap();
    let proxy = Proxy::start(target).await;
    let proxied = through(&database.url, proxy.addr);
    let app = TestApp::spawn_with(&database, &[("database_url", &proxied)]).await;
    let stop = app.stopper();
    let client = reqwest::Client::new();
    let ready = || {
        client
            .get(format!("{}/readyz", app.url))
            .timeout(Duration::from_secs(3))
    };
    assert_eq!(ready().send().await.unwrap().status(), StatusCode::OK);
    app.publish("order.paid", json!({"n": 1})).await;

    proxy.cut();
    let response = app
        .request(reqwest::Method::POST, "/v1/events")
        .body(json!({"event_type": "order.paid", "data": {"n": 2}}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    let retry_after = response.headers().get("retry-after").cloned();
    let body: serde_json::Value = serde_json::from_slice(&response.bytes().await.unwrap()).unwrap();
    assert_eq!(body["error"]["code"], "database_unavailable", "{body}");
    let retry_after = retry_after.expect("a Retry-After header");
    assert!(retry_after.to_str().unwrap().parse::<u64>().unwrap() >= 1);
    let answer = ready()
        .send()
        .await
        .expect("/readyz answers within its 1 s bound (the client gives it 3 s)");
    assert_eq!(answer.status(), StatusCode::SERVICE_UNAVAILABLE);

    proxy.restore().await;
    super::support::eventually("readiness to come back", || async {
        let status = ready().send().await.ok()?.status();
        (status == StatusCode::OK).then_some(())
    })
    .await;
    app.publish("order.paid", json!({"n": 3})).await;
    stop.stop().await;
    drop(database);
}
