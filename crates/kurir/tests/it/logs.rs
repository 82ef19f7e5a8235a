//! What the real `kurir serve` logs with `KURIR_LOG_FORMAT=json`: every line is JSON; one line per
//! attempt with the fields an operator searches by; one per dead letter and per replay (who, why);
//! the request id on admin API lines; and never a secret, a signature, a token or a payload.
//! Also `kurir stats --watch`, which samples the same server.

use serde_json::{json, Value};

use crate::api::support::{eventually, Receiver};
use crate::cli::{kurir, serve, Serve};

const TOKEN: &str = "log-test-admin-token-9b1f0c";
const SECRET: &str = "whsec_c2VjcmV0LW5ldmVyLWluLXRoZS1sb2dzLTEyMw==";
const MARKER: &str = "payload-marker-5f2e8a";

/// `method path` with the admin token; the JSON answer.
async fn api(server: &Serve, method: reqwest::Method, path: &str, body: Value) -> Value {
    let response = reqwest::Client::new()
        .request(method, format!("{}{path}", server.url))
        .bearer_auth(TOKEN)
        .header("x-request-id", "req-from-the-log-test")
        .header("content-type", "application/json")
        .body(if body.is_null() {
            String::new()
        } else {
            body.to_string()
        })
        .send()
        .await
        .unwrap();
    assert!(
        response.status().is_success(),
        "{path}: {}",
        response.status()
    );
    serde_json::from_slice(&response.bytes().await.unwrap()).unwrap()
}

async fn start(dir: &std::path::Path) -> Serve {
    serve(
        dir,
        &[
            "--listen",
            "127.0.0.1:0",
            "--allowed-networks",
            "127.0.0.0/8",
            "--admin-token",
            TOKEN,
            "--retry-max-attempts",
            "2",
            "--retry-initial-delay",
            "10ms",
            "--poll-interval",
            "20ms",
        ],
    )
    .await
}

/// The log lines so far, each parsed (a line that is not JSON fails the test).
fn lines(server: &Serve) -> Vec<Value> {
    let log = server.log.lock().unwrap().clone();
    log.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

fn with_message<'a>(lines: &'a [Value], message: &str) -> Vec<&'a Value> {
    lines.iter().filter(|l| l["message"] == message).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_carry_each_attempt_dead_letter_and_replay_and_never_a_secret_or_body() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path()).await;
    let ok = Receiver::start().await;
    let down = Receiver::start().await;
    down.respond_with(500);
    let post = reqwest::Method::POST;
    let good = api(
        &server,
        post.clone(),
        "/v1/endpoints",
        json!({"url": ok.url, "secret": SECRET}),
    )
    .await;
    let bad = api(
        &server,
        post.clone(),
        "/v1/endpoints",
        json!({"url": down.url}),
    )
    .await;
    let event = json!({"event_type": "order.paid", "aggregate_type": "order", "aggregate_id": "98765",
        "data": {"note": MARKER}});
    let event_id = api(&server, post.clone(), "/v1/events", event).await["event_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let status_of = |endpoint: &Value| {
        let id = endpoint["id"].as_str().unwrap().to_owned();
        let server = &server;
        let event_id = &event_id;
        async move {
            let shown = api(
                server,
                reqwest::Method::GET,
                &format!("/v1/events/{event_id}"),
                Value::Null,
            )
            .await;
            shown["deliveries"]
                .as_array()
                .unwrap()
                .iter()
                .find(|d| d["endpoint_id"] == id.as_str())
                .map(|d| d["status"].as_str().unwrap().to_owned())
        }
    };
    eventually("one delivery sent, one dead-lettered", || async {
        let sent = status_of(&good).await? == "sent";
        let dead = status_of(&bad).await? == "dead_letter";
        (sent && dead).then_some(())
    })
    .await;
    down.respond_with(200);
    let replay = json!({"endpoint_id": bad["id"], "reason": "partner fixed their TLS"});
    api(
        &server,
        post,
        &format!("/v1/events/{event_id}/replay"),
        replay,
    )
    .await;
    eventually("the replayed delivery to be sent", || async {
        (status_of(&bad).await? == "sent").then_some(())
    })
    .await;
    eventually("the replayed attempt to be logged", || async {
        let lines = lines(&server);
        let replayed = with_message(&lines, "delivery attempt")
            .iter()
            .any(|l| l["trigger"] == "replay" && l["outcome"] == "sent");
        replayed.then_some(())
    })
    .await;

    let lines = lines(&server);
    let attempts = with_message(&lines, "delivery attempt");
    assert_eq!(
        attempts.len(),
        4,
        "1 sent, 2 failed, 1 replayed: {attempts:#?}"
    );
    for line in &attempts {
        for field in [
            "event_id",
            "event_type",
            "aggregate_id",
            "endpoint_id",
            "attempt",
            "duration_ms",
            "outcome",
        ] {
            assert!(!line[field].is_null(), "attempt line has {field}: {line}");
        }
        assert_eq!(line["event_id"], event_id.as_str());
        assert_eq!(line["event_type"], "order.paid");
        assert_eq!(line["aggregate_id"], "98765");
        assert!(
            line["status_code"].is_u64() || line["error"].is_string(),
            "{line}"
        );
    }
    let outcomes: Vec<&str> = attempts
        .iter()
        .map(|l| l["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(
        outcomes.iter().filter(|o| **o == "sent").count(),
        2,
        "{outcomes:?}"
    );
    assert!(
        outcomes.contains(&"retry") && outcomes.contains(&"dead_letter"),
        "{outcomes:?}"
    );
    // A failed attempt is a warning and a delivered one is routine; a dead letter is an error.
    for line in &attempts {
        let expected = if line["outcome"] == "sent" {
            "INFO"
        } else {
            "WARN"
        };
        assert_eq!(line["level"], expected, "{line}");
    }

    let dead = with_message(&lines, "delivery dead-lettered");
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0]["endpoint_id"], bad["id"]);
    assert_eq!(dead[0]["event_id"], event_id.as_str());
    assert_eq!(dead[0]["status_code"], 500);
    assert_eq!(dead[0]["level"], "ERROR", "{}", dead[0]);

    let replays = with_message(&lines, "deliveries replayed");
    assert_eq!(replays.len(), 1);
    assert_eq!(replays[0]["actor"], "admin");
    assert_eq!(replays[0]["reason"], "partner fixed their TLS");
    assert_eq!(replays[0]["replayed"], 1);

    let requests = with_message(&lines, "finished processing request");
    assert!(
        requests
            .iter()
            .any(|l| l["span"]["request_id"] == "req-from-the-log-test"),
        "admin API lines carry the request id: {requests:#?}"
    );

    let log = server.log.lock().unwrap().clone();
    let delivered = ok.received();
    let signature = delivered[0].header("webhook-signature");
    let kurir_signature = delivered[0].header("x-webhook-signature");
    assert!(!signature.is_empty() && !kurir_signature.is_empty());
    let secret_key = SECRET.trim_start_matches("whsec_");
    for (what, secret) in [
        ("the endpoint secret", secret_key),
        (
            "the generated endpoint secret",
            bad["secret"].as_str().unwrap(),
        ),
        ("the admin token", TOKEN),
        ("the payload", MARKER),
        ("a signature", signature.trim_start_matches("v1,")),
        ("a signature", kurir_signature),
    ] {
        assert!(!log.contains(secret), "{what} appears in the log");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_watch_prints_samples_with_rates() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path()).await;
    let out = kurir(dir.path())
        .args([
            "stats",
            "--watch",
            "--interval",
            "50ms",
            "--count",
            "3",
            "--json",
        ])
        .env("KURIR_URL", &server.url)
        .env("KURIR_ADMIN_TOKEN", TOKEN)
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let samples: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert_eq!(samples.len(), 3, "{stdout}");
    assert!(
        samples[0]["rates"].is_null(),
        "no rate before a second sample"
    );
    for sample in &samples[1..] {
        assert_eq!(sample["rates"]["events_per_second"], 0.0);
        assert!(sample["rates"]["interval_seconds"].as_f64().unwrap() > 0.0);
        assert!(
            sample["backlog"].is_object() && sample["at"].is_string(),
            "{sample}"
        );
    }

    let human = kurir(dir.path())
        .args(["stats", "--watch", "--interval", "50ms", "--count", "2"])
        .env("KURIR_URL", &server.url)
        .env("KURIR_ADMIN_TOKEN", TOKEN)
        .output()
        .await
        .unwrap();
    let human = String::from_utf8_lossy(&human.stdout);
    let rows: Vec<&str> = human.lines().collect();
    assert_eq!(
        rows.len(),
        2,
        "one line per sample when not a terminal: {human}"
    );
    assert!(
        rows[1].contains("backlog 0") && rows[1].contains("events 0.0/s"),
        "{human}"
    );
}

/// An event written with SQL that fails its catalog schema is logged once, at ERROR, with its
/// id, type, version and the failing pointer and rule, and never the failing value (payload
/// content); the relay then goes on past it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_catalog_refusal_is_logged_once_at_error_without_the_value() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path()).await;
    let entry = json!({
        "schema": {"type": "object", "properties": {"total": {"type": "integer"}}},
        "examples": [{"total": 1}],
    });
    let put = reqwest::Method::PUT;
    api(&server, put, "/v1/event-types/order.paid/versions/1", entry).await;
    let url = format!(
        "sqlite://{}",
        dir.path().join("kurir-data/kurir.db").display()
    );
    let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
    for (id, total) in [("refused-once", json!(MARKER)), ("after-it", json!(5))] {
        sqlx::query("INSERT INTO kurir_outbox (event_id, event_type, payload) VALUES (?1, 'order.paid', ?2)")
            .bind(id)
            .bind(json!({"total": total}).to_string())
            .execute(&pool)
            .await
            .unwrap();
    }
    eventually("the row after it to be fanned out", || async {
        let shown = api(
            &server,
            reqwest::Method::GET,
            "/v1/events/after-it",
            Value::Null,
        )
        .await;
        shown["dispatched"].as_bool().filter(|d| *d)
    })
    .await;
    let lines = lines(&server);
    let refused = with_message(
        &lines,
        "event refused by the event catalog: recorded as refused, not delivered (kurir events show / kurir events recheck)",
    );
    assert_eq!(refused.len(), 1, "{refused:#?}");
    let line = refused[0];
    assert_eq!(line["level"], "ERROR");
    assert_eq!(line["event_id"], "refused-once");
    assert_eq!(line["event_type"], "order.paid");
    assert_eq!(line["version"], 1);
    let reason = line["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("schema: /total: ") && reason.contains("integer"),
        "{reason}"
    );
    let log = server.log.lock().unwrap().clone();
    assert!(
        !log.contains(MARKER),
        "a payload value reached the log:\n{log}"
    );
    pool.close().await;
}
