//! Subscriber tokens (issue 29, items 3 and 6): a token confined to one subscriber, tested as a
//! security property. With subscriber A's token, every `/v1` operation of the OpenAPI document
//! (so a route added later is covered) is called with subscriber B's ids and with the
//! operator's: each answers 404 exactly as a missing id does, or 403 where subscriber tokens are
//! refused the route as a class. Every list A reads holds none of B's rows; A's endpoints are
//! A's; events addressed to A reach only A's endpoints while endpoints are created, patched and
//! deleted around them; and a revoked or expired token, or one whose subscriber is deleted, is
//! refused at once by every process sharing the database.

use std::collections::BTreeSet;

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use super::support::{on_both_backends, Receiver, TestApp, TestDb};
use super::tokens::call;
use crate::on_shared_servers;

on_both_backends!(
    a_subscriber_token_is_created_shown_once_listed_and_revoked,
    with_a_subscriber_token_every_route_hides_other_subscribers_and_the_operators_rows,
    a_subscriber_tokens_lists_and_creations_are_its_own_and_operators_filter_by_subscriber,
    events_addressed_to_a_subscriber_reach_only_its_endpoints_while_endpoints_change,
);

on_shared_servers!(a_subscriber_token_revoked_expired_or_orphaned_is_refused_at_once_by_another);

/// The routes a subscriber token may use, written out here rather than read from kurir, so
/// that allowing one more route is a decision this test has to be told of. `shared`: the event
/// catalog, the same for everyone (what every subscriber receives), with no subscriber's rows.
const ALLOWED: &[(&str, &str)] = &[
    ("GET", "/v1/endpoints"),
    ("POST", "/v1/endpoints"),
    ("GET", "/v1/endpoints/{id}"),
    ("PATCH", "/v1/endpoints/{id}"),
    ("DELETE", "/v1/endpoints/{id}"),
    ("POST", "/v1/endpoints/{id}/rotate-secret"),
    ("POST", "/v1/endpoints/{id}/test"),
    ("POST", "/v1/endpoints/{id}/circuit"),
    ("GET", "/v1/endpoints/{id}/circuit/actions"),
    ("GET", "/v1/events"),
    ("GET", "/v1/events/{event_id}"),
    ("POST", "/v1/events/{event_id}/replay"),
    ("GET", "/v1/events/{event_id}/replay/preview"),
    ("GET", "/v1/deliveries"),
    ("GET", "/v1/replays"),
    ("POST", "/v1/replays"),
    ("GET", "/v1/replays/preview"),
    ("GET", "/v1/subscribers/{id}"),
    ("GET", "/v1/whoami"),
];
const SHARED: &[(&str, &str)] = &[
    ("GET", "/v1/event-types"),
    ("GET", "/v1/event-types/openapi.json"),
    ("GET", "/v1/event-types/{event_type}/versions/{version}"),
];

async fn subscriber(app: &TestApp, id: &str) {
    let (status, body) = app
        .post("/v1/subscribers", json!({"id": id, "name": id}))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
}

/// A token of subscriber `id` made by the admin token: its id and its secret.
async fn token_of(app: &TestApp, id: &str, body: Value) -> (String, String) {
    let (status, made) = app
        .post(&format!("/v1/subscribers/{id}/tokens"), body)
        .await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    let secret = made["token"].as_str().expect("the secret, once").to_owned();
    (made["id"].as_str().unwrap().to_owned(), secret)
}

/// Every row of a listing, following its cursors, read with `token`.
async fn all_rows(app: &TestApp, token: &str, path: &str) -> Vec<Value> {
    let mut rows = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let sep = if path.contains('?') { '&' } else { '?' };
        let page_path = match &cursor {
            Some(c) => format!("{path}{sep}limit=2&cursor={c}"),
            None => format!("{path}{sep}limit=2"),
        };
        let (status, page) = call(app, token, Method::GET, &page_path, Value::Null).await;
        assert_eq!(status, StatusCode::OK, "{page_path}: {page}");
        rows.extend(page["data"].as_array().unwrap().iter().cloned());
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => return rows,
        }
    }
}

fn field(rows: &[Value], name: &str) -> BTreeSet<String> {
    rows.iter()
        .map(|r| r[name].as_str().unwrap_or("-").to_owned())
        .collect()
}

async fn publish_to(app: &TestApp, event_id: &str, subscriber: Option<&str>) {
    let (status, body) = app
        .post(
            "/v1/events",
            json!({"event_id": event_id, "event_type": "order.paid", "data": {},
                   "subscriber_id": subscriber}),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
}

async fn a_subscriber_token_is_created_shown_once_listed_and_revoked(app: TestApp) {
    subscriber(&app, "cus_a").await;
    subscriber(&app, "cus_b").await;
    let (status, made) = app
        .post(
            "/v1/subscribers/cus_a/tokens",
            json!({"name": "acme-ci", "expires_at": "2999-01-01T00:00:00Z"}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    let secret = made["token"].as_str().unwrap();
    assert!(secret.starts_with("kurir_sub_"), "a recognisable prefix");
    assert_eq!(secret.len(), "kurir_sub_".len() + 64);
    assert_eq!(
        (made["subscriber_id"].as_str(), made["name"].as_str()),
        (Some("cus_a"), Some("acme-ci"))
    );
    let id = made["id"].as_str().unwrap();
    // Unnamed, it is named by its id; on another subscriber, the name is taken all the same.
    let (unnamed, _) = token_of(&app, "cus_b", json!({})).await;
    let (_, b_list) = app.get("/v1/subscribers/cus_b/tokens").await;
    assert_eq!(b_list["data"][0]["name"], unnamed.as_str(), "{b_list}");
    let (status, taken) = app
        .post("/v1/subscribers/cus_b/tokens", json!({"name": "acme-ci"}))
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{taken}");

    let (_, listed) = app.get("/v1/subscribers/cus_a/tokens").await;
    let rows = listed["data"].as_array().unwrap();
    assert_eq!(field(rows, "id"), BTreeSet::from([id.to_owned()]));
    assert!(
        rows[0].get("token").is_none(),
        "the secret is never shown again"
    );
    let (_, whoami) = call(&app, secret, Method::GET, "/v1/whoami", Value::Null).await;
    assert_eq!(
        (whoami["subscriber_id"].as_str(), whoami["name"].as_str()),
        (Some("cus_a"), Some("acme-ci")),
        "{whoami}"
    );

    // Bad input names what is wrong; a subscriber that does not exist is a 404.
    let (status, bad) = app
        .post(
            "/v1/subscribers/cus_a/tokens",
            json!({"expires_at": "2001-01-01T00:00:00Z"}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
    assert!(bad["error"]["message"]
        .as_str()
        .unwrap()
        .contains("expires_at"));
    let (status, bad) = app
        .post("/v1/subscribers/cus_a/tokens", json!({"role": "admin"}))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
    let (status, _) = app.post("/v1/subscribers/nobody/tokens", json!({})).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // Revoked through another subscriber's path: not found, and it still works.
    let (status, _) = app
        .delete(&format!("/v1/subscribers/cus_b/tokens/{id}"))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let works = || call(&app, secret, Method::GET, "/v1/endpoints", Value::Null);
    assert_eq!(works().await.0, StatusCode::OK);
    let (status, _) = app
        .delete(&format!("/v1/subscribers/cus_a/tokens/{id}"))
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(works().await.0, StatusCode::UNAUTHORIZED);
    let (_, listed) = app.get("/v1/subscribers/cus_a/tokens").await;
    assert_eq!(listed["data"][0]["status"], "revoked", "{listed}");

    // Its tokens are the operators' to manage: not a viewer's, not a subscriber token's.
    let (status, viewer) = app
        .post("/v1/tokens", json!({"name": "grafana", "role": "viewer"}))
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let viewer = viewer["token"].as_str().unwrap();
    let (status, _) = call(
        &app,
        viewer,
        Method::GET,
        "/v1/subscribers/cus_a/tokens",
        Value::Null,
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (_, b_secret) = token_of(&app, "cus_b", json!({})).await;
    for (method, path) in [
        (Method::GET, "/v1/subscribers/cus_b/tokens"),
        (Method::POST, "/v1/subscribers/cus_b/tokens"),
    ] {
        let (status, body) = call(&app, &b_secret, method, path, json!({})).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{path}: {body}");
    }
    // Nor may it sign in to the dashboard, which shows every subscriber.
    let signed_in = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .post(format!("{}/ui/login", app.url))
        .form(&[("token", b_secret.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(signed_in.status(), StatusCode::UNAUTHORIZED);
}

/// The ids a sweep puts in a route's path parameters.
struct Ids {
    endpoint: String,
    event: String,
    subscriber: String,
    token: String,
}

impl Ids {
    /// `template` with each `{parameter}` replaced by the id of the kind the segment before it
    /// names; an unknown kind (a route added later) gets the endpoint's id.
    fn path(&self, template: &str) -> String {
        let mut out: Vec<String> = Vec::new();
        let segments: Vec<&str> = template.split('/').collect();
        for (i, segment) in segments.iter().enumerate() {
            if !segment.starts_with('{') {
                out.push((*segment).to_owned());
                continue;
            }
            let value = match segments[i - 1] {
                "endpoints" => &self.endpoint,
                "events" => &self.event,
                "subscribers" => &self.subscriber,
                "tokens" => &self.token,
                "sources" => "no-such-source",
                "event-types" => "order.paid",
                "versions" => "1",
                _ => &self.endpoint,
            };
            out.push(value.to_owned());
        }
        out.join("/")
    }

    fn all(&self) -> [&str; 4] {
        [&self.endpoint, &self.event, &self.subscriber, &self.token]
    }
}

/// A body the operation takes, so that a missing id is what it answers for.
fn body_for(method: &Method, template: &str) -> Value {
    match (method.as_str(), template) {
        ("POST", "/v1/endpoints/{id}/circuit") => json!({"action": "probe"}),
        ("POST", "/v1/events/{event_id}/replay") => json!({"reason": "isolation test"}),
        ("PATCH", "/v1/endpoints/{id}") => json!({"description": "taken over"}),
        _ => json!({}),
    }
}

async fn with_a_subscriber_token_every_route_hides_other_subscribers_and_the_operators_rows(
    app: TestApp,
) {
    let receiver = Receiver::start().await;
    for id in ["cus_a", "cus_b"] {
        subscriber(&app, id).await;
    }
    let (_, a) = token_of(&app, "cus_a", json!({"name": "a-portal"})).await;
    let (b_token, _) = token_of(&app, "cus_b", json!({"name": "b-portal"})).await;
    let (status, named) = app
        .post("/v1/tokens", json!({"name": "oncall", "role": "operator"}))
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let operator_token = named["id"].as_str().unwrap().to_owned();
    let (status, mine) = call(
        &app,
        &a,
        Method::POST,
        "/v1/endpoints",
        json!({"url": receiver.url}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{mine}");
    let b_endpoint = app
        .create_endpoint(&receiver.url, json!({"subscriber_id": "cus_b"}))
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let op_endpoint = app.create_endpoint(&receiver.url, json!({})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    publish_to(&app, "evt-a", Some("cus_a")).await;
    publish_to(&app, "evt-b", Some("cus_b")).await;
    publish_to(&app, "evt-op", None).await;
    for event in ["evt-a", "evt-b", "evt-op"] {
        app.wait_for_deliveries(event, "sent").await;
    }
    let before = app.snapshot().await;

    let theirs = [
        (
            "subscriber B's",
            Ids {
                endpoint: b_endpoint.clone(),
                event: "evt-b".into(),
                subscriber: "cus_b".into(),
                token: b_token.clone(),
            },
        ),
        (
            "the operator's",
            Ids {
                endpoint: op_endpoint.clone(),
                event: "evt-op".into(),
                subscriber: "cus_b".into(),
                token: operator_token.clone(),
            },
        ),
    ];
    let missing = Ids {
        endpoint: "01900000-0000-7000-8000-000000000000".into(),
        event: "evt-missing".into(),
        subscriber: "cus_missing".into(),
        token: format!("tok_{}", "0".repeat(32)),
    };

    let mut operations = documented_operations(&app).await;
    // A route nobody has written yet is refused to a subscriber token before it exists.
    operations.push((Method::GET, "/v1/a-route-added-later/{id}".into()));
    let mut refused = BTreeSet::new();
    for (method, template) in &operations {
        let template = template.clone();
        let listed = |list: &[(&str, &str)]| {
            list.iter()
                .any(|(m, t)| *m == method.as_str() && *t == template)
        };
        let body = body_for(method, &template);
        for (whose, ids) in &theirs {
            let path = ids.path(&template);
            let (status, answer) = call(&app, &a, method.clone(), &path, body.clone()).await;
            let what = format!("{method} {path} ({whose})");
            if listed(SHARED) {
                assert_ne!(status, StatusCode::FORBIDDEN, "{what}: {answer}");
            } else if !listed(ALLOWED) {
                assert_eq!(status, StatusCode::FORBIDDEN, "{what}: {answer}");
                assert_eq!(answer["error"]["code"], "forbidden", "{what}");
                refused.insert(format!("{method} {template}"));
            } else if template.contains('{') {
                // Exactly what a missing id gets, but for the id it names.
                let missing_path = missing.path(&template);
                let (missing_status, expected) =
                    call(&app, &a, method.clone(), &missing_path, body.clone()).await;
                assert_eq!(missing_status, StatusCode::NOT_FOUND, "{missing_path}");
                assert_eq!(status, StatusCode::NOT_FOUND, "{what}: {answer}");
                let mut message = answer["error"]["message"].as_str().unwrap().to_owned();
                for (theirs, absent) in ids.all().into_iter().zip(missing.all()) {
                    message = message.replace(theirs, absent);
                }
                assert_eq!(
                    (answer["error"]["code"].clone(), message),
                    (
                        expected["error"]["code"].clone(),
                        expected["error"]["message"].as_str().unwrap().to_owned()
                    ),
                    "{what} answers as a missing id"
                );
            } else {
                assert_ne!(status, StatusCode::FORBIDDEN, "{what}: {answer}");
            }
        }
    }
    for class in [
        "POST /v1/events",
        "POST /v1/events/batch",
        "GET /v1/stats",
        "GET /v1/inbox/sources",
        "GET /v1/tokens",
        "GET /v1/subscribers",
        "PATCH /v1/subscribers/{id}",
        "POST /v1/subscribers/{id}/tokens",
        "GET /v1/a-route-added-later/{id}",
    ] {
        assert!(refused.contains(class), "{class} is refused as a class");
    }
    assert_eq!(
        app.snapshot().await,
        before,
        "nothing of B's or the operator's changed"
    );

    // Bodies and queries naming B's or the operator's rows are answered as missing ones.
    for (whose, ids) in &theirs {
        for (method, path, body) in [
            (
                Method::POST,
                "/v1/replays".to_owned(),
                json!({"reason": "x", "endpoint_id": ids.endpoint, "status": "sent"}),
            ),
            (
                Method::GET,
                format!("/v1/replays/preview?endpoint_id={}", ids.endpoint),
                Value::Null,
            ),
            (
                Method::POST,
                "/v1/replays".to_owned(),
                json!({"reason": "x", "subscriber_id": ids.subscriber}),
            ),
            (
                Method::POST,
                "/v1/endpoints".to_owned(),
                json!({"url": receiver.url, "subscriber_id": ids.subscriber}),
            ),
        ] {
            let (status, answer) = call(&app, &a, method.clone(), &path, body.clone()).await;
            let swap = |v: &Value| {
                let mut text = v.to_string();
                for (theirs, absent) in ids.all().into_iter().zip(missing.all()) {
                    text = text.replace(theirs, absent);
                }
                text
            };
            let (missing_status, expected) = call(
                &app,
                &a,
                method.clone(),
                swap(&json!(path)).trim_matches('"'),
                serde_json::from_str(&swap(&body)).unwrap(),
            )
            .await;
            assert!(
                missing_status.is_client_error(),
                "{method} {path}: {expected}"
            );
            assert_eq!(
                (status, swap(&answer)),
                (missing_status, expected.to_string()),
                "{method} {path} ({whose}) answers as a missing id"
            );
        }
    }
    // Its replay of everything it may replay touches only its own deliveries.
    let (status, replayed) = call(
        &app,
        &a,
        Method::POST,
        "/v1/replays",
        json!({"reason": "all of mine", "status": "sent"}),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{replayed}");
    assert_eq!(
        replayed["replayed"], 1,
        "A's one delivery, not B's nor the operator's"
    );
    app.wait_for_deliveries("evt-a", "sent").await;
    let (_, replays) = app.get("/v1/replays").await;
    assert_eq!(replays["data"].as_array().unwrap().len(), 1, "{replays}");
    assert_eq!(replays["data"][0]["filter"]["subscriber_id"], "cus_a");
    let (_, actions) = app
        .get(&format!("/v1/endpoints/{b_endpoint}/circuit/actions"))
        .await;
    assert_eq!(
        actions["data"],
        json!([]),
        "no circuit action on B's endpoint"
    );
    let received: Vec<String> = receiver
        .received()
        .iter()
        .map(|m| {
            m.json()["event_id"]
                .as_str()
                .unwrap_or("kurir.test")
                .to_owned()
        })
        .collect();
    assert!(
        !received.iter().any(|e| e == "kurir.test"),
        "no test send reached B's or the operator's endpoint: {received:?}"
    );
}

/// Every operation of the OpenAPI document under `/v1` that needs a token: its method and path
/// template.
async fn documented_operations(app: &TestApp) -> Vec<(Method, String)> {
    let (status, doc) = app.get("/v1/openapi.json").await;
    assert_eq!(status, StatusCode::OK);
    let mut operations = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        if !path.starts_with("/v1/") || path == "/v1/openapi.json" {
            continue;
        }
        for method in item.as_object().unwrap().keys() {
            operations.push((method.to_uppercase().parse().unwrap(), path.clone()));
        }
    }
    assert!(operations.len() > 40, "the document lists the API");
    operations
}

async fn a_subscriber_tokens_lists_and_creations_are_its_own_and_operators_filter_by_subscriber(
    app: TestApp,
) {
    let receiver = Receiver::start().await;
    for id in ["cus_a", "cus_b"] {
        subscriber(&app, id).await;
    }
    let (_, a) = token_of(&app, "cus_a", json!({})).await;
    let (_, b) = token_of(&app, "cus_b", json!({})).await;
    // Three endpoints each (so the lists take pages of two), created with their own tokens:
    // each attached to its token's subscriber without saying so.
    let mut endpoints = std::collections::BTreeMap::<&str, BTreeSet<String>>::new();
    for (who, token) in [("cus_a", &a), ("cus_b", &b)] {
        for _ in 0..3 {
            let (status, made) = call(
                &app,
                token,
                Method::POST,
                "/v1/endpoints",
                json!({"url": receiver.url}),
            )
            .await;
            assert_eq!(status, StatusCode::CREATED, "{made}");
            assert_eq!(made["subscriber_id"], who, "{made}");
            assert!(made["secret"].is_string(), "its secret, once");
            endpoints
                .entry(who)
                .or_default()
                .insert(made["id"].as_str().unwrap().to_owned());
        }
    }
    // Naming itself is allowed too.
    let (status, named) = call(
        &app,
        &a,
        Method::POST,
        "/v1/endpoints",
        json!({"url": receiver.url, "subscriber_id": "cus_a"}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{named}");
    endpoints
        .get_mut("cus_a")
        .unwrap()
        .insert(named["id"].as_str().unwrap().to_owned());
    let op = app.create_endpoint(&receiver.url, json!({})).await;
    for (i, who) in ["cus_a", "cus_b", "cus_a", "cus_b"].iter().enumerate() {
        publish_to(&app, &format!("evt-{who}-{i}"), Some(who)).await;
    }
    publish_to(&app, "evt-op", None).await;
    for (i, who) in ["cus_a", "cus_b", "cus_a", "cus_b"].iter().enumerate() {
        app.wait_for_deliveries(&format!("evt-{who}-{i}"), "sent")
            .await;
    }
    // Something in A's replay audit, and in B's.
    for (token, event) in [(&a, "evt-cus_a-0"), (&b, "evt-cus_b-1")] {
        let (status, body) = call(
            &app,
            token,
            Method::POST,
            &format!("/v1/events/{event}/replay"),
            json!({"reason": "again", "include_sent": true}),
        )
        .await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    }

    let a_events = BTreeSet::from(["evt-cus_a-0".to_owned(), "evt-cus_a-2".to_owned()]);
    let admin = app_token();
    for (token, query) in [
        (&a, ""),
        (&a, "?subscriber_id=cus_a"),
        (&admin, "?subscriber_id=cus_a"),
    ] {
        let ep = all_rows(&app, token, &format!("/v1/endpoints{query}")).await;
        assert_eq!(field(&ep, "id"), endpoints["cus_a"], "endpoints{query}");
        let ev = all_rows(&app, token, &format!("/v1/events{query}")).await;
        assert_eq!(field(&ev, "event_id"), a_events, "events{query}");
        let de = all_rows(&app, token, &format!("/v1/deliveries{query}")).await;
        assert_eq!(field(&de, "event_id"), a_events, "deliveries{query}");
        assert!(
            field(&de, "endpoint_id").is_subset(&endpoints["cus_a"]),
            "deliveries{query}"
        );
        let re = all_rows(&app, token, &format!("/v1/replays{query}")).await;
        assert_eq!(re.len(), 1, "replays{query}: {re:?}");
        assert_eq!(re[0]["filter"]["event_id"], "evt-cus_a-0", "{re:?}");
        let (_, dead) = call(
            &app,
            token,
            Method::GET,
            &format!(
                "/v1/deliveries?status=sent&limit=200{}",
                query.replace('?', "&")
            ),
            Value::Null,
        )
        .await;
        assert!(
            field(dead["data"].as_array().unwrap(), "event_id").is_subset(&a_events),
            "{dead}"
        );
    }
    // Asking for another subscriber's rows with A's token finds nothing, as for one that does
    // not exist.
    for list in ["endpoints", "events", "deliveries", "replays"] {
        for who in ["cus_b", "cus_missing"] {
            let rows = all_rows(&app, &a, &format!("/v1/{list}?subscriber_id={who}")).await;
            assert!(rows.is_empty(), "{list} of {who}: {rows:?}");
        }
    }
    // The admin sees everything, and B's own.
    let every = all_rows(&app, &admin, "/v1/endpoints").await;
    assert_eq!(every.len(), 4 + 3 + 1);
    assert!(field(&every, "id").contains(op["id"].as_str().unwrap()));
    let bs = all_rows(&app, &admin, "/v1/endpoints?subscriber_id=cus_b").await;
    assert_eq!(field(&bs, "id"), endpoints["cus_b"]);
    // A subscriber token reads its own subscriber, and deletes its own endpoint.
    let (status, me) = call(&app, &a, Method::GET, "/v1/subscribers/cus_a", Value::Null).await;
    assert_eq!((status, me["id"].as_str()), (StatusCode::OK, Some("cus_a")));
    let gone = endpoints["cus_a"].iter().next().unwrap().clone();
    let (status, _) = call(
        &app,
        &a,
        Method::DELETE,
        &format!("/v1/endpoints/{gone}"),
        Value::Null,
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
}

fn app_token() -> String {
    super::support::TOKEN.to_owned()
}

/// Events addressed to A while B's, A's and the operator's endpoints are created, patched and
/// deleted all along: every one reaches A's receiver, none B's or the operator's, and every
/// delivery of an A event is to an endpoint of A.
async fn events_addressed_to_a_subscriber_reach_only_its_endpoints_while_endpoints_change(
    app: TestApp,
) {
    let (mine, b_receiver, op_receiver) = (
        Receiver::start().await,
        Receiver::start().await,
        Receiver::start().await,
    );
    for id in ["cus_a", "cus_b"] {
        subscriber(&app, id).await;
    }
    let kept = app
        .create_endpoint(&mine.url, json!({"subscriber_id": "cus_a"}))
        .await;
    let mut a_endpoints = BTreeSet::from([kept["id"].as_str().unwrap().to_owned()]);
    const EVENTS: usize = 30;
    let churn = async {
        let mut made = BTreeSet::new();
        for round in 0..EVENTS / 3 {
            for (url, owner) in [
                (&b_receiver.url, json!("cus_b")),
                (&op_receiver.url, Value::Null),
                (&mine.url, json!("cus_a")),
            ] {
                let e = app
                    .create_endpoint(
                        url,
                        json!({"subscriber_id": owner, "event_types": ["order.*"]}),
                    )
                    .await;
                let id = e["id"].as_str().unwrap().to_owned();
                let (status, _) = app
                    .patch(
                        &format!("/v1/endpoints/{id}"),
                        json!({"event_types": ["*"]}),
                    )
                    .await;
                assert_eq!(status, StatusCode::OK);
                if round % 2 == 0 {
                    let (status, _) = app.delete(&format!("/v1/endpoints/{id}")).await;
                    assert_eq!(status, StatusCode::NO_CONTENT);
                }
                if owner == "cus_a" {
                    made.insert(id);
                }
            }
        }
        made
    };
    let publish = async {
        for i in 0..EVENTS {
            publish_to(&app, &format!("evt-a-{i}"), Some("cus_a")).await;
        }
    };
    let (made, ()) = tokio::join!(churn, publish);
    a_endpoints.extend(made);
    let event_ids = |r: &Receiver| -> BTreeSet<String> {
        r.received()
            .iter()
            .map(|m| m.json()["event_id"].as_str().unwrap().to_owned())
            .collect()
    };
    // Every A event reached the endpoint A kept throughout, and each of its deliveries ends
    // (sent, or cancelled with an endpoint deleted meanwhile) at an endpoint of A.
    super::support::eventually("every event of A at A's receiver", || async {
        let got = event_ids(&mine);
        (0..EVENTS)
            .all(|i| got.contains(&format!("evt-a-{i}")))
            .then_some(())
    })
    .await;
    for i in 0..EVENTS {
        let id = format!("evt-a-{i}");
        let event = super::support::eventually(&format!("{id}'s deliveries to end"), || async {
            let (_, event) = app.get(&format!("/v1/events/{id}")).await;
            let ended = event["deliveries"]
                .as_array()?
                .iter()
                .all(|d| d["status"] == "sent" || d["status"] == "cancelled");
            ended.then_some(event)
        })
        .await;
        for d in event["deliveries"].as_array().unwrap() {
            let endpoint = d["endpoint_id"].as_str().unwrap();
            assert!(
                a_endpoints.contains(endpoint),
                "{id} was delivered to {endpoint}, not an endpoint of A"
            );
        }
    }
    // B's and the operator's receivers work (their own events reach them) and got nothing of
    // A's.
    publish_to(&app, "evt-b-last", Some("cus_b")).await;
    publish_to(&app, "evt-op-last", None).await;
    for (who, receiver, theirs) in [
        ("B", &b_receiver, "evt-b-last"),
        ("the operator", &op_receiver, "evt-op-last"),
    ] {
        let got = super::support::eventually(&format!("{theirs} at {who}'s receiver"), || async {
            let got = event_ids(receiver);
            got.contains(theirs).then_some(got)
        })
        .await;
        assert!(
            got.iter().all(|e| !e.starts_with("evt-a-")),
            "{who} got none of A's events: {got:?}"
        );
    }
}

/// Two `kurir serve` processes on one database: a subscriber token made on one works on the
/// other; revoked on one, expired (by the database's clock), or its subscriber deleted, the
/// other refuses it on its very next request. And it does not open a `/metrics` that needs a
/// token.
async fn a_subscriber_token_revoked_expired_or_orphaned_is_refused_at_once_by_another(db: TestDb) {
    // `/metrics` behind a token here, to see that a subscriber's is not one that opens it.
    let one = TestApp::spawn_with(&db, &[("metrics_require_token", "true")]).await;
    let other = TestApp::spawn(&db).await;
    for id in ["cus_a", "cus_b"] {
        subscriber(&one, id).await;
    }
    let (_, secret) = token_of(&one, "cus_a", json!({"name": "scraper"})).await;
    let metrics = |token: String| {
        let one = &one;
        async move {
            let req = reqwest::Client::new()
                .get(format!("{}/metrics", one.url))
                .bearer_auth(token);
            req.send().await.unwrap().status()
        }
    };
    assert_eq!(metrics(secret).await, StatusCode::FORBIDDEN, "/metrics");
    assert_eq!(metrics(super::support::TOKEN.into()).await, StatusCode::OK);
    let whoami = |token: String| {
        let other = &other;
        async move {
            call(other, &token, Method::GET, "/v1/whoami", Value::Null)
                .await
                .0
        }
    };

    let (revoked, secret) = token_of(&one, "cus_a", json!({"name": "revoked"})).await;
    assert_eq!(whoami(secret.clone()).await, StatusCode::OK);
    let (status, _) = one
        .delete(&format!("/v1/subscribers/cus_a/tokens/{revoked}"))
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(whoami(secret).await, StatusCode::UNAUTHORIZED, "revoked");

    // Expired: its expiry moved to its creation, in the past by the database's clock.
    let (expired, secret) = token_of(&one, "cus_a", json!({"name": "expired"})).await;
    assert_eq!(whoami(secret.clone()).await, StatusCode::OK);
    let sql = match one.store {
        kurir::store::Store::Postgres(_) => {
            "UPDATE kurir_tokens SET expires_at = created_at WHERE id = $1"
        }
        _ => "UPDATE kurir_tokens SET expires_at = created_at WHERE id = ?",
    };
    match &one.store {
        kurir::store::Store::Postgres(pg) => {
            sqlx::query(sql)
                .bind(&expired)
                .execute(pg.pool())
                .await
                .unwrap();
        }
        kurir::store::Store::Mysql(my) => {
            sqlx::query(sql)
                .bind(&expired)
                .execute(my.pool())
                .await
                .unwrap();
        }
        kurir::store::Store::Sqlite(sq) => {
            sqlx::query(sql)
                .bind(&expired)
                .execute(sq.pool())
                .await
                .unwrap();
        }
    }
    assert_eq!(whoami(secret).await, StatusCode::UNAUTHORIZED, "expired");
    let (_, listed) = one.get("/v1/subscribers/cus_a/tokens").await;
    let status_of = |id: &str| {
        listed["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["id"] == id)
            .map(|t| t["status"].clone())
    };
    assert_eq!(status_of(&expired), Some(json!("expired")), "{listed}");

    // Its subscriber deleted: every token of it stops at once.
    let (_, secret) = token_of(&one, "cus_b", json!({"name": "orphaned"})).await;
    assert_eq!(whoami(secret.clone()).await, StatusCode::OK);
    let (status, _) = one.delete("/v1/subscribers/cus_b").await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(whoami(secret).await, StatusCode::UNAUTHORIZED, "orphaned");
    let (status, _) = one.post("/v1/subscribers/cus_b/tokens", json!({})).await;
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "no token for a deleted subscriber"
    );

    one.stopper().stop().await;
    other.stopper().stop().await;
}
