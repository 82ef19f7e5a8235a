//! Logging setup: `tracing` to stderr, human-readable by default or JSON with
//! `KURIR_LOG_FORMAT=json`, filtered by `KURIR_LOG` (env-filter syntax, default `info`).
//!
//! What is logged is decided where it happens; this module only decides how it is written:
//! with ANSI colours only when stderr is a terminal (never into a file or a pipe), and never at
//! the cost of the work that logged: once stderr cannot be written (its reader is gone, as in
//! `kurir serve 2>&1 | head -2`), log lines are dropped rather than failing or panicking.
//! Never log secrets, signatures or payload bodies.

use std::io::{IsTerminal, Write};

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber; a second call is a no-op.
pub fn init() {
    let filter =
        EnvFilter::try_from_env("KURIR_LOG").unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| LossyStderr)
        .with_ansi(std::io::stderr().is_terminal())
        // Its own report of a failed write goes to stderr too, through `eprintln!`, which
        // panics when stderr is a closed pipe.
        .log_internal_errors(false);
    let result = if std::env::var("KURIR_LOG_FORMAT").is_ok_and(|f| f.eq_ignore_ascii_case("json"))
    {
        builder.json().flatten_event(true).try_init()
    } else {
        builder.try_init()
    };
    drop(result);
}

/// stderr that drops what it cannot write: a closed or full log pipe must not fail a request,
/// a delivery or the shutdown that logged.
struct LossyStderr;

impl Write for LossyStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let _ = std::io::stderr().write_all(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = std::io::stderr().flush();
        Ok(())
    }
}
