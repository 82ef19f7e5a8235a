//! Issue 33: the README's signature verification snippets (PHP and Python, the kurir scheme and
//! Standard Webhooks), run as written against a real delivery: each accepts the delivery as it
//! arrived and refuses it with one byte of the body changed. The snippets are read from the
//! README at test time, so the two cannot drift apart. Issue 31: the snippet that calls a
//! Standard Webhooks library (the subscriber portal's first example) runs on the real
//! `standardwebhooks` package, in `KURIR_STANDARDWEBHOOKS_PYTHON` (a Python that has it).
//!
//! `php` (Debian's `php-cli`) and `python3` are found on the PATH (or `KURIR_PHP`,
//! `KURIR_PYTHON`); without one the test is skipped with a notice, except under CI, where that
//! is a failure.

use std::process::Command;

use serde_json::json;

use crate::api::support::{Receiver, TestApp};
use crate::support::TestDb;

/// The ```lang block that follows the README line starting with `heading`.
fn readme_block(heading: &str, lang: &str) -> String {
    let readme = include_str!("../../../../README.md");
    let after = readme
        .split_once(&format!("\n{heading}"))
        .unwrap_or_else(|| panic!("the README has a line {heading}"))
        .1;
    after
        .split_once(&format!("```{lang}\n"))
        .and_then(|(_, rest)| rest.split_once("\n```"))
        .unwrap_or_else(|| panic!("a ```{lang} block follows {heading}"))
        .0
        .to_owned()
}

/// The interpreter named by `var`, else `default` on the PATH, when `--version` runs.
fn interpreter(var: &str, default: &str) -> Option<String> {
    let program = std::env::var(var).unwrap_or_else(|_| default.into());
    let runs = Command::new(&program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    match runs {
        true => Some(program),
        false if std::env::var_os("CI").is_some() => {
            panic!("CI is set but `{program}` does not run (apt-get install php-cli python3)")
        }
        false => {
            eprintln!("notice: no `{program}`; skipping the README's verification snippets");
            None
        }
    }
}

/// PHP: the two snippets, then both checks of the delivery in `KURIR_CASE` (a JSON file);
/// prints what each check said.
const PHP_RUN: &str = r#"
$case = json_decode(file_get_contents(getenv('KURIR_CASE')), true);
$h = $case['headers'];
$body = base64_decode($case['body']);
foreach (['kurir', 'standard'] as $scheme) {
    try {
        if ($scheme === 'kurir') {
            verify_kurir($h['x-webhook-signature'], $h['x-webhook-timestamp'], $body, $case['secret']);
        } else {
            verify_standard($h['webhook-id'], $h['webhook-timestamp'], $h['webhook-signature'], $body, $case['secret']);
        }
        echo "$scheme: ok\n";
    } catch (RuntimeException $e) {
        echo "$scheme: " . $e->getMessage() . "\n";
    }
}
"#;

/// Python: the same, with headers looked up case-insensitively as web frameworks do.
const PYTHON_RUN: &str = r#"
import base64, json, os

class Headers(dict):
    def __getitem__(self, name):
        return dict.__getitem__(self, name.lower())

case = json.load(open(os.environ["KURIR_CASE"]))
headers, body = Headers(case["headers"]), base64.b64decode(case["body"])
for scheme, check in [("kurir", verify_kurir), ("standard", verify_standard)]:
    try:
        check(headers, body, case["secret"])
        print(f"{scheme}: ok")
    except ValueError as e:
        print(f"{scheme}: {e}")
"#;

/// Runs `program` on `script` for the delivery `case`; its stdout.
fn run(program: &str, script: &str, extension: &str, case: &serde_json::Value) -> String {
    let dir = tempfile::tempdir().unwrap();
    let (path, case_path) = (
        dir.path().join(format!("verify.{extension}")),
        dir.path().join("case.json"),
    );
    std::fs::write(&path, script).unwrap();
    std::fs::write(&case_path, case.to_string()).unwrap();
    let out = Command::new(program)
        .arg(&path)
        .env("KURIR_CASE", &case_path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{program}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Python with the `standardwebhooks` package: the library snippet on the delivery in
/// `KURIR_CASE`.
const LIBRARY_RUN: &str = r#"
import base64, json, os

case = json.load(open(os.environ["KURIR_CASE"]))
body = base64.b64decode(case["body"])
try:
    data = verify_with_library(case["headers"], body, case["secret"])
    print("library: ok", data["event_type"])
except WebhookVerificationError as e:
    print(f"library: {e}")
"#;

/// A real delivery to an endpoint: its headers, body and the endpoint's secret.
async fn a_delivery() -> (serde_json::Map<String, serde_json::Value>, Vec<u8>, String) {
    let db = TestDb::sqlite().await;
    let app = TestApp::spawn(&db).await;
    let receiver = Receiver::start().await;
    let endpoint = app.create_endpoint(&receiver.url, json!({})).await;
    let secret = endpoint["secret"].as_str().unwrap().to_owned();
    app.publish("order.paid", json!({"order_id": "98765", "total": 250000}))
        .await;
    let delivery = receiver.wait_for(1).await.remove(0);
    app.stopper().stop().await;
    let headers = delivery
        .headers
        .iter()
        .map(|(name, value)| (name.as_str().to_owned(), value.to_str().unwrap().into()))
        .collect();
    (headers, delivery.body.to_vec(), secret)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readmes_library_snippet_verifies_a_real_delivery_with_standardwebhooks() {
    let Some(python) = interpreter("KURIR_STANDARDWEBHOOKS_PYTHON", "python3") else {
        return;
    };
    let (headers, body, secret) = a_delivery().await;
    let case = |body: &[u8]| {
        use base64::Engine as _;
        json!({
            "headers": headers,
            "body": base64::engine::general_purpose::STANDARD.encode(body),
            "secret": secret,
        })
    };
    let script = format!(
        "{}\n{LIBRARY_RUN}",
        readme_block("**Python, a Standard Webhooks library**", "python")
    );
    assert_eq!(
        run(&python, &script, "py", &case(&body)),
        "library: ok order.paid\n"
    );
    let mut changed = body.clone();
    let at = changed.iter().position(|b| *b == b'9').unwrap();
    changed[at] = b'8';
    let refused = run(&python, &script, "py", &case(&changed));
    assert!(
        refused.starts_with("library: ") && !refused.contains("ok"),
        "{refused}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readmes_verification_snippets_accept_a_real_delivery_and_refuse_a_changed_one() {
    let (Some(php), Some(python)) = (
        interpreter("KURIR_PHP", "php"),
        interpreter("KURIR_PYTHON", "python3"),
    ) else {
        return;
    };
    let db = TestDb::sqlite().await;
    let app = TestApp::spawn(&db).await;
    let receiver = Receiver::start().await;
    let endpoint = app.create_endpoint(&receiver.url, json!({})).await;
    let secret = endpoint["secret"].as_str().unwrap().to_owned();
    assert!(secret.starts_with("whsec_"), "{secret}");
    app.publish("order.paid", json!({"order_id": "98765", "total": 250000}))
        .await;
    let delivery = receiver.wait_for(1).await.remove(0);
    app.stopper().stop().await;

    let headers: serde_json::Map<String, serde_json::Value> = delivery
        .headers
        .iter()
        .map(|(name, value)| (name.as_str().to_owned(), value.to_str().unwrap().into()))
        .collect();
    let case = |body: &[u8]| {
        use base64::Engine as _;
        json!({
            "headers": headers,
            "body": base64::engine::general_purpose::STANDARD.encode(body),
            "secret": secret,
        })
    };
    let mut changed = delivery.body.to_vec();
    let at = changed.iter().position(|b| *b == b'9').unwrap();
    changed[at] = b'8';

    let php_script = format!(
        "<?php\n{}\n{}\n{PHP_RUN}",
        readme_block("**PHP, kurir scheme**", "php"),
        readme_block("**PHP, Standard Webhooks**", "php"),
    );
    let python_script = format!(
        "{}\n\n{}\n{PYTHON_RUN}",
        readme_block("**Python, kurir scheme**", "python"),
        readme_block("**Python, Standard Webhooks**", "python"),
    );
    for (program, script, extension) in
        [(&php, &php_script, "php"), (&python, &python_script, "py")]
    {
        assert_eq!(
            run(program, script, extension, &case(&delivery.body)),
            "kurir: ok\nstandard: ok\n",
            "{program} accepts the delivery as it arrived"
        );
        assert_eq!(
            run(program, script, extension, &case(&changed)),
            "kurir: bad signature\nstandard: bad signature\n",
            "{program} refuses a changed body"
        );
    }
}
