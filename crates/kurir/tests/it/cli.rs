//! The `kurir` binary, driven as an operator would: the README quickstart (start `kurir serve`
//! with nothing set up, create an endpoint at a local receiver, send an event, see it delivered
//! with `kurir events show`) and the other operator commands, against a real `kurir serve` child
//! process and a receiver on loopback.

use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use kurir_core::{Scheme, Secret, Verifier};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::api::replays::sent_and_dead_lettered;
use crate::api::support::{eventually, Receiver, TestApp, TOKEN};

const KURIR: &str = env!("CARGO_BIN_EXE_kurir");

/// A `kurir` command with none of the caller's KURIR_* settings.
pub(crate) fn kurir(dir: &Path) -> Command {
    let mut cmd = Command::new(KURIR);
    cmd.current_dir(dir).kill_on_drop(true);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("KURIR_") {
            cmd.env_remove(name);
        }
    }
    cmd
}

/// A `kurir serve` child and what it has logged.
pub(crate) struct Serve {
    _child: Child,
    pub(crate) url: String,
    pub(crate) log: Arc<Mutex<String>>,
}

/// Starts `kurir serve` in `dir` with only `args`; waits for its "kurir serving" log line.
pub(crate) async fn serve(dir: &Path, args: &[&str]) -> Serve {
    serve_with_env(dir, args, &[]).await
}

/// [`serve`] with the environment variables `env` set too (`KURIR_LOG`, say).
pub(crate) async fn serve_with_env(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Serve {
    let mut child = kurir(dir)
        .arg("serve")
        .args(args)
        .envs(env.iter().copied())
        .env("KURIR_LOG_FORMAT", "json")
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("kurir serve starts");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let log = Arc::new(Mutex::new(String::new()));
    let listen = tokio::time::timeout(std::time::Duration::from_secs(30), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            log.lock().unwrap().push_str(&line);
            log.lock().unwrap().push('\n');
            let Ok(entry) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            if entry["message"] == "kurir serving" {
                return entry["listen"].as_str().unwrap().to_owned();
            }
        }
        panic!(
            "kurir serve exited before serving:\n{}",
            log.lock().unwrap()
        );
    })
    .await
    .expect("kurir serve starts within 30 s");
    let keep = log.clone();
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            keep.lock().unwrap().push_str(&line);
            keep.lock().unwrap().push('\n');
        }
    });
    Serve {
        _child: child,
        url: format!("http://{listen}"),
        log,
    }
}

/// Runs a CLI command against `server`; returns stdout, failing on a non-zero exit.
pub(crate) async fn cli(dir: &Path, server: &Serve, args: &[&str]) -> String {
    let out = kurir(dir)
        .args(args)
        .env("KURIR_URL", &server.url)
        .output()
        .await
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success(),
        "kurir {args:?} failed: {stderr}\n{stdout}"
    );
    stdout.into_owned()
}

async fn cli_json(dir: &Path, server: &Serve, args: &[&str]) -> Value {
    let mut args = args.to_vec();
    args.push("--json");
    let out = cli(dir, server, &args).await;
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("kurir {args:?}: not JSON ({e}): {out}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quickstart_works_through_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let receiver = Receiver::start().await;
    let server = serve(
        dir,
        &[
            "--listen",
            "127.0.0.1:0",
            "--allowed-networks",
            "127.0.0.0/8",
        ],
    )
    .await;

    let token_file = dir.join("kurir-data/admin-token");
    let token = std::fs::read_to_string(&token_file).expect("a token was generated");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&token_file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let log = server.log.lock().unwrap().clone();
    assert!(
        log.contains("admin-token"),
        "the log says where the token is:\n{log}"
    );
    assert!(!log.contains(token.trim()), "the log never shows the token");

    // The quickstart, step by step.
    let endpoint = cli_json(
        dir,
        &server,
        &[
            "endpoints",
            "create",
            &receiver.url,
            "--event-type",
            "order.*",
        ],
    )
    .await;
    let secret = Secret::parse(endpoint["secret"].as_str().unwrap()).unwrap();
    let sent = cli_json(
        dir,
        &server,
        &[
            "events",
            "send",
            "--type",
            "order.paid",
            "--data",
            r#"{"order_id":"98765","total":250000}"#,
        ],
    )
    .await;
    let event_id = sent["event_id"].as_str().unwrap().to_owned();
    eventually("the event to be delivered", || async {
        let shown = cli_json(dir, &server, &["events", "show", &event_id]).await;
        (shown["deliveries"][0]["status"] == "sent").then_some(())
    })
    .await;
    let shown = cli(dir, &server, &["events", "show", &event_id]).await;
    assert!(
        shown.contains(&event_id) && shown.contains("sent") && shown.contains("attempt 1"),
        "{shown}"
    );
    // Issue 15: the endpoint shows its circuit breaker.
    let endpoint_id = endpoint["id"].as_str().unwrap();
    let text = cli(dir, &server, &["endpoints", "show", endpoint_id]).await;
    assert!(text.contains("circuit: closed since "), "{text}");
    let json = cli_json(dir, &server, &["endpoints", "show", endpoint_id]).await;
    assert_eq!(json["circuit"]["state"], "closed");
    assert_eq!(json["circuit"]["consecutive_failures"], 0);
    assert!(
        shown.contains(&format!("attempts to {} [", receiver.url)),
        "the endpoint's URL beside its id: {shown}"
    );
    let delivered = receiver.wait_for(1).await.remove(0);
    assert_eq!(delivered.json()["data"]["order_id"], "98765");
    Verifier::new(Scheme::StandardWebhooks, vec![secret])
        .verify(&delivered.headers, &delivered.body, chrono::Utc::now())
        .expect("signed with the endpoint's secret");

    // The other operator commands.
    let file = dir.join("events.ndjson");
    std::fs::write(
        &file,
        "{\"event_type\":\"order.shipped\",\"data\":{\"n\":1}}\n\n{\"event_type\":\"order.shipped\",\"data\":{\"n\":2}}\n",
    )
    .unwrap();
    let bulk = cli(
        dir,
        &server,
        &["events", "send", "--file", file.to_str().unwrap()],
    )
    .await;
    assert!(bulk.contains("2 accepted"), "{bulk}");
    receiver.wait_for(3).await;
    let listed = cli_json(dir, &server, &["events", "list", "--type", "order.shipped"]).await;
    assert_eq!(listed["data"].as_array().unwrap().len(), 2);
    eventually("all three delivered", || async {
        let page = cli_json(dir, &server, &["deliveries", "list", "--status", "sent"]).await;
        (page["data"].as_array()?.len() == 3).then_some(())
    })
    .await;

    let one = cli(
        dir,
        &server,
        &[
            "replay",
            &event_id,
            "--include-sent",
            "--reason",
            "partner asked",
        ],
    )
    .await;
    assert!(one.contains("1 deliveries back to pending"), "{one}");
    receiver.wait_for(4).await;
    eventually("the replayed delivery to be sent again", || async {
        let page = cli_json(dir, &server, &["deliveries", "list", "--status", "sent"]).await;
        (page["data"].as_array()?.len() == 3).then_some(())
    })
    .await;
    let many = cli_json(
        dir,
        &server,
        &[
            "replay",
            "--status",
            "sent",
            "--type",
            "order.shipped",
            "--reason",
            "resend",
        ],
    )
    .await;
    assert_eq!(many["replayed"], 2);
    receiver.wait_for(6).await;

    eventually("the replayed deliveries to be sent again", || async {
        let page = cli_json(dir, &server, &["deliveries", "list", "--status", "sent"]).await;
        (page["data"].as_array()?.len() == 3).then_some(())
    })
    .await;
    let dry = cli(dir, &server, &["replay", "--status", "sent", "--dry-run"]).await;
    assert!(
        dry.contains("3 deliveries match; nothing replayed"),
        "{dry}"
    );
    let tested = cli(
        dir,
        &server,
        &["endpoints", "test", endpoint["id"].as_str().unwrap()],
    )
    .await;
    assert!(tested.starts_with("delivered: HTTP 200 in "), "{tested}");

    // A failing endpoint: the table views show its URL, the error and the response body.
    let down = Receiver::start().await;
    down.respond_with(503);
    let failing = cli_json(
        dir,
        &server,
        &[
            "endpoints",
            "create",
            &down.url,
            "--event-type",
            "invoice.*",
        ],
    )
    .await;
    let failed_id = cli_json(
        dir,
        &server,
        &["events", "send", "--type", "invoice.paid", "--data", "{}"],
    )
    .await["event_id"]
        .as_str()
        .unwrap()
        .to_owned();
    down.wait_for(1).await;
    eventually("the failed attempt to be recorded", || async {
        let shown = cli_json(dir, &server, &["events", "show", &failed_id]).await;
        (!shown["deliveries"][0]["attempts"].as_array()?.is_empty()).then_some(())
    })
    .await;
    let shown = cli(dir, &server, &["events", "show", &failed_id]).await;
    assert!(
        shown.contains("RESPONSE BODY") && shown.contains(&down.url),
        "{shown}"
    );
    let listed = cli(
        dir,
        &server,
        &["deliveries", "list", "--type", "invoice.paid"],
    )
    .await;
    assert!(
        listed.contains(&down.url) && listed.contains(failing["id"].as_str().unwrap()),
        "{listed}"
    );
    let tested = cli(
        dir,
        &server,
        &["endpoints", "test", failing["id"].as_str().unwrap()],
    )
    .await;
    assert!(tested.starts_with("not delivered: HTTP 503"), "{tested}");
    cli(
        dir,
        &server,
        &["endpoints", "delete", failing["id"].as_str().unwrap()],
    )
    .await;
    // Issue 16: its history stays, shown as a deleted endpoint's, its delivery cancelled.
    let shown = cli(dir, &server, &["events", "show", &failed_id]).await;
    let row = shown
        .lines()
        .find(|l| l.contains(&down.url) && l.contains("(deleted "))
        .unwrap_or_else(|| panic!("no row of the deleted endpoint:\n{shown}"));
    assert!(
        row.contains("cancelled") && row.contains(failing["id"].as_str().unwrap()),
        "{shown}"
    );
    assert!(
        shown.contains("RESPONSE BODY"),
        "its attempt stays:\n{shown}"
    );

    let stats = cli_json(dir, &server, &["stats"]).await;
    assert_eq!(stats["events"]["total"], 4);
    let human = cli(dir, &server, &["stats"]).await;
    assert!(
        human.contains("backlog:") && human.contains("inbox: 0 completed"),
        "{human}"
    );
    assert!(
        human.contains(
            "retention: sent events 30d, dead letters 90d, inbox 30d, replay audit forever"
        ),
        "{human}"
    );

    let id = endpoint["id"].as_str().unwrap();
    let rotated = cli_json(
        dir,
        &server,
        &["endpoints", "rotate-secret", id, "--grace", "1h"],
    )
    .await;
    assert_ne!(rotated["secret"], endpoint["secret"]);
    let disabled = cli_json(
        dir,
        &server,
        &[
            "endpoints",
            "update",
            id,
            "--disable",
            "--reason",
            "maintenance",
        ],
    )
    .await;
    assert_eq!(disabled["enabled"], false);
    let table = cli(dir, &server, &["endpoints", "list"]).await;
    assert!(table.contains(id) && table.contains("false"), "{table}");
    cli(dir, &server, &["endpoints", "delete", id]).await;

    let refused = kurir(dir)
        .args(["stats"])
        .env("KURIR_URL", &server.url)
        .env("KURIR_ADMIN_TOKEN", "wrong")
        .output()
        .await
        .unwrap();
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("unauthorized"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inbox_sources_are_managed_through_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let receiver = Receiver::start().await;
    let args = [
        "--listen",
        "127.0.0.1:0",
        "--allowed-networks",
        "127.0.0.0/8",
    ];
    let server = serve(dir, &args).await;
    let partner_secret = "partner-secret-1234";
    let created = cli_json(
        dir,
        &server,
        &[
            "sources",
            "create",
            "billing",
            "--scheme",
            "kurir",
            "--secret",
            partner_secret,
            "--forward-url",
            &receiver.url,
        ],
    )
    .await;
    assert_eq!(created["inbox_path"], "/inbox/billing");
    let forward_secret = created["forward_secret"].as_str().unwrap().to_owned();
    let read_token = created["read_token"].as_str().unwrap().to_owned();

    let body = br#"{"event_id":"evt_cli","invoice":"inv_1"}"#;
    let secret = Secret::parse(partner_secret).unwrap();
    let signed = kurir_core::signature_headers(
        "evt_cli",
        "invoice.paid",
        &[&secret],
        chrono::Utc::now(),
        body,
    );
    let mut request = reqwest::Client::new()
        .post(format!("{}/inbox/billing", server.url))
        .body(body.to_vec());
    for (name, value) in signed {
        request = request.header(name, value);
    }
    assert_eq!(request.send().await.unwrap().status(), 202);
    let forward = receiver.wait_for(1).await.remove(0);
    Verifier::new(Scheme::Kurir, vec![Secret::parse(&forward_secret).unwrap()])
        .verify(&forward.headers, &forward.body, chrono::Utc::now())
        .expect("forwarded, signed with the source's forward secret");

    let table = cli(dir, &server, &["sources", "list"]).await;
    assert!(
        table.contains("billing") && table.contains("/inbox/billing"),
        "{table}"
    );
    eventually("the forward to be recorded", || async {
        let page = cli_json(
            dir,
            &server,
            &["sources", "events", "billing", "--status", "completed"],
        )
        .await;
        (page["data"][0]["event_id"] == "evt_cli").then_some(())
    })
    .await;
    let events = cli(dir, &server, &["sources", "events", "billing"]).await;
    assert!(
        events.contains("evt_cli") && events.contains("completed"),
        "{events}"
    );
    // One event with its history: the forward that completed it.
    let history = cli(dir, &server, &["sources", "event", "billing", "evt_cli"]).await;
    assert!(
        history.contains("status:")
            && history.contains("completed")
            && history.contains("attempt 1"),
        "{history}"
    );
    let refused = kurir(dir)
        .args(["sources", "retry", "billing", "evt_cli"])
        .env("KURIR_URL", &server.url)
        .output()
        .await
        .unwrap();
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("only a failed event can be retried"),
        "{refused:?}"
    );
    let changed = cli_json(
        dir,
        &server,
        &["sources", "update", "billing", "--tolerance-seconds", "60"],
    )
    .await;
    assert_eq!(changed["tolerance_seconds"], 60);
    let shown = cli(dir, &server, &["sources", "show", "billing"]).await;
    assert!(
        shown.contains("secret_count:") && !shown.contains(&forward_secret),
        "{shown}"
    );
    cli(dir, &server, &["sources", "delete", "billing"]).await;
    assert!(
        cli(dir, &server, &["sources", "list"])
            .await
            .lines()
            .count()
            == 1
    );

    let log = server.log.lock().unwrap().clone();
    for secret in [partner_secret, &forward_secret, &read_token] {
        assert!(
            !log.contains(secret),
            "the log never shows a secret or token"
        );
    }
}

#[tokio::test]
async fn serve_refuses_a_weak_token_on_a_public_address() {
    let dir = tempfile::tempdir().unwrap();
    let weak = "weak-token-7f3a";
    let child = kurir(dir.path())
        .args(["serve", "--listen", "0.0.0.0:0"])
        .env("KURIR_ADMIN_TOKEN", weak)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Dropping the child on a timeout kills it (kill_on_drop).
    let out = tokio::time::timeout(std::time::Duration::from_secs(30), child.wait_with_output())
        .await
        .expect("kurir serve refuses to start, rather than serving with a weak token")
        .unwrap();
    assert!(!out.status.success(), "a 15-character token is refused");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("at least 32") && stderr.contains("openssl rand -hex 32"),
        "the message says how to make a good token: {stderr}"
    );
    assert!(
        !stderr.contains(weak),
        "the token is never printed: {stderr}"
    );
    assert!(
        !dir.path().join("kurir-data").exists(),
        "nothing was created"
    );
}

#[tokio::test]
async fn serve_refuses_a_public_address_without_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let out = kurir(dir.path())
        .args(["serve", "--listen", "0.0.0.0:0"])
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("KURIR_ADMIN_TOKEN") && stderr.contains("0.0.0.0"),
        "{stderr}"
    );
    assert!(
        !dir.path().join("kurir-data").exists(),
        "nothing was created"
    );
}

#[tokio::test]
async fn endpoint_deletion_says_disabling_keeps_everything_and_can_skip_the_question() {
    let dir = tempfile::tempdir().unwrap();
    let out = kurir(dir.path())
        .args(["endpoints", "delete", "--help"])
        .output()
        .await
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(
        help.contains("--yes") && help.contains("Disabling an endpoint") && help.contains("keeps"),
        "{help}"
    );
}

/// Runs a CLI command against the in-process `app`; returns its exit status, stdout and stderr.
pub(crate) async fn cli_at(app: &TestApp, args: &[&str]) -> (bool, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let out = kurir(dir.path())
        .args(args)
        .env("KURIR_URL", &app.url)
        .env("KURIR_ADMIN_TOKEN", TOKEN)
        .output()
        .await
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// [`cli_at`], failing on a non-zero exit; its stdout.
pub(crate) async fn cli_ok(app: &TestApp, args: &[&str]) -> String {
    let (ok, stdout, stderr) = cli_at(app, args).await;
    assert!(ok, "kurir {args:?} failed: {stderr}\n{stdout}");
    stdout
}

crate::on_both_backends!(
    kurir_replay_of_an_event_resends_only_what_failed_and_dry_runs_the_list,
    kurir_replays_list_shows_the_audit_newest_first_and_paged,
    kurir_endpoints_list_pages_oldest_first_with_the_next_pages_hint,
    the_cli_shows_a_held_delivery_and_closes_the_circuit_audited_as_the_clis,
);

/// Issue 33: a delivery held by an open circuit showed `failed` with a next attempt in the
/// past, and the endpoint list had no circuit. The CLI now says `held: circuit open (probe at
/// …)`, lists the circuit, and closes it (audited as the CLI's).
async fn the_cli_shows_a_held_delivery_and_closes_the_circuit_audited_as_the_clis(app: TestApp) {
    let receiver = Receiver::start().await;
    receiver.respond_with(500);
    let endpoint = app
        .create_endpoint(
            &receiver.url,
            json!({"circuit_failure_threshold": 1, "circuit_cooldown_ms": 600_000}),
        )
        .await;
    let id = endpoint["id"].as_str().unwrap();
    let event = app.publish("order.paid", json!({"n": 1})).await;
    eventually("the circuit to open", || async {
        let (_, e) = app.get(&format!("/v1/endpoints/{id}")).await;
        (e["circuit"]["state"] == "open").then_some(())
    })
    .await;
    let listed = cli_ok(&app, &["deliveries", "list"]).await;
    assert!(listed.contains("held: circuit open (probe at "), "{listed}");
    let shown = cli_ok(&app, &["events", "show", &event]).await;
    assert!(shown.contains("held: circuit open (probe at "), "{shown}");
    let endpoints = cli_ok(&app, &["endpoints", "list"]).await;
    assert!(endpoints.contains("CIRCUIT"), "{endpoints}");
    assert!(endpoints.contains("open (probe at "), "{endpoints}");

    receiver.respond_with(200);
    let closed = cli_ok(&app, &["endpoints", "close-circuit", id]).await;
    assert!(closed.contains("circuit: closed"), "{closed}");
    app.wait_for_deliveries(&event, "sent").await;
    let (ok, _, stderr) = cli_at(&app, &["endpoints", "probe", id]).await;
    assert!(!ok && stderr.contains("closed"), "{stderr}");
    let (_, audit) = app
        .get(&format!("/v1/endpoints/{id}/circuit/actions"))
        .await;
    assert_eq!(audit["data"][0]["action"], "close", "{audit}");
    assert_eq!(audit["data"][0]["via"], "cli", "{audit}");
    assert_eq!(audit["data"].as_array().unwrap().len(), 1, "{audit}");
}

/// Regressions: `kurir replay EVENT_ID --dry-run` was refused by clap, and `kurir replay
/// EVENT_ID` re-sent the event to the endpoint that already had it.
async fn kurir_replay_of_an_event_resends_only_what_failed_and_dry_runs_the_list(app: TestApp) {
    let (ok, down) = (Receiver::start().await, Receiver::start().await);
    let (event_id, healthy, failing) = sent_and_dead_lettered(&app, &ok, &down).await;
    let dry = cli_ok(&app, &["replay", &event_id, "--dry-run"]).await;
    assert!(
        dry.contains(&failing) && dry.contains(&down.url) && dry.contains("dead_letter"),
        "the dry run names the delivery that would go: {dry}"
    );
    assert!(!dry.contains(&healthy), "not the one that was sent: {dry}");
    assert!(
        dry.contains("--include-sent"),
        "and says how to add it: {dry}"
    );
    let json = cli_ok(
        &app,
        &["replay", &event_id, "--dry-run", "--include-sent", "--json"],
    )
    .await;
    let json: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(json["matching"], 2, "{json}");

    let one = cli_ok(&app, &["replay", &event_id, "--reason", "partner is back"]).await;
    assert!(one.contains("1 deliveries back to pending"), "{one}");
    down.wait_for(2).await;
    app.wait_for_deliveries(&event_id, "sent").await;
    assert_eq!(
        ok.received().len(),
        1,
        "the healthy receiver got no duplicate"
    );

    let again = cli_ok(
        &app,
        &[
            "replay",
            &event_id,
            "--include-sent",
            "--reason",
            "resend all",
        ],
    )
    .await;
    assert!(again.contains("2 deliveries back to pending"), "{again}");
    ok.wait_for(2).await;
}

/// Regression: there was no way to read the replay audit from the command line.
async fn kurir_replays_list_shows_the_audit_newest_first_and_paged(app: TestApp) {
    for reason in ["first look", "second look"] {
        let (status, body) = app
            .post("/v1/replays", serde_json::json!({"reason": reason}))
            .await;
        assert_eq!(status, reqwest::StatusCode::ACCEPTED, "{body}");
    }
    let all = cli_ok(&app, &["replays", "list"]).await;
    let lines: Vec<&str> = all.lines().collect();
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(
        header,
        ["WHEN", "WHO", "FROM", "REASON", "FILTER", "COUNT"],
        "{all}"
    );
    assert!(
        lines[1].contains("second look") && lines[2].contains("first look"),
        "newest first: {all}"
    );
    assert!(
        lines[1].contains("admin")
            && lines[1].contains(" api ")
            && lines[1].contains(r#"{"status":"dead_letter"}"#),
        "{all}"
    );
    let page = cli_ok(&app, &["replays", "list", "--limit", "1"]).await;
    assert!(
        page.contains("second look") && !page.contains("first look"),
        "{page}"
    );
    let cursor = page
        .split("--cursor ")
        .nth(1)
        .map(|rest| rest.trim().trim_end_matches(')'))
        .unwrap_or_else(|| panic!("a next page: {page}"));
    let older = cli_ok(
        &app,
        &["replays", "list", "--limit", "1", "--cursor", cursor],
    )
    .await;
    assert!(
        older.contains("first look") && !older.contains("second look"),
        "{older}"
    );
    let json = cli_ok(&app, &["replays", "list", "--json"]).await;
    let json: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(json["data"][0]["reason"], "second look");
}

/// Issues 27 and 33: `kurir endpoints list` shows one page, oldest first, and says how to get
/// the next, like the other lists.
async fn kurir_endpoints_list_pages_oldest_first_with_the_next_pages_hint(app: TestApp) {
    for n in 0..3 {
        app.create_endpoint(&format!("https://e{n}.example/"), serde_json::json!({}))
            .await;
    }
    let first = cli_ok(&app, &["endpoints", "list", "--limit", "2"]).await;
    let header: Vec<&str> = first.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header[..3], ["ID", "URL", "ENABLED"], "{first}");
    assert!(
        first.contains("https://e0.example/") && first.contains("https://e1.example/"),
        "{first}"
    );
    assert!(!first.contains("https://e2.example/"), "{first}");
    let cursor = first
        .split("--cursor ")
        .nth(1)
        .map(|rest| rest.trim().trim_end_matches(')'))
        .unwrap_or_else(|| panic!("a next page: {first}"));
    let next = ["endpoints", "list", "--limit", "2", "--cursor", cursor];
    let second = cli_ok(&app, &next).await;
    assert!(second.contains("https://e2.example/"), "{second}");
    assert!(!second.contains("https://e1.example/"), "{second}");
    assert!(!second.contains("--cursor"), "the last page: {second}");
    let json = cli_ok(&app, &["endpoints", "list", "--json"]).await;
    let json: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(json["data"][2]["url"], "https://e2.example/", "{json}");
}

/// Regression: a usage error printed `Usage: kurir replay --url <URL> …`, as if the URL were
/// required; it has a default and comes from KURIR_URL.
#[tokio::test]
async fn kurir_replay_usage_shows_the_url_as_optional() {
    let dir = tempfile::tempdir().unwrap();
    let out = kurir(dir.path())
        .args([
            "replay",
            "--url",
            "http://127.0.0.1:9",
            "evt_1",
            "--status",
            "sent",
        ])
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "--status is for replays by filter: {stderr}"
    );
    let usage = stderr
        .lines()
        .find(|l| l.starts_with("Usage:"))
        .unwrap_or_else(|| panic!("a usage line: {stderr}"));
    assert!(
        !usage.replace("[--url <URL>]", "").contains("--url"),
        "the URL is optional: {usage}"
    );
    let help = kurir(dir.path())
        .args(["replay", "--help"])
        .output()
        .await
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("KURIR_URL"), "{help}");
}

/// Runs `kurir` against `server` with `KURIR_TOKEN` set to `token`; its exit status, stdout and
/// stderr.
async fn cli_with_token(
    dir: &Path,
    server: &Serve,
    token: &str,
    args: &[&str],
) -> (bool, String, String) {
    let out = kurir(dir)
        .args(args)
        .env("KURIR_URL", &server.url)
        .env("KURIR_TOKEN", token)
        .output()
        .await
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Issue 33 through the real binaries: the admin (the generated token) creates named tokens with
/// `kurir tokens create`, which prints the token once; `kurir tokens list` never shows it; a
/// replay made with a named token through the CLI is audited under its name as `cli`, through
/// plain HTTP as `api`; `kurir whoami` names the token; a viewer's replay and a revoked token are
/// refused; and the server's log holds no token, only names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn named_tokens_through_the_cli_are_audited_by_name_and_never_logged() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let server = serve(dir, &["--listen", "127.0.0.1:0"]).await;
    let created = cli(
        dir,
        &server,
        &[
            "tokens",
            "create",
            "--name",
            "deploy-bot",
            "--role",
            "operator",
            "--expires",
            "90d",
        ],
    )
    .await;
    let secret = created
        .lines()
        .find_map(|l| l.strip_prefix("token: "))
        .unwrap_or_else(|| panic!("the token, once: {created}"))
        .to_owned();
    assert!(
        secret.starts_with("kurir_") && created.contains("only now"),
        "{created}"
    );
    let id = created
        .lines()
        .find_map(|l| l.strip_prefix("id:"))
        .unwrap()
        .trim()
        .to_owned();
    let viewer = cli_json(
        dir,
        &server,
        &["tokens", "create", "--name", "auditor", "--role", "viewer"],
    )
    .await;
    let viewer = viewer["token"].as_str().unwrap().to_owned();
    let list = cli(dir, &server, &["tokens", "list"]).await;
    assert!(
        list.contains("deploy-bot") && list.contains("operator") && list.contains("active"),
        "{list}"
    );
    assert!(
        !list.contains(&secret) && !list.contains(&viewer),
        "never the secret: {list}"
    );

    let (ok, me, err) = cli_with_token(dir, &server, &secret, &["whoami"]).await;
    assert!(
        ok && me.contains("deploy-bot") && me.contains("operator"),
        "{me}{err}"
    );
    let (ok, out, err) = cli_with_token(
        dir,
        &server,
        &secret,
        &["replay", "--reason", "from the cli"],
    )
    .await;
    assert!(ok, "{out}{err}");
    let by_http = reqwest::Client::new()
        .post(format!("{}/v1/replays", server.url))
        .bearer_auth(&secret)
        .body(r#"{"reason":"from a script"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(by_http.status(), reqwest::StatusCode::ACCEPTED);
    let (ok, out, err) = cli_with_token(
        dir,
        &server,
        &viewer,
        &["replay", "--reason", "not allowed"],
    )
    .await;
    assert!(
        !ok && err.contains("viewer") && err.contains("HTTP 403"),
        "{out}{err}"
    );
    let audit = cli_json(dir, &server, &["replays", "list"]).await;
    let who: Vec<(&str, &str, &str)> = audit["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let field = |k: &str| r[k].as_str().unwrap();
            (field("actor"), field("via"), field("reason"))
        })
        .collect();
    assert_eq!(
        who,
        [
            ("deploy-bot", "api", "from a script"),
            ("deploy-bot", "cli", "from the cli")
        ]
    );

    let revoked = cli(dir, &server, &["tokens", "revoke", &id]).await;
    assert!(revoked.contains(&id), "{revoked}");
    let (ok, out, err) = cli_with_token(dir, &server, &secret, &["whoami"]).await;
    assert!(
        !ok && err.contains("HTTP 401"),
        "refused at once: {out}{err}"
    );
    let list = cli_json(dir, &server, &["tokens", "list"]).await;
    let row = &list["data"][1];
    assert_eq!(
        (&row["name"], &row["status"]),
        (&json!("deploy-bot"), &json!("revoked"))
    );
    assert_eq!(
        (&row["revoked_by"], &row["revoked_via"]),
        (&json!("admin"), &json!("cli"))
    );

    let log = server.log.lock().unwrap().clone();
    for token in [&secret, &viewer] {
        assert!(!log.contains(token.as_str()), "a token in the log:\n{log}");
    }
    let admin = std::fs::read_to_string(dir.join("kurir-data/admin-token")).unwrap();
    assert!(!log.contains(admin.trim()), "the admin token in the log");
    let lines: Vec<Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let request_by = |via: &str| {
        lines
            .iter()
            .any(|l| l["span"]["actor"] == "deploy-bot" && l["span"]["via"] == via)
    };
    assert!(
        request_by("cli") && request_by("api") && log.contains("token created"),
        "the request log lines say who, by name, and from where:\n{log}"
    );
}

/// `kurir event-types apply catalog.yaml` is idempotent, reports what it changes, and
/// `--dry-run` reports the same and changes nothing; a bad file changes nothing and names the
/// entry and field. `kurir events recheck` delivers what passes after a schema fix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kurir_event_types_apply_is_idempotent_and_dry_runs() {
    let Some(db) = crate::support::TestDb::unmigrated(crate::support::Backend::Sqlite).await else {
        return;
    };
    let app = TestApp::spawn(&db).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("catalog.yaml");
    let write = |text: &str| std::fs::write(&file, text).unwrap();
    let v1 = "event_types:
  - event_type: order.paid
    version: 1
    description: An order was paid.
    schema:
      type: object
      required: [total]
      properties:
        total: {type: integer}
    examples:
      - {total: 250000}
";
    write(v1);
    let path = file.to_str().unwrap();
    let dry = cli_ok(&app, &["event-types", "apply", path, "--dry-run"]).await;
    assert!(dry.contains("would create order.paid v1"), "{dry}");
    assert!(dry.contains("nothing changed"), "{dry}");
    let (_, list) = app.get("/v1/event-types").await;
    assert_eq!(
        list["data"],
        serde_json::json!([]),
        "a dry run writes nothing"
    );
    let first = cli_ok(&app, &["event-types", "apply", path]).await;
    assert!(first.contains("created order.paid v1"), "{first}");
    let again = cli_ok(&app, &["event-types", "apply", path]).await;
    assert!(again.contains("unchanged order.paid v1"), "{again}");
    assert!(
        again.contains("0 created, 0 updated, 1 unchanged"),
        "{again}"
    );

    let v2 = format!(
        "{}  - event_type: order.paid
    version: 2
    examples: [{{total: 1}}]
",
        v1.replace("description: An order was paid.", "description: Paid.\n    deprecated: true\n    successor: {event_type: order.paid, version: 2}")
    );
    write(&v2);
    let dry = cli_ok(&app, &["event-types", "apply", path, "--dry-run", "--json"]).await;
    let dry: Value = serde_json::from_str(&dry).unwrap();
    assert_eq!(dry["created"][0]["version"], 2, "{dry}");
    assert_eq!(
        dry["updated"][0]["fields"],
        serde_json::json!(["description", "deprecated", "successor"]),
        "{dry}"
    );
    let applied = cli_ok(&app, &["event-types", "apply", path]).await;
    assert!(applied.contains("created order.paid v2"), "{applied}");
    assert!(
        applied.contains("updated order.paid v1 (description, deprecated, successor)"),
        "{applied}"
    );

    write(&v2.replace("{total: 250000}", "{total: \"250000\"}"));
    let (ok, _, stderr) = cli_at(&app, &["event-types", "apply", path]).await;
    assert!(!ok);
    assert!(
        stderr.contains("event_types[0] (order.paid v1).examples[0]"),
        "{stderr}"
    );
    let (_, entry) = app.get("/v1/event-types/order.paid/versions/1").await;
    assert_eq!(entry["examples"][0]["total"], 250000, "nothing changed");
    let recheck = cli_ok(&app, &["events", "recheck"]).await;
    assert!(recheck.contains("checked 0 refused events"), "{recheck}");
    app.stopper().stop().await;
}
