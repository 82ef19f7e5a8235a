//! Logging setup: `tracing` to stderr, human-readable by default or JSON with
//! `KURIR_LOG_FORMAT=json`, filtered by `KURIR_LOG` (env-filter syntax, default `info`).
//!
//! What is logged is decided where it happens; this module only decides how it is written.
//! Never log secrets, signatures or payload bodies.

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber; a second call is a no-op.
pub fn init() {
    let filter =
        EnvFilter::try_from_env("KURIR_LOG").unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let result = if std::env::var("KURIR_LOG_FORMAT").is_ok_and(|f| f.eq_ignore_ascii_case("json"))
    {
        builder.json().flatten_event(true).try_init()
    } else {
        builder.try_init()
    };
    drop(result);
}
