//! The real `kurir` binary as a child process: started with test settings, read from `/proc`
//! (memory), stopped with SIGTERM or SIGKILL.
//!
//! `KURIR_TEST_BIN` runs another build instead (to check a test against the code before a
//! fix); `KURIR_TEST_LOG=1` passes the child's log through to the test's stderr.

use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};

use crate::support::eventually;

/// `kurir serve` against `database_url`, with short leases and retries so recovery is quick,
/// loopback endpoints allowed and the HTTP server on port 0. Not started yet: add settings,
/// then `spawn`.
/// A loopback port that was free a moment ago, for a child to listen on.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn kurir_serve(database_url: &str, data_dir: &Path) -> Command {
    let bin =
        std::env::var("KURIR_TEST_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_kurir").into());
    let mut cmd = Command::new(bin);
    for (k, _) in std::env::vars() {
        if k.starts_with("KURIR_") {
            cmd.env_remove(k);
        }
    }
    let log = if std::env::var_os("KURIR_TEST_LOG").is_some() {
        Stdio::inherit()
    } else {
        Stdio::null()
    };
    cmd.arg("serve")
        .env("KURIR_DATABASE_URL", database_url)
        .env("KURIR_DATA_DIR", data_dir)
        .env("KURIR_LISTEN", "127.0.0.1:0")
        .env("KURIR_ADMIN_TOKEN", "crash-test-token")
        .env("KURIR_ALLOWED_NETWORKS", "127.0.0.0/8")
        .env("KURIR_CONNECT_TIMEOUT", "1s")
        .env("KURIR_REQUEST_TIMEOUT", "2s")
        .env("KURIR_LEASE_MARGIN", "1s")
        .env("KURIR_RETRY_INITIAL_DELAY", "20ms")
        .env("KURIR_RETRY_MAX_DELAY", "200ms")
        .env("KURIR_RETRY_JITTER", "0")
        .env("KURIR_POLL_INTERVAL", "10ms")
        // Off, as in `test_delivery_config`: these tests count attempts to failing receivers.
        .env("KURIR_CIRCUIT_FAILURE_THRESHOLD", "0")
        .env("KURIR_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log);
    cmd
}

/// A running `kurir serve`, killed if the test ends before stopping it.
pub struct Kurir {
    child: Child,
}

impl Kurir {
    /// Starts `cmd` (from [`kurir_serve`]).
    pub fn spawn(mut cmd: Command) -> Self {
        Self {
            child: cmd.spawn().expect("start kurir"),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The most memory the process has had resident so far (`VmHWM`), in bytes.
    pub fn peak_rss(&self) -> u64 {
        proc_status_kib(self.pid(), "VmHWM:") * 1024
    }

    /// Sends SIGKILL and waits for the process to exit: a crash, at whatever point it is.
    pub async fn kill(&mut self) {
        self.child.kill().expect("kill -KILL");
        wait_exit(&mut self.child).await;
    }

    /// Sends SIGSTOP: the whole process freezes, as in a VM pause, until [`Kurir::resume`].
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Sends SIGCONT to a process [`Kurir::pause`] froze.
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        let sent = Command::new("kill")
            .args([signal, &self.pid().to_string()])
            .status()
            .unwrap();
        assert!(sent.success(), "kill {signal}");
    }

    /// Sends SIGTERM and waits (at most 30 s) for the process to exit.
    pub async fn terminate(&mut self) -> ExitStatus {
        let term = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status()
            .unwrap();
        assert!(term.success(), "kill -TERM");
        wait_exit(&mut self.child).await
    }
}

impl Drop for Kurir {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Waits (at most 30 s) for `child` to exit.
pub async fn wait_exit(child: &mut Child) -> ExitStatus {
    eventually("kurir to exit", || {
        let status = child.try_wait().unwrap();
        async move { status }
    })
    .await
}

/// A `kB` line of `/proc/<pid>/status` (0 when absent).
fn proc_status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}
