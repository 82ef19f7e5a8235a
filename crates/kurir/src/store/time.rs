//! Time as the backends keep it (milliseconds; on SQLite a fixed-width UTC text form that sorts
//! as it should), and the SQLite file's directory, made when missing. The current time is the
//! store's clock's (`store::clock`).

use std::path::Path;

use chrono::{DateTime, SecondsFormat, Utc};

/// The fixed-width text form of a timestamp in SQLite: `YYYY-MM-DDTHH:MM:SS.sssZ`.
pub fn sqlite_ts(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// Reads a SQLite timestamp: kurir's own format, any RFC 3339, or SQLite's `YYYY-MM-DD HH:MM:SS`
/// (what `CURRENT_TIMESTAMP` writes, for rows inserted by hand), taken as UTC.
pub fn parse_sqlite_ts(s: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s)
        .map(|d| d.with_timezone(&Utc))
        .ok()
        .or_else(|| {
            chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S%.f")
                .ok()
                .map(|n| n.and_utc())
        })
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_timestamps_are_fixed_width_and_round_trip() {
        let at = DateTime::parse_from_rfc3339("2026-06-11T08:15:30Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(sqlite_ts(at), "2026-06-11T08:15:30.000Z");
        assert_eq!(parse_sqlite_ts(&sqlite_ts(at)), Some(at));
        assert_eq!(parse_sqlite_ts("2026-06-11 08:15:30"), Some(at));
        assert_eq!(parse_sqlite_ts("yesterday"), None);
    }
}
