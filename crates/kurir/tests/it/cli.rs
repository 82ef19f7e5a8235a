//! The `kurir` binary, driven as an operator would: the README quickstart (start `kurir serve`
//! with nothing set up, create an endpoint at a local receiver, send an event, see it delivered
//! with `kurir events show`) and the other operator commands, against a real `kurir serve` child
//! process and a receiver on loopback.

use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use kurir_core::{Scheme, Secret, Verifier};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::api::support::{eventually, Receiver};

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
    let mut child = kurir(dir)
        .arg("serve")
        .args(args)
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
        shown.contains(&event_id) && shown.contains("sent") && shown.contains("scheduled"),
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
        &["replay", &event_id, "--reason", "partner asked"],
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
