//! Where a process's encryption keys come from: `KURIR_ENCRYPTION_KEY` when set, else
//! `<data dir>/encryption-key`, generated on first start with mode 0600 (as the admin token is).
//! Either holds one key or several (the first seals, all open), so a rotation can give every
//! process the new and the old key at once.

use std::path::{Path, PathBuf};

use super::{EncryptionError, Keyring};

/// Name of the key file inside the data directory.
pub const KEY_FILE: &str = "encryption-key";

/// The setting's environment variable, named in errors.
pub const SETTING: &str = "KURIR_ENCRYPTION_KEY";

/// Where the keys in use came from, for the startup log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeySource {
    /// `KURIR_ENCRYPTION_KEY` (or `encryption_key` in `kurir.toml`).
    Configured,
    /// Read from this file.
    File(PathBuf),
    /// Generated now into this file.
    Generated(PathBuf),
}

/// The keys to use: the configured ones, else the data directory's file (created with a fresh
/// key when missing).
pub fn load(
    configured: Option<&str>,
    data_dir: &Path,
) -> Result<(Keyring, KeySource), EncryptionError> {
    if let Some(keys) = configured {
        return Ok((Keyring::parse(keys, SETTING)?, KeySource::Configured));
    }
    let path = data_dir.join(KEY_FILE);
    if let Some(keys) = read_file(&path)? {
        return Ok((keys, KeySource::File(path)));
    }
    match crate::admin_token::write_new(&path, &Keyring::generate_key()) {
        Ok(()) => {}
        // Another process created it first: use theirs.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(source) => return Err(file_error("write", &path, source)),
    }
    let keys = read_file(&path)?.ok_or_else(|| EncryptionError::NoKey {
        setting: path.display().to_string(),
    })?;
    Ok((keys, KeySource::Generated(path)))
}

/// The keys in `path`, if the file exists.
pub fn read_file(path: &Path) -> Result<Option<Keyring>, EncryptionError> {
    match std::fs::read_to_string(path) {
        Ok(text) => Keyring::from_file_text(&text, path).map(Some),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(file_error("read", path, source)),
    }
}

/// Replaces the keys in `path` with `keys` (one per line, the sealing one first), mode 0600.
/// Written to a new file renamed over the old one, so a reader sees the old keys or the new.
pub fn write_file(path: &Path, keys: &[String]) -> Result<(), EncryptionError> {
    let fresh = path.with_extension("new");
    let _ = std::fs::remove_file(&fresh);
    crate::admin_token::write_new(&fresh, &keys.join("\n"))
        .and_then(|()| std::fs::rename(&fresh, path))
        .map_err(|source| file_error("write", path, source))
}

fn file_error(action: &'static str, path: &Path, source: std::io::Error) -> EncryptionError {
    EncryptionError::File {
        action,
        path: path.to_owned(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_key_file_is_owner_only_and_read_again() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let (first, source) = load(None, &data).unwrap();
        assert_eq!(source, KeySource::Generated(data.join(KEY_FILE)));
        let (again, source) = load(None, &data).unwrap();
        assert_eq!(source, KeySource::File(data.join(KEY_FILE)));
        assert_eq!(first.ids(), again.ids());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(data.join(KEY_FILE))
                .unwrap()
                .permissions();
            assert_eq!(mode.mode() & 0o777, 0o600);
        }
    }

    #[test]
    fn a_configured_key_wins_and_a_bad_one_names_the_setting() {
        let dir = tempfile::tempdir().unwrap();
        let key = Keyring::generate_key();
        let (keys, source) = load(Some(&key), dir.path()).unwrap();
        assert_eq!((keys.ids().len(), source), (1, KeySource::Configured));
        assert!(!dir.path().join(KEY_FILE).exists());
        let err = load(Some("short"), dir.path()).unwrap_err();
        assert!(err.to_string().contains(SETTING), "{err}");
    }

    #[test]
    fn a_key_file_without_the_key_names_the_file_and_the_setting() {
        let (one, other) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let sealed = load(None, one.path()).unwrap().0.seal("whsec_x");
        let (keys, _) = load(None, other.path()).unwrap();
        let err = keys.open(&sealed).unwrap_err().to_string();
        assert!(err.contains(SETTING) && err.contains(KEY_FILE), "{err}");
    }
}
