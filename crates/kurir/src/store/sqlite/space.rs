//! The room left on the file system that holds the SQLite database, for readiness. It owns
//! the free-space check only; the write probe that goes with it is `SqliteStore::probe_write`.
//!
//! A probe write alone cannot tell a full disk: a commit appends its pages to the WAL, which
//! SQLite rewrites from its start after a checkpoint, so a small write can still succeed in the
//! space the WAL already holds while the application's writes, needing more, fail with
//! `SQLITE_FULL`. The file system's own count of free blocks does not depend on that luck.

use std::path::Path;

/// Below this much free space the database counts as unable to write: about four of the
/// largest publishes (`KURIR_MAX_BODY_SIZE`'s default, 256 KiB), whose pages go to the WAL
/// first and to the database file again at the checkpoint.
pub const MIN_FREE_BYTES: u64 = 1024 * 1024;

/// The bytes an unprivileged process may still write on the file system holding `file`, or
/// `None` when that cannot be told (an in-memory database, a platform without `statvfs`).
pub(super) fn free_bytes(file: &Path) -> Option<u64> {
    let dir = file.parent().filter(|d| !d.as_os_str().is_empty());
    statvfs_free(dir.unwrap_or(Path::new(".")))
}

#[cfg(unix)]
fn statvfs_free(dir: &Path) -> Option<u64> {
    let stat = rustix::fs::statvfs(dir).ok()?;
    Some(stat.f_bavail.saturating_mul(stat.f_frsize))
}

#[cfg(not(unix))]
fn statvfs_free(_: &Path) -> Option<u64> {
    None
}
