//! Time as the backends keep it (milliseconds; on SQLite a fixed-width UTC text form that sorts
//! as it should: kurir-sql's), and the SQLite file's directory, made when missing. The current
//! time is the store's clock's (`store::clock`).

use std::path::Path;

pub use kurir_sql::{parse_sqlite_ts, sqlite_ts};

/// Creates the file of a `sqlite://path` URL, and its directory, when missing: the file readable
/// by its owner only, as it holds secrets (sealed) and every payload. SQLite gives the WAL and
/// shared-memory files the database file's mode.
pub(crate) fn ensure_sqlite_file(url: &str) -> std::io::Result<()> {
    let path = url
        .trim_start_matches("sqlite://")
        .trim_start_matches("sqlite:");
    let path = path.split('?').next().unwrap_or(path);
    if path.is_empty() || path == ":memory:" {
        return Ok(());
    }
    if let Some(dir) = Path::new(path)
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
    {
        std::fs::create_dir_all(dir)?;
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    match options.open(path) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => Err(e),
        _ => Ok(()),
    }
}
