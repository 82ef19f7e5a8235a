//! Time as both backends keep it (milliseconds; on SQLite a fixed-width UTC text form that sorts
//! as it should), and the SQLite file's directory, made when missing.

use std::path::Path;

use chrono::{DateTime, SecondsFormat, Utc};

/// Current time truncated to milliseconds, the precision both backends keep.
pub fn now_millis() -> DateTime<Utc> {
    let now = Utc::now();
    DateTime::from_timestamp_millis(now.timestamp_millis()).unwrap_or(now)
}

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

/// Creates the parent directory of a `sqlite://path` URL's file when missing.
pub(crate) fn ensure_sqlite_dir(url: &str) -> std::io::Result<()> {
    let path = url
        .trim_start_matches("sqlite://")
        .trim_start_matches("sqlite:");
    let path = path.split('?').next().unwrap_or(path);
    if path.is_empty() || path == ":memory:" {
        return Ok(());
    }
    match Path::new(path).parent() {
        Some(dir) if !dir.as_os_str().is_empty() => std::fs::create_dir_all(dir),
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
