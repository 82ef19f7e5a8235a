//! SQLite's disk fills up under a running kurir, then space comes back (issue 32): while it is
//! full, publishing answers 503 and readiness says the database cannot write; once space is
//! back, publishing and delivery resume by themselves and readiness says ready, with no restart.
//!
//! The disk is a real one: an 8 MiB tmpfs mounted for the test (so it needs root, as CI runs;
//! elsewhere it is skipped with a notice), filled by a file the test then deletes.

use std::io::Write;
use std::path::PathBuf;
use std::process::Command;

use reqwest::StatusCode;
use serde_json::json;

use super::support::{eventually, Receiver, TestApp, TestDb};

/// A small tmpfs mounted in a temp dir, unmounted when dropped.
struct SmallDisk {
    mount: PathBuf,
    _parent: tempfile::TempDir,
}

impl SmallDisk {
    /// `None` (with a notice) when mounting is not allowed here, except under CI.
    fn mount() -> Option<Self> {
        let parent = tempfile::tempdir().unwrap();
        let mount = parent.path().join("disk");
        std::fs::create_dir(&mount).unwrap();
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=8m", "tmpfs"])
            .arg(&mount)
            .status()
            .is_ok_and(|s| s.success());
        if !mounted {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI is set but a tmpfs cannot be mounted: the full-disk test must run in CI"
            );
            eprintln!("notice: cannot mount a tmpfs (not root?); skipping the full-disk test");
            return None;
        }
        Some(Self {
            mount,
            _parent: parent,
        })
    }

    /// Writes zeros to `filler` until the disk is full.
    fn fill(&self) -> PathBuf {
        let path = self.mount.join("filler");
        let mut file = std::fs::File::create(&path).unwrap();
        let block = vec![0u8; 64 * 1024];
        while file.write_all(&block).and_then(|()| file.flush()).is_ok() {}
        // The last bytes of a partial block.
        while file.write_all(&[0]).is_ok() {}
        path
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.mount).status();
    }
}

async fn readyz(app: &TestApp) -> (StatusCode, String) {
    let response = reqwest::get(format!("{}/readyz", app.url)).await.unwrap();
    (response.status(), response.text().await.unwrap())
}

async fn try_publish(app: &TestApp, n: usize) -> (StatusCode, serde_json::Value) {
    let body = json!({"event_type": "order.paid", "data": {"n": n}});
    app.post("/v1/events", body).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_full_disk_sqlite_publishes_and_delivers_again_without_a_restart() {
    let Some(disk) = SmallDisk::mount() else {
        return;
    };
    let database = TestDb::sqlite_in(tempfile::tempdir_in(&disk.mount).unwrap()).await;
    let app = TestApp::spawn(&database).await;
    let stop = app.stopper();
    let receiver = Receiver::start().await;
    app.create_endpoint(&receiver.url, json!({})).await;
    let mut stored = vec![app.publish("order.paid", json!({"n": 0})).await];
    assert_eq!(readyz(&app).await.0, StatusCode::OK);

    let filler = disk.fill();
    // Writes go on while the WAL still has room, a few pages each: on 8 MiB, the disk is
    // out of space long before this many.
    let refused = 'full: {
        for n in 1..=5_000 {
            let (status, body) = try_publish(&app, n).await;
            if !status.is_success() {
                assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
                break 'full true;
            }
            stored.push(body["event_id"].as_str().unwrap().to_owned());
        }
        false
    };
    assert!(refused, "a publish was refused with 503 on the full disk");
    let (status, reason) = readyz(&app).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{reason}");
    assert!(reason.contains("cannot write"), "{reason}");

    std::fs::remove_file(filler).unwrap();
    eventually("readiness to come back", || async {
        (readyz(&app).await.0 == StatusCode::OK).then_some(())
    })
    .await;
    for n in 0..20 {
        let (status, body) = try_publish(&app, 1000 + n).await;
        assert_eq!(
            status,
            StatusCode::ACCEPTED,
            "publish {n} after space came back: {body}"
        );
        stored.push(body["event_id"].as_str().unwrap().to_owned());
    }
    for id in &stored {
        app.wait_for_deliveries(id, "sent").await;
    }
    let received = receiver.received();
    for id in &stored {
        let arrived = received.iter().any(|r| r.header("webhook-id") == id);
        assert!(
            arrived,
            "{id} was answered 2xx and marked sent but never arrived"
        );
    }
    stop.stop().await;
    drop(database);
    drop(disk);
}
