//! A property test over the admin API's and the inbox gateway's request bodies and paths, on both
//! backends: whatever is sent (any method, any path segment and query, bytes that are not UTF-8,
//! NUL, numbers out of every range, JSON of any shape), the answer is never a 5xx, a refusal is a
//! 4xx in the JSON error shape, and a refusal changes nothing stored.
//!
//! Each case is one request against one running kurir; its state carries over (an accepted
//! request may create or delete things), which later cases then meet. Before each case the
//! background work an accepted request started (fan-out, deliveries: one attempt each here) has
//! settled, so any change seen is the request's own. The case count is kept modest for CI time;
//! `PROPTEST_CASES` raises it for a longer local run.

use proptest::prelude::*;
use proptest::sample::select;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use reqwest::Method;
use serde_json::{json, Map, Value};

use super::support::{eventually, Backend, Receiver, TestApp, TestDb};

#[test]
fn no_request_gets_a_5xx_or_changes_anything_when_refused_on_sqlite() {
    no_request_gets_a_5xx_or_changes_anything_when_refused(Backend::Sqlite);
}

#[test]
fn no_request_gets_a_5xx_or_changes_anything_when_refused_on_postgres() {
    no_request_gets_a_5xx_or_changes_anything_when_refused(Backend::Postgres);
}

#[test]
fn no_request_gets_a_5xx_or_changes_anything_when_refused_on_mysql() {
    no_request_gets_a_5xx_or_changes_anything_when_refused(Backend::Mysql);
}

/// One request.
#[derive(Clone)]
struct Request {
    method: Method,
    path: String,
    body: Vec<u8>,
}

/// Shown with its body as text, for a readable minimal failing input.
impl std::fmt::Debug for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let body = String::from_utf8_lossy(&self.body);
        write!(f, "{} {} {body:?}", self.method, self.path)
    }
}

/// Ids that exist when the test starts, so requests also reach past the "not found" checks.
#[derive(Clone, Debug)]
struct Known {
    endpoint_id: String,
    event_id: String,
}

fn no_request_gets_a_5xx_or_changes_anything_when_refused(backend: Backend) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let Some(database) = rt.block_on(TestDb::unmigrated(backend)) else {
        return;
    };
    let app = rt.block_on(TestApp::spawn_with(
        &database,
        &[("retry_max_attempts", "1"), ("connect_timeout", "500ms")],
    ));
    let known = rt.block_on(known_things(&app));
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(96);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 256,
        ..Config::default()
    });
    let result = runner.run(&request(known), |request| {
        rt.block_on(check(&app, &request))
            .map_err(TestCaseError::fail)
    });
    rt.block_on(app.stopper().stop());
    drop(database);
    if let Err(e) = result {
        panic!("{e}");
    }
}

async fn known_things(app: &TestApp) -> Known {
    let receiver = Receiver::start().await;
    let endpoint = app.create_endpoint(&receiver.url, json!({})).await;
    let event_id = app.publish("order.paid", json!({"n": 1})).await;
    let (status, source) = app
        .post(
            "/v1/inbox/sources",
            json!({"name": "src", "scheme": "github", "secrets": ["github-secret"],
                   "forward_url": receiver.url}),
        )
        .await;
    assert!(status.is_success(), "{source}");
    Known {
        endpoint_id: endpoint["id"].as_str().unwrap().to_owned(),
        event_id,
    }
}

/// Sends `request`; what is wrong with the answer, if anything.
async fn check(app: &TestApp, request: &Request) -> Result<(), String> {
    settle(app).await;
    let before = app.snapshot().await;
    let response = app
        .request(request.method.clone(), &request.path)
        .body(request.body.clone())
        .send()
        .await
        .map_err(|e| format!("no answer: {e}"))?;
    let status = response.status();
    let bytes = response.bytes().await.map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&bytes);
    if status.is_server_error() {
        return Err(format!("{status}: {text}"));
    }
    if status.is_client_error() {
        let body: Value =
            serde_json::from_slice(&bytes).map_err(|_| format!("{status}, not JSON: {text}"))?;
        if !body["error"]["code"].is_string() || !body["error"]["message"].is_string() {
            return Err(format!("{status}, not the error shape: {text}"));
        }
        if app.snapshot().await != before {
            return Err(format!("{status} but the database changed: {text}"));
        }
    }
    Ok(())
}

/// Waits until nothing is left for the relay or the dispatcher: every event fanned out, every
/// delivery sent or dead-lettered.
async fn settle(app: &TestApp) {
    eventually("the background work to settle", || async {
        let backlog = app.store.backlog().await.ok()?;
        (backlog.undispatched == 0 && backlog.deliveries.iter().all(|n| *n == 0)).then_some(())
    })
    .await
}

/// Half the requests are anything at all; the other half a valid request to one of the routes
/// that write, with up to three fields replaced by anything, so the checks past the first one
/// are reached too.
fn request(known: Known) -> impl Strategy<Value = Request> {
    let method = select(vec![
        Method::GET,
        Method::POST,
        Method::PATCH,
        Method::DELETE,
        Method::PUT,
    ]);
    let anything = (method, path(known.clone()), body()).prop_map(|(method, path, body)| Request {
        method,
        path,
        body,
    });
    prop_oneof![anything, almost_valid(known)]
}

fn almost_valid(known: Known) -> impl Strategy<Value = Request> {
    let (endpoint, event) = (known.endpoint_id, known.event_id);
    const ENDPOINT: &[&str] = &[
        "url",
        "description",
        "event_types",
        "secret",
        "max_in_flight",
        "connect_timeout_ms",
        "request_timeout_ms",
        "retry_initial_delay_ms",
        "retry_max_delay_ms",
        "retry_max_attempts",
        "enabled",
        "disabled_reason",
    ];
    const EVENT: &[&str] = &[
        "event_type",
        "data",
        "version",
        "aggregate_type",
        "aggregate_id",
        "occurred_at",
        "event_id",
    ];
    const SOURCE: &[&str] = &[
        "name",
        "scheme",
        "secrets",
        "tolerance_seconds",
        "forward_url",
    ];
    const REPLAY: &[&str] = &[
        "reason",
        "endpoint_id",
        "status",
        "event_type",
        "since",
        "until",
    ];
    let route = |method: Method, path: String, body: Value, fields: &'static [&'static str]| {
        (method, path, body, fields)
    };
    let routes = vec![
        route(
            Method::POST,
            "/v1/events".into(),
            json!({"event_type": "order.paid", "data": {"n": 1}}),
            EVENT,
        ),
        route(
            Method::POST,
            "/v1/endpoints".into(),
            json!({"url": "http://127.0.0.1:9/hook"}),
            ENDPOINT,
        ),
        route(
            Method::PATCH,
            format!("/v1/endpoints/{endpoint}"),
            json!({"description": "d"}),
            ENDPOINT,
        ),
        route(
            Method::POST,
            format!("/v1/endpoints/{endpoint}/rotate-secret"),
            json!({}),
            &["grace_period_seconds", "secret"],
        ),
        route(
            Method::POST,
            "/v1/inbox/sources".into(),
            json!({"name": "s2", "scheme": "github", "secrets": ["github-secret"],
                   "forward_url": "http://127.0.0.1:9/forward"}),
            SOURCE,
        ),
        route(
            Method::PATCH,
            "/v1/inbox/sources/src".into(),
            json!({"tolerance_seconds": 60}),
            SOURCE,
        ),
        route(
            Method::POST,
            format!("/v1/events/{event}/replay"),
            json!({"reason": "property test"}),
            REPLAY,
        ),
        route(
            Method::POST,
            "/v1/replays".into(),
            json!({"reason": "property test"}),
            REPLAY,
        ),
    ];
    select(routes).prop_flat_map(|(method, path, body, fields)| {
        let change = select(fields.to_vec())
            .prop_flat_map(|name| (Just(name), prop_oneof![3 => value_for(name), 1 => value()]));
        (
            Just((method, path, body)),
            prop::collection::vec(change, 0..4),
        )
            .prop_map(|((method, path, mut body), changes)| {
                let changes = changes.into_iter().map(|(k, v)| (k.to_owned(), v));
                body.as_object_mut().unwrap().extend(changes);
                Request {
                    method,
                    path,
                    body: serde_json::to_vec(&body).unwrap(),
                }
            })
    })
}

/// A path of one of the API's shapes with segments and a query drawn from everything.
fn path(known: Known) -> impl Strategy<Value = String> {
    let templates = select(vec![
        "/v1/endpoints",
        "/v1/endpoints/{a}",
        "/v1/endpoints/{a}/rotate-secret",
        "/v1/events",
        "/v1/events/{a}",
        "/v1/events/{a}/replay",
        "/v1/deliveries",
        "/v1/replays",
        "/v1/stats",
        "/v1/inbox/sources",
        "/v1/inbox/sources/{a}",
        "/inbox/{a}",
        "/inbox/{a}/events/{b}",
        "/v1/{a}",
        "/{a}",
    ]);
    let query = prop::option::of(prop::collection::vec(
        (
            select(vec![
                "event_type",
                "aggregate_id",
                "endpoint_id",
                "status",
                "since",
                "until",
                "cursor",
                "limit",
                "nonsense",
            ]),
            segment(known.clone()),
        ),
        1..4,
    ));
    (templates, segment(known.clone()), segment(known), query).prop_map(|(t, a, b, query)| {
        let mut path = t.replace("{a}", &a).replace("{b}", &b);
        if let Some(pairs) = query {
            let pairs: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
            path = format!("{path}?{}", pairs.join("&"));
        }
        path
    })
}

/// A percent-encoded path segment: a known id, a word the API knows, or arbitrary bytes
/// (NUL, bytes that are not UTF-8, slashes, very long).
fn segment(known: Known) -> impl Strategy<Value = String> {
    let words = select(vec![
        known.endpoint_id,
        known.event_id,
        "src".to_owned(),
        "dead_letter".to_owned(),
        "order.paid".to_owned(),
        "2026-01-01T00:00:00Z".to_owned(),
        "01900000-0000-7000-8000-000000000000".to_owned(),
        "0".to_owned(),
        "201".to_owned(),
    ]);
    prop_oneof![
        3 => words.prop_map(|w| encode(w.as_bytes())),
        2 => prop::collection::vec(any::<u8>(), 0..24).prop_map(|b| encode(&b)),
        1 => (1usize..600).prop_map(|n| "x".repeat(n)),
    ]
}

fn encode(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|&b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A body: a JSON object of the API's field names (and a stranger) with values of any shape,
/// other JSON, or bytes that are not JSON at all.
fn body() -> impl Strategy<Value = Vec<u8>> {
    let object = prop::collection::btree_map(field_name(), value(), 0..7).prop_map(|fields| {
        let fields: Map<String, Value> =
            fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
        serde_json::to_vec(&Value::Object(fields)).unwrap()
    });
    prop_oneof![
        6 => object,
        1 => value().prop_map(|v| serde_json::to_vec(&v).unwrap()),
        1 => prop::collection::vec(any::<u8>(), 0..64),
    ]
}

/// The API's body field names, and a stranger.
fn field_name() -> impl Strategy<Value = &'static str> {
    select(vec![
        "url",
        "description",
        "event_types",
        "secret",
        "max_in_flight",
        "connect_timeout_ms",
        "request_timeout_ms",
        "retry_initial_delay_ms",
        "retry_max_delay_ms",
        "retry_max_attempts",
        "enabled",
        "disabled_reason",
        "grace_period_seconds",
        "event_type",
        "data",
        "version",
        "aggregate_type",
        "aggregate_id",
        "occurred_at",
        "event_id",
        "endpoint_id",
        "reason",
        "status",
        "since",
        "until",
        "name",
        "scheme",
        "secrets",
        "tolerance_seconds",
        "forward_url",
        "colour",
    ])
}

/// A value at the edges of what the field `name` takes.
fn value_for(name: &'static str) -> BoxedStrategy<Value> {
    let strings = |v: Vec<&'static str>| select(v).prop_map(Value::from).boxed();
    match name {
        "occurred_at" | "since" | "until" => strings(vec![
            "2026-01-01T00:00:00Z",
            "0001-01-01T00:00:00Z",
            "0000-01-01T00:00:00Z",
            "9999-12-31T23:59:59.999999999Z",
            "+275760-09-13T00:00:00Z",
            "-262143-01-01T00:00:00Z",
            "-0001-01-01T00:00:00Z",
            "2026-02-30T00:00:00Z",
            "2026-01-01T00:00:00+14:00",
            "2026-01-01",
        ]),
        "url" | "forward_url" => strings(vec![
            "http://127.0.0.1:9/hook",
            "https://[::1]:9/hook",
            "http:///path",
            "http:x.example",
            "https://u:p@x.example/",
            "https://x.example/a\r\nb",
            "https://x.example/\u{0}",
            "https://x.example:99999/",
            "https://bücher.example/",
            "javascript:alert(1)",
        ]),
        "event_type" => strings(vec![
            "order.paid",
            "Order.Paid",
            "a..b",
            ".a",
            "a.",
            "é",
            "*",
        ]),
        "secret" => strings(vec![
            "short",
            "whsec_!!",
            "whsec_",
            "valid-secret-123",
            "x\ty-secret",
        ]),
        _ => select(vec![
            -1i128,
            0,
            1,
            9,
            10,
            99,
            100,
            1000,
            1001,
            60_000,
            60_001,
            86_400,
            86_401,
            2_592_000,
            2_592_001,
            604_800_000,
            604_800_001,
            2_147_483_648,
            4_294_967_296,
            9_223_372_036_854_775_808,
            18_446_744_073_709_551_615,
        ])
        .prop_map(|n| serde_json::from_str::<Value>(&n.to_string()).unwrap())
        .boxed(),
    }
}

/// Any JSON value, weighted toward the edges: NUL and control characters, non-ASCII, long
/// strings, URLs that are not what they seem, numbers at and past every integer width.
fn value() -> impl Strategy<Value = Value> {
    let strings = select(vec![
        "",
        " ",
        "order.paid",
        "Order.Paid",
        "order..paid",
        "a\u{0}b",
        "\u{0}",
        "\r\n",
        "é",
        "https://x.example/hook",
        "http://127.0.0.1:9/hook",
        "http:///path",
        "https://u:p@x.example/",
        "https://x.example/a\r\nb",
        "ftp://x.example/",
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        "github-secret",
        "dead_letter",
        "sent",
        "2026-01-01T00:00:00Z",
        "+275760-09-13T00:00:00Z",
        "-262143-01-01T00:00:00Z",
        "-0001-01-01T00:00:00Z",
        "kurir",
        "github",
        "standard-webhooks",
        "01900000-0000-7000-8000-000000000000",
        "src",
        "*",
        "order.*",
    ])
    .prop_map(Value::from);
    let numbers = select(vec![
        0i128,
        1,
        -1,
        99,
        100,
        1000,
        1001,
        60_000,
        60_001,
        2_147_483_647,
        2_147_483_648,
        4_294_967_295,
        4_294_967_296,
        604_800_000,
        604_800_001,
        9_223_372_036_854_775_807,
        -9_223_372_036_854_775_808,
        18_446_744_073_709_551_615,
    ])
    .prop_map(|n| serde_json::from_str::<Value>(&n.to_string()).unwrap());
    let leaf = prop_oneof![
        4 => strings,
        1 => prop::collection::vec(any::<char>(), 0..12).prop_map(|c| Value::from(c.into_iter().collect::<String>())),
        1 => (1usize..2000).prop_map(|n| Value::from("y".repeat(n))),
        3 => numbers,
        1 => any::<f64>().prop_map(|f| json!(f)),
        1 => any::<bool>().prop_map(Value::from),
        1 => Just(Value::Null),
    ];
    leaf.prop_recursive(2, 12, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z_]{1,8}", inner, 0..3)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}
