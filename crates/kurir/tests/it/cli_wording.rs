//! Issue 33: what the CLI tells a new user agrees with the README. The closing hint of a new
//! inbox source named the `kurir` scheme, which cannot verify a partner's (Stripe's) body;
//! `kurir --help` named neither `KURIR_LISTEN` nor `KURIR_URL`; "cannot reach kurir" did not
//! say which setting points the CLI at the server.

use std::process::Stdio;

use crate::api::support::{Receiver, TestApp};
use crate::cli::{cli_ok, kurir};
use crate::support::TestDb;

const README: &str = include_str!("../../../../README.md");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_stripe_source_is_told_to_verify_forwards_as_the_readme_says() {
    let db = TestDb::sqlite().await;
    let app = TestApp::spawn(&db).await;
    let receiver = Receiver::start().await;
    let out = cli_ok(
        &app,
        &[
            "sources",
            "create",
            "stripe",
            "--scheme",
            "stripe",
            "--secret",
            "whsec_test_secret_stripe",
            "--forward-url",
            &receiver.url,
        ],
    )
    .await;
    app.stopper().stop().await;
    assert!(!out.contains("kurir scheme"), "{out}");
    assert!(
        out.contains("Standard Webhooks") && out.contains("Verifying a delivery"),
        "{out}"
    );
    assert!(
        README.contains("\n### Verifying a delivery\n"),
        "the README has the section the hint names"
    );
}

#[tokio::test]
async fn kurir_help_names_where_the_server_listens_and_where_the_cli_looks() {
    let dir = tempfile::tempdir().unwrap();
    let out = kurir(dir.path()).arg("--help").output().await.unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{help}");
    for setting in ["KURIR_LISTEN", "KURIR_URL"] {
        assert!(help.contains(setting), "{setting} in --help: {help}");
    }
    let quickstart = README
        .split_once("## Quickstart")
        .and_then(|(_, rest)| rest.split_once("\n## "))
        .unwrap()
        .0;
    for said in ["KURIR_LISTEN", "KURIR_URL", "several minutes"] {
        assert!(quickstart.contains(said), "the quickstart says {said}");
    }
}

#[tokio::test]
async fn cannot_reach_kurir_names_kurir_url() {
    let dir = tempfile::tempdir().unwrap();
    // A port nothing listens on: bound, then closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = kurir(dir.path())
        .args(["endpoints", "list"])
        .env("KURIR_URL", format!("http://127.0.0.1:{port}"))
        .env(
            "KURIR_ADMIN_TOKEN",
            "a-token-for-a-server-that-is-not-there",
        )
        .stdout(Stdio::null())
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("cannot reach kurir") && stderr.contains("KURIR_URL"),
        "{stderr}"
    );
}
