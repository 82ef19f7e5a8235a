//! Issue 31, the subscriber portal's deliveries, replay and test pages over raw HTTP, against a
//! real `kurir serve` on every database: a session sees only its subscriber's deliveries and
//! events; another subscriber's ids edited into URLs and form fields answer 404 as missing ones
//! do, and nothing of theirs is replayed or sent; a replay from the portal is audited as the
//! portal's and its subscriber's; a read-only session is refused every replay and test (403).

use reqwest::{redirect, StatusCode};
use serde_json::{json, Value};

use kurir::access::Via;
use kurir::store::portal::NewPortalLink;

use crate::api::support::{eventually, on_both_backends, Backend, Receiver, TestApp, TestDb};

on_both_backends!(with super::run;
    a_portal_session_reads_replays_and_tests_only_its_own_subscribers_deliveries,
    a_read_only_portal_session_is_refused_every_replay_and_test,
);

async fn run<F, Fut>(backend: Backend, test: F)
where
    F: FnOnce(TestApp) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let Some(database) = TestDb::unmigrated(backend).await else {
        return;
    };
    // One attempt: a delivery the receiver refuses is a dead letter at once.
    let app = TestApp::spawn_with(&database, &[("retry_max_attempts", "1")]).await;
    let stop = app.stopper();
    test(app).await;
    stop.stop().await;
    drop(database);
}

/// A browser of the portal, over raw HTTP: its session cookie and its forms' CSRF token.
pub struct Portal {
    http: reqwest::Client,
    base: String,
    cookie: String,
    csrf: String,
}

impl Portal {
    /// Opens a new portal link of `subscriber`. Made through the store: the links' API route
    /// is the portal's first half's (`POST /v1/subscribers/{id}/portal-links`), tested there.
    pub async fn open(app: &TestApp, subscriber: &str, read_only: bool) -> Self {
        let path = link_path(app, subscriber, read_only).await;
        let http = reqwest::Client::builder()
            .redirect(redirect::Policy::none())
            .build()
            .unwrap();
        let entered = http.get(format!("{}{path}", app.url)).send().await.unwrap();
        assert!(entered.status().is_redirection(), "{}", entered.status());
        let cookie = entered
            .headers()
            .get_all("set-cookie")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find(|v| v.starts_with("kurir_portal="))
            .and_then(|v| v.split(';').next())
            .expect("the session cookie")
            .to_owned();
        let mut portal = Self {
            http,
            base: app.url.clone(),
            cookie,
            csrf: String::new(),
        };
        let (_, page) = portal.get("/portal/verify").await;
        portal.csrf = page
            .split_once(r#"name="csrf" value=""#)
            .and_then(|(_, rest)| rest.split_once('"'))
            .expect("a form with the CSRF token")
            .0
            .to_owned();
        portal
    }

    /// `GET path`: the status and the page.
    pub async fn get(&self, path: &str) -> (StatusCode, String) {
        let resp = self
            .http
            .get(format!("{}{path}", self.base))
            .header("cookie", &self.cookie)
            .send()
            .await
            .unwrap();
        let status = resp.status();
        (status, resp.text().await.unwrap())
    }

    /// Posts the form `fields` (with this session's CSRF token) to `path`: the status, where it
    /// redirects, and the page.
    pub async fn post(&self, path: &str, fields: &[(&str, &str)]) -> (StatusCode, String, String) {
        let mut form: Vec<(&str, &str)> = vec![("csrf", &self.csrf)];
        form.extend_from_slice(fields);
        let resp = self
            .http
            .post(format!("{}{path}", self.base))
            .header("cookie", &self.cookie)
            .form(&form)
            .send()
            .await
            .unwrap();
        let status = resp.status();
        let location = resp
            .headers()
            .get("location")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        (status, location, resp.text().await.unwrap())
    }
}

/// The path of a new link to `subscriber`'s portal, valid for an hour.
pub async fn link_path(app: &TestApp, subscriber: &str, read_only: bool) -> String {
    let link = app
        .store
        .create_portal_link(&NewPortalLink {
            subscriber_id: subscriber.to_owned(),
            read_only,
            return_url: None,
            expires_at: chrono::Utc::now() + chrono::Duration::hours(1),
            created_by: "admin".into(),
            created_via: Via::Api,
        })
        .await
        .unwrap();
    format!("/portal/enter/{}", link.token.expose())
}

/// Subscriber `id` with one endpoint at `receiver`; the endpoint's id.
pub async fn subscriber_with_endpoint(app: &TestApp, id: &str, receiver: &Receiver) -> String {
    let (status, body) = app
        .post(
            "/v1/subscribers",
            json!({"id": id, "name": format!("Customer {id}")}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let endpoint = app
        .create_endpoint(&receiver.url, json!({"subscriber_id": id}))
        .await;
    endpoint["id"].as_str().unwrap().to_owned()
}

/// Publishes an `order.paid` event to subscriber `id`; its event id.
pub async fn publish_to(app: &TestApp, id: &str) -> String {
    let (status, body) = app
        .post(
            "/v1/events",
            json!({"event_type": "order.paid", "data": {"order": 1}, "subscriber_id": id}),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    body["event_id"].as_str().unwrap().to_owned()
}

/// The status of every delivery of `event_id`, as the admin API reads it.
async fn statuses(app: &TestApp, event_id: &str) -> Vec<Value> {
    let (_, event) = app.get(&format!("/v1/events/{event_id}")).await;
    event["deliveries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["status"].clone())
        .collect()
}

async fn a_portal_session_reads_replays_and_tests_only_its_own_subscribers_deliveries(
    app: TestApp,
) {
    let (to_a, to_b) = (Receiver::start().await, Receiver::start().await);
    to_a.respond_with(500);
    to_b.respond_with(500);
    let endpoint_a = subscriber_with_endpoint(&app, "cus_a", &to_a).await;
    let endpoint_b = subscriber_with_endpoint(&app, "cus_b", &to_b).await;
    let event_a = publish_to(&app, "cus_a").await;
    let event_b = publish_to(&app, "cus_b").await;
    app.wait_for_deliveries(&event_a, "dead_letter").await;
    app.wait_for_deliveries(&event_b, "dead_letter").await;
    let portal = Portal::open(&app, "cus_a", false).await;

    // The log and the event page: A's, with the attempt's answer; never B's.
    let (status, log) = portal.get("/portal/deliveries").await;
    assert_eq!(status, StatusCode::OK, "{log}");
    assert!(log.contains(&format!("/portal/events/{event_a}")), "{log}");
    assert!(!log.contains(&event_b), "B's event in A's log");
    let (_, filtered) = portal
        .get(&format!(
            "/portal/deliveries?status=dead_letter&endpoint_id={endpoint_b}"
        ))
        .await;
    assert!(!filtered.contains(&event_b) && !filtered.contains(&event_a));
    let (status, page) = portal.get(&format!("/portal/events/{event_a}")).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(page.contains(">500<"), "the attempt's status: {page}");
    let (missing, _) = portal
        .get("/portal/events/0190f3c2-0000-7000-8000-000000000000")
        .await;
    assert_eq!(missing, StatusCode::NOT_FOUND);

    // B's ids in every URL and form field: 404, as a missing id; nothing of B's moves.
    let before_b = to_b.received().len();
    for path in [
        format!("/portal/events/{event_b}"),
        format!("/portal/events/{event_b}/replay?endpoint_id={endpoint_b}"),
        format!("/portal/events/{event_a}/replay?endpoint_id={endpoint_b}"),
        format!("/portal/replay?endpoint_id={endpoint_b}"),
    ] {
        assert_eq!(
            portal.get(&path).await.0,
            StatusCode::NOT_FOUND,
            "GET {path}"
        );
    }
    let reason = ("reason", "portal test");
    for (path, fields) in [
        (
            format!("/portal/events/{event_b}/replay"),
            vec![("endpoint_id", endpoint_b.as_str()), reason],
        ),
        (
            format!("/portal/events/{event_a}/replay"),
            vec![("endpoint_id", endpoint_b.as_str()), reason],
        ),
        (
            "/portal/replay".to_owned(),
            vec![("endpoint_id", endpoint_b.as_str()), reason],
        ),
        (
            "/portal/test".to_owned(),
            vec![("endpoint_id", endpoint_b.as_str())],
        ),
    ] {
        let (status, _, page) = portal.post(&path, &fields).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "POST {path}: {page}");
    }
    assert_eq!(statuses(&app, &event_b).await, [json!("dead_letter")]);
    assert_eq!(to_b.received().len(), before_b, "nothing sent to B");

    // A's own replay: a dry run's count, then the replay, audited as the portal's and A's.
    let (status, dry_run) = portal
        .get(&format!(
            "/portal/events/{event_a}/replay?endpoint_id={endpoint_a}"
        ))
        .await;
    assert_eq!(status, StatusCode::OK, "{dry_run}");
    assert!(dry_run.contains("<strong>1</strong>"), "{dry_run}");
    let before_a = to_a.received().len();
    to_a.respond_with(200);
    let (status, location, _) = portal
        .post(
            &format!("/portal/events/{event_a}/replay"),
            &[("endpoint_id", &endpoint_a), ("reason", "fixed our TLS")],
        )
        .await;
    assert!(status.is_redirection(), "{status}");
    assert!(location.ends_with("?replayed=1"), "{location}");
    app.wait_for_deliveries(&event_a, "sent").await;
    assert_eq!(to_a.received().len(), before_a + 1);
    let (_, audit) = app.get("/v1/replays?subscriber_id=cus_a").await;
    let replay = &audit["data"][0];
    assert_eq!(replay["via"], "portal", "{audit}");
    assert!(
        replay["actor"].as_str().unwrap().contains("cus_a"),
        "{audit}"
    );
    assert_eq!(replay["reason"], "fixed our TLS");
    let (_, theirs) = app.get("/v1/replays?subscriber_id=cus_b").await;
    assert_eq!(theirs["data"], json!([]), "nothing audited for B");

    // The bulk replay of the endpoint's dead letters: a count first, then the replay.
    to_a.respond_with(500);
    let event_a2 = publish_to(&app, "cus_a").await;
    app.wait_for_deliveries(&event_a2, "dead_letter").await;
    let (status, dry_run) = portal
        .get(&format!(
            "/portal/replay?endpoint_id={endpoint_a}&since=2000-01-01T00:00"
        ))
        .await;
    assert_eq!(status, StatusCode::OK, "{dry_run}");
    assert!(dry_run.contains("<strong>1</strong>"), "{dry_run}");
    to_a.respond_with(200);
    let (status, location, _) = portal
        .post(
            "/portal/replay",
            &[
                ("endpoint_id", &endpoint_a),
                ("since", "2000-01-01T00:00:00Z"),
                ("reason", "r"),
            ],
        )
        .await;
    assert!(status.is_redirection(), "{status}");
    assert!(
        location.starts_with("/portal/replayed?count=1"),
        "{location}"
    );
    app.wait_for_deliveries(&event_a2, "sent").await;

    // A test send: the request as sent and the response, to A's endpoint only.
    let before_a = to_a.received().len();
    let (status, _, page) = portal
        .post("/portal/test", &[("endpoint_id", &endpoint_a)])
        .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    eventually("the test event", || async {
        (to_a.received().len() == before_a + 1).then_some(())
    })
    .await;
    let got = to_a.received().pop().unwrap();
    let signature = got.header("webhook-signature").to_owned();
    assert!(
        page.contains(&signature),
        "the signature sent is shown: {page}"
    );
    assert!(page.contains("id=\"response-status\">200<"), "{page}");
    assert_eq!(to_b.received().len(), before_b, "nothing sent to B");
}

async fn a_read_only_portal_session_is_refused_every_replay_and_test(app: TestApp) {
    let to_a = Receiver::start().await;
    to_a.respond_with(500);
    let endpoint_a = subscriber_with_endpoint(&app, "cus_a", &to_a).await;
    let event_a = publish_to(&app, "cus_a").await;
    app.wait_for_deliveries(&event_a, "dead_letter").await;
    let reader = Portal::open(&app, "cus_a", true).await;

    // It sees the log and the event, without a control that would change anything.
    let (status, log) = reader.get("/portal/deliveries").await;
    assert_eq!(status, StatusCode::OK, "{log}");
    assert!(
        log.contains(&event_a) && !log.contains("/portal/replay") && !log.contains("/portal/test")
    );
    let (status, page) = reader.get(&format!("/portal/events/{event_a}")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(!page.contains("/replay"), "no replay control: {page}");

    // And is refused them all the same.
    for path in [
        format!("/portal/events/{event_a}/replay?endpoint_id={endpoint_a}"),
        format!("/portal/replay?endpoint_id={endpoint_a}"),
        "/portal/test".to_owned(),
    ] {
        assert_eq!(
            reader.get(&path).await.0,
            StatusCode::FORBIDDEN,
            "GET {path}"
        );
    }
    for (path, fields) in [
        (
            format!("/portal/events/{event_a}/replay"),
            vec![("endpoint_id", endpoint_a.as_str()), ("reason", "r")],
        ),
        (
            "/portal/replay".to_owned(),
            vec![("endpoint_id", endpoint_a.as_str()), ("reason", "r")],
        ),
        (
            "/portal/test".to_owned(),
            vec![("endpoint_id", endpoint_a.as_str())],
        ),
    ] {
        let (status, _, page) = reader.post(&path, &fields).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "POST {path}: {page}");
    }
    assert_eq!(statuses(&app, &event_a).await, [json!("dead_letter")]);
    assert_eq!(to_a.received().len(), 1, "only the first attempt");
    let (_, audit) = app.get("/v1/replays").await;
    assert_eq!(audit["data"], json!([]));
}
