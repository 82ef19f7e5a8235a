//! The `kurir` binary itself: `--version`, `migrate` on both backends, and one-line errors.

use std::process::Command;

use crate::support::postgres_admin_url;

fn kurir() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kurir"));
    for (k, _) in std::env::vars() {
        if k.starts_with("KURIR_") {
            cmd.env_remove(k);
        }
    }
    cmd
}

#[test]
fn version_and_help_work() {
    let out = kurir().arg("--version").output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("kurir "));
    let out = kurir().args(["serve", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for env in [
        "KURIR_DATABASE_URL",
        "KURIR_CONNECT_TIMEOUT",
        "KURIR_ALLOWED_NETWORKS",
        "KURIR_RETRY_MAX_ATTEMPTS",
    ] {
        assert!(help.contains(env), "serve --help documents {env}");
    }
}

#[test]
fn migrate_creates_the_default_sqlite_database_and_is_idempotent() {
    let dir = tempfile::tempdir().unwrap();
    for _ in 0..2 {
        let out = kurir()
            .arg("migrate")
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(dir.path().join("kurir-data/kurir.db").exists());
}

#[tokio::test]
async fn migrate_works_twice_on_postgres() {
    let Some(db) = crate::support::TestDb::postgres().await else {
        return;
    };
    let _ = postgres_admin_url();
    migrate_twice(&db).await;
}

#[tokio::test]
async fn migrate_works_twice_on_mysql() {
    let Some(db) = crate::support::TestDb::mysql().await else {
        return;
    };
    migrate_twice(&db).await;
}

async fn migrate_twice(db: &crate::support::TestDb) {
    for _ in 0..2 {
        let out = kurir()
            .args(["migrate", "--database-url", &db.url])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn bad_database_urls_fail_with_one_line_naming_the_problem() {
    let cases = [
        ("mssql://user:pw@host/db", "--database-url: invalid value"),
        ("postgres://root@127.0.0.1:1/kurir", "Connection refused"),
        ("mysql://root:pw@127.0.0.1:1/kurir", "Connection refused"),
    ];
    for (url, expected) in cases {
        let out = kurir()
            .args(["migrate", "--database-url", url])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{url} must fail");
        let stderr = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<&str> = stderr
            .lines()
            .filter(|l| l.starts_with("kurir: "))
            .collect();
        assert_eq!(lines.len(), 1, "one error line for {url}: {stderr}");
        assert!(lines[0].contains(expected), "{url}: {stderr}");
        assert!(!stderr.contains("pw@"), "the password is never printed");
    }
}
