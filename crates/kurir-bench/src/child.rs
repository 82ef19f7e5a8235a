//! The process under test, started as a child so its memory and CPU time are its own
//! (`/proc/<pid>`): this same executable re-entered through a hidden first argument, running
//! kurir's command line exactly as the `kurir` binary's `main` does.
//!
//! Re-entering this executable rather than looking for a built `kurir` binary means the code
//! under test is always the code this harness was built with, unless [`KURIR_BIN_ENV`] names
//! another binary.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use tokio::process::{Child, Command};

use crate::machine::{self, ProcSample};

/// First argument that makes this executable run `kurir` itself.
pub const KURIR_ARG: &str = "__kurir";

/// Names a `kurir` binary to measure instead of the code this harness was built with (to
/// measure an older build the same way).
pub const KURIR_BIN_ENV: &str = "KURIR_BENCH_KURIR_BIN";

/// The admin API token given to kurir under test.
pub const ADMIN_TOKEN: &str = "kurir-bench-admin-token-0123456789abcdef0123456789abcdef";

/// A running process under test.
pub struct UnderTest {
    child: Child,
    pid: u32,
    /// `http://127.0.0.1:<port>`.
    pub base_url: String,
    /// Its log (stderr), in the run directory.
    pub log: PathBuf,
}

/// A free loopback port (bound, then released for the child to take).
fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

impl UnderTest {
    /// Starts `kurir serve` on `database_url` with default settings, except that endpoints on
    /// loopback are allowed (the sink is there) and `env` on top.
    pub async fn kurir(
        database_url: &str,
        dir: &Path,
        env: &[(&str, String)],
    ) -> anyhow::Result<Self> {
        let port = free_port()?;
        let mut cmd = match std::env::var_os(KURIR_BIN_ENV) {
            Some(bin) => Command::new(bin),
            None => {
                let mut cmd = Command::new(std::env::current_exe()?);
                cmd.arg(KURIR_ARG);
                cmd
            }
        };
        cmd.arg("serve");
        for s in kurir::config::SETTINGS {
            cmd.env_remove(s.env);
        }
        cmd.env("KURIR_DATABASE_URL", database_url)
            .env("KURIR_LISTEN", format!("127.0.0.1:{port}"))
            .env("KURIR_ADMIN_TOKEN", ADMIN_TOKEN)
            .env("KURIR_DATA_DIR", dir.join("kurir-data"))
            .env("KURIR_ALLOWED_NETWORKS", "127.0.0.0/8");
        for (k, v) in env {
            cmd.env(k, v);
        }
        Self::spawn(cmd, dir, port, "kurir").await
    }

    async fn spawn(mut cmd: Command, dir: &Path, port: u16, name: &str) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let log = dir.join(format!("{name}-{port}.log"));
        let file = std::fs::File::create(&log)?;
        cmd.current_dir(dir)
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .kill_on_drop(true);
        let child = cmd.spawn().context("cannot start the process under test")?;
        let pid = child.id().context("child has no pid")?;
        let mut this = Self {
            child,
            pid,
            base_url: format!("http://127.0.0.1:{port}"),
            log,
        };
        this.wait_ready().await?;
        Ok(this)
    }

    async fn wait_ready(&mut self) -> anyhow::Result<()> {
        let client = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait()? {
                bail!(
                    "the process under test exited ({status}) before it was ready; see {}",
                    self.log.display()
                );
            }
            let url = format!("{}/healthz", self.base_url);
            if client
                .get(url)
                .send()
                .await
                .is_ok_and(|r| r.status().is_success())
            {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        bail!("the process under test was not ready within 60 s")
    }

    /// Current memory and CPU time.
    pub fn sample(&self) -> ProcSample {
        machine::sample(self.pid).unwrap_or_default()
    }

    /// Sends it `signal` (`KILL`, `STOP`, `CONT`, …).
    pub fn signal(&self, signal: &str) -> anyhow::Result<()> {
        let status = std::process::Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid.to_string())
            .status()?;
        anyhow::ensure!(status.success(), "kill -{signal} {} failed", self.pid);
        Ok(())
    }

    /// Kills it with SIGKILL (nothing released: its leases expire) and waits for it to end.
    pub async fn kill(mut self) -> anyhow::Result<()> {
        self.child.kill().await?;
        Ok(())
    }

    /// Stops it with SIGTERM (graceful: leases are released), killing it after 15 s.
    pub async fn stop(mut self) -> anyhow::Result<ProcSample> {
        let last = self.sample();
        let _ = std::process::Command::new("kill")
            .arg("-TERM")
            .arg(self.pid.to_string())
            .status();
        match tokio::time::timeout(Duration::from_secs(15), self.child.wait()).await {
            Ok(status) => {
                status?;
            }
            Err(_) => {
                self.child.kill().await?;
            }
        }
        Ok(last)
    }
}
