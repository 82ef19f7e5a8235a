//! Secrets encrypted at rest, on both backends: a database dump holds no secret, deliveries and
//! forwards verify with the secrets the API showed, plain secrets from before the upgrade are
//! sealed at start, a wrong key stops the start, and a key rotation leaves every delivery
//! verifiable.

use base64::Engine;
use chrono::Utc;
use kurir::encryption::Keyring;
use kurir::store::Store;
use kurir_core::{Scheme, Secret, Verifier};
use reqwest::StatusCode;
use serde_json::json;

use crate::api::support::{on_both_backends, Backend, Received, Receiver, TestApp, TestDb};
use crate::gateway::{create_source, post_inbox, standard_webhook, PARTNER_SECRET};

on_both_backends!(
    a_dump_holds_no_secret_and_deliveries_verify_with_the_secrets_shown,
    plain_secrets_from_before_the_upgrade_are_sealed_at_first_start,
    a_wrong_key_is_refused_at_start_naming_the_setting,
    rotating_the_key_file_leaves_every_delivery_verifiable,
    old_and_new_configured_keys_both_open_during_a_rotation,
);

fn verifies(secret: &str, r: &Received) -> bool {
    let secret = Secret::parse(secret).unwrap();
    Verifier::new(Scheme::StandardWebhooks, vec![secret])
        .verify(&r.headers, &r.body, Utc::now())
        .is_ok()
}

/// The whole database as text: `pg_dump`, SQLite's `.dump`, or `mysqldump`.
fn dump(db: &TestDb) -> String {
    let output = match db.backend {
        Backend::Postgres => std::process::Command::new("pg_dump")
            .args(["--dbname", &db.url])
            .output(),
        Backend::Sqlite => std::process::Command::new("sqlite3")
            .args([db.url.trim_start_matches("sqlite://"), ".dump"])
            .output(),
        Backend::Mysql => {
            let url = url::Url::parse(&db.url).unwrap();
            let mut cmd = std::process::Command::new("mysqldump");
            // The migrations' checksums are binary: written as hex, the dump stays text.
            cmd.arg("--hex-blob")
                .arg(format!("--host={}", url.host_str().unwrap_or("127.0.0.1")))
                .arg(format!("--port={}", url.port().unwrap_or(3306)))
                .arg(format!("--user={}", url.username()));
            if let Some(password) = url.password() {
                cmd.arg(format!("--password={password}"));
            }
            cmd.arg(url.path().trim_start_matches('/')).output()
        }
    }
    .expect("the database's dump tool runs");
    assert!(output.status.success(), "{output:?}");
    String::from_utf8(output.stdout).unwrap()
}

/// Fails if `dump` holds `secret`: its text, the base64 after `whsec_`, or the base64 of its
/// text.
fn assert_not_in(dump: &str, secret: &str) {
    let base64 = base64::engine::general_purpose::STANDARD;
    let bare = secret.strip_prefix("whsec_").unwrap_or(secret);
    for needle in [secret, bare, &base64.encode(secret), &base64.encode(bare)] {
        assert!(!dump.contains(needle), "the dump holds a secret: {needle}");
    }
}

/// Each stored endpoint's `secret` column as it is in the database.
async fn stored_secrets(store: &Store) -> Vec<String> {
    let sql = "SELECT secret FROM kurir_endpoints ORDER BY id";
    // MySQL reports the `utf8mb4_bin` column as binary, which does not decode into a `String`.
    let cast = "SELECT CAST(secret AS CHAR) FROM kurir_endpoints ORDER BY id";
    match store {
        Store::Postgres(pg) => sqlx::query_scalar(sql).fetch_all(pg.pool()).await,
        Store::Sqlite(sq) => sqlx::query_scalar(sql).fetch_all(sq.pool()).await,
        Store::Mysql(my) => sqlx::query_scalar(cast).fetch_all(my.pool()).await,
    }
    .unwrap()
}

async fn a_dump_holds_no_secret_and_deliveries_verify_with_the_secrets_shown(db: TestDb) {
    let app = TestApp::spawn(&db).await;
    let receiver = Receiver::start().await;
    let endpoint = app.create_endpoint(&receiver.url, json!({})).await;
    let id = endpoint["id"].as_str().unwrap();
    let first = endpoint["secret"].as_str().unwrap().to_owned();
    let rotate = json!({"grace_period_seconds": 3600});
    let (status, rotated) = app
        .post(&format!("/v1/endpoints/{id}/rotate-secret"), rotate)
        .await;
    assert_eq!(status, StatusCode::OK, "{rotated}");
    let current = rotated["secret"].as_str().unwrap().to_owned();
    let app_side = Receiver::start().await;
    let source = create_source(
        &app,
        "src",
        "standard-webhooks",
        PARTNER_SECRET,
        &app_side.url,
    )
    .await;

    app.publish("order.paid", json!({"n": 1})).await;
    let delivered = receiver.wait_for(1).await.remove(0);
    assert!(verifies(&current, &delivered) && verifies(&first, &delivered));
    let webhook = standard_webhook("msg_1", "invoice.paid");
    assert_eq!(
        post_inbox(&app, "src", &webhook).await.0,
        StatusCode::ACCEPTED
    );
    let forward = app_side.wait_for(1).await.remove(0);
    assert!(verifies(source.forward_secret(), &forward));

    let dump = dump(&db);
    assert!(
        dump.contains("enc:v1:"),
        "the secrets are in the dump, sealed"
    );
    for secret in [&first, &current, PARTNER_SECRET, source.forward_secret()] {
        assert_not_in(&dump, secret);
    }
    app.stopper().stop().await;
}

async fn plain_secrets_from_before_the_upgrade_are_sealed_at_first_start(db: TestDb) {
    // A store without a keyring writes as kurir did before encryption.
    let new = kurir::endpoint::NewEndpoint::new("https://example.com/hook");
    let before = db.store.create_endpoint(new).await.unwrap();
    assert_eq!(stored_secrets(&db.store).await, [before.secret.expose()]);

    let store = kurir::cli::open_store(&TestApp::config(&db, &[]))
        .await
        .unwrap();
    let stored = stored_secrets(&store).await;
    assert!(stored[0].starts_with("enc:v1:"), "{stored:?}");
    assert_not_in(&dump(&db), before.secret.expose());
    let after = store.get_endpoint(&before.id).await.unwrap().unwrap();
    assert_eq!(after.secret.expose(), before.secret.expose());
    let again = kurir::cli::open_store(&TestApp::config(&db, &[]))
        .await
        .unwrap();
    assert_eq!(stored_secrets(&again).await, stored, "sealed once");
}

async fn a_wrong_key_is_refused_at_start_naming_the_setting(db: TestDb) {
    let key = Keyring::generate_key();
    let store = kurir::cli::open_store(&TestApp::config(&db, &[("encryption_key", &key)]))
        .await
        .unwrap();
    let new = kurir::endpoint::NewEndpoint::new("https://example.com/hook");
    let endpoint = store.create_endpoint(new).await.unwrap();

    let wrong = Keyring::generate_key();
    let config = TestApp::config(&db, &[("encryption_key", &wrong)]);
    let err = kurir::cli::open_store(&config).await.unwrap_err();
    assert!(
        format!("{err:#}").contains("KURIR_ENCRYPTION_KEY"),
        "{err:#}"
    );
    // Nothing reads the secret without its key: no unsigned or wrongly signed request.
    let err = db.store.get_endpoint(&endpoint.id).await.unwrap_err();
    assert!(err.to_string().contains("KURIR_ENCRYPTION_KEY"), "{err}");
    let keyed = db.connect_again().await.with_keyring(std::sync::Arc::new(
        Keyring::parse(&wrong, "KURIR_ENCRYPTION_KEY").unwrap(),
    ));
    assert!(keyed.enabled_endpoints().await.is_err());
}

async fn rotating_the_key_file_leaves_every_delivery_verifiable(db: TestDb) {
    let app = TestApp::spawn(&db).await;
    let receiver = Receiver::start().await;
    let endpoint = app.create_endpoint(&receiver.url, json!({})).await;
    let secret = endpoint["secret"].as_str().unwrap().to_owned();
    app.publish("order.paid", json!({"n": 1})).await;
    assert!(verifies(&secret, &receiver.wait_for(1).await[0]));
    let key_file = db.dir.path().join("encryption-key");
    let old_key = std::fs::read_to_string(&key_file).unwrap();

    // The running app keeps its old key in memory while the command rotates under it.
    kurir::cli::keys::rotate(kurir::cli::MigrateArgs {
        config: None,
        database_url: Some(db.url.clone()),
        data_dir: Some(db.dir.path().display().to_string()),
    })
    .await
    .unwrap();
    let new_key = std::fs::read_to_string(&key_file).unwrap();
    assert_ne!(new_key.trim(), old_key.trim());
    assert_eq!(new_key.trim().lines().count(), 1, "the old key is gone");
    let new_id = Keyring::parse(&new_key, "file").unwrap().primary_id();
    for stored in stored_secrets(&db.store).await {
        assert!(stored.starts_with(&format!("enc:v1:{new_id}:")), "{stored}");
    }

    app.publish("order.paid", json!({"n": 2})).await;
    assert!(verifies(&secret, &receiver.wait_for(2).await[1]));
    app.stopper().stop().await;
    let restarted = TestApp::spawn(&db).await;
    let id = kurir::endpoint::EndpointId::parse(endpoint["id"].as_str().unwrap()).unwrap();
    let read = restarted.store.get_endpoint(&id).await.unwrap().unwrap();
    assert_eq!(read.secret.expose(), secret);
    restarted.publish("order.paid", json!({"n": 3})).await;
    assert!(verifies(&secret, &receiver.wait_for(3).await[2]));
    restarted.stopper().stop().await;
}

async fn old_and_new_configured_keys_both_open_during_a_rotation(db: TestDb) {
    let (old, new) = (Keyring::generate_key(), Keyring::generate_key());
    let open = |keys: String| {
        let config = TestApp::config(&db, &[("encryption_key", &keys)]);
        async move { kurir::cli::open_store(&config).await }
    };
    let before = open(old.clone()).await.unwrap();
    let ep = kurir::endpoint::NewEndpoint::new("https://example.com/hook");
    let endpoint = before.create_endpoint(ep).await.unwrap();

    let during = open(format!("{new},{old}")).await.unwrap();
    let done = during.seal_secrets(true).await.unwrap();
    assert_eq!((done.needed, done.rewritten), (1, 1));
    for keys in [format!("{new},{old}"), new.clone()] {
        let store = open(keys).await.unwrap();
        let read = store.get_endpoint(&endpoint.id).await.unwrap().unwrap();
        assert_eq!(read.secret.expose(), endpoint.secret.expose());
    }
    assert!(
        open(old).await.is_err(),
        "the old key alone no longer opens"
    );
}

#[tokio::test]
async fn the_sqlite_database_and_its_wal_are_readable_by_their_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let db = TestDb::sqlite().await;
    let file = std::path::PathBuf::from(db.url.trim_start_matches("sqlite://"));
    let wal = file.with_extension("db-wal");
    assert!(
        wal.exists(),
        "{} exists once the database is open",
        wal.display()
    );
    for path in [&file, &wal] {
        let mode = std::fs::metadata(path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{}", path.display());
    }
}

#[tokio::test]
async fn the_binary_refuses_a_wrong_key_at_start_and_never_prints_it() {
    let db = TestDb::sqlite().await;
    let key = Keyring::generate_key();
    let store = kurir::cli::open_store(&TestApp::config(&db, &[("encryption_key", &key)]))
        .await
        .unwrap();
    let new = kurir::endpoint::NewEndpoint::new("https://example.com/hook");
    store.create_endpoint(new).await.unwrap();

    let wrong = Keyring::generate_key();
    let run = |args: &[&str]| {
        let mut cmd = crate::cli::kurir(db.dir.path());
        cmd.args(args)
            .args(["--database-url", &db.url])
            .env("KURIR_ENCRYPTION_KEY", &wrong);
        cmd
    };
    let out = run(&["serve", "--listen", "127.0.0.1:0", "--admin-token", "t"])
        .output()
        .await
        .unwrap();
    assert!(!out.status.success(), "a wrong key stops the start");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("KURIR_ENCRYPTION_KEY"), "{stderr}");
    assert!(
        !stderr.contains(&wrong) && !stderr.contains(&key),
        "{stderr}"
    );

    // `kurir prune --dry-run` reads no secret, so it needs no key.
    let out = run(&["prune", "--dry-run"]).output().await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(
        stdout.contains("kurir_outbox") && stdout.contains("would be deleted"),
        "{stdout}"
    );
}
