//! The admin API's bearer token: where it comes from, and checking a presented token.
//!
//! An explicit token (`KURIR_ADMIN_TOKEN`, `admin_token` in `kurir.toml`, `--admin-token`) wins.
//! Without one, `kurir serve` uses `<data dir>/admin-token`, generating it on first start
//! (mode 0600), and the CLI reads the same file, so a first run on one machine needs no setup.
//! A generated token is only used on a loopback address: an API reachable from other machines
//! must have a token someone chose to deploy. The token itself is never logged or printed.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use rand::RngCore;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Name of the generated token's file inside the data directory.
pub const TOKEN_FILE: &str = "admin-token";

/// Shortest configured token accepted on an address other machines can reach: 32 characters,
/// what `openssl rand -hex 16` gives (and half of what the suggested `openssl rand -hex 32` does).
pub const MIN_EXPOSED_TOKEN_LEN: usize = 32;

/// The name a request authenticated with the admin token acts as (recorded in replay audits).
pub const ADMIN_ACTOR: &str = "admin";

/// A token requests are checked against. Only its SHA-256 is kept, and `Debug` shows the name.
#[derive(Clone)]
pub struct AdminToken {
    name: String,
    digest: [u8; 32],
}

impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminToken")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl AdminToken {
    /// A token named `name` (the actor recorded for what its holder does).
    pub fn new(name: impl Into<String>, token: &str) -> Self {
        Self {
            name: name.into(),
            digest: Sha256::digest(token.as_bytes()).into(),
        }
    }

    /// Who holds it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A 32-byte key for `purpose`, derived from the token: HMAC-SHA256 keyed by the token's
    /// digest. Every process configured with the same token derives the same key, so what one
    /// signs (a dashboard session) the others accept; another token derives another key.
    pub fn derive_key(&self, purpose: &str) -> [u8; 32] {
        use hmac::Mac;
        let mut mac = hmac::Hmac::<Sha256>::new_from_slice(&self.digest).expect("any key length");
        mac.update(purpose.as_bytes());
        mac.finalize().into_bytes().into()
    }

    /// Whether `presented` is this token. Compares digests in constant time, so neither the
    /// content nor the length of the real token leaks through timing.
    pub fn verify(&self, presented: &str) -> bool {
        let digest: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        digest.ct_eq(&self.digest).into()
    }
}

/// Where the token in use came from, for the startup log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TokenSource {
    /// Set explicitly in the configuration.
    Configured,
    /// Read from this file.
    File(PathBuf),
    /// Generated now into this file.
    Generated(PathBuf),
}

/// Why no token could be settled on.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// A non-loopback listen address without an explicit token.
    #[error(
        "refusing to listen on {0} without an explicit admin token: that address can be reached \
         from other machines, and a token generated on first start is only for local use. Set \
         KURIR_ADMIN_TOKEN (or admin_token in kurir.toml, or --admin-token) to a long random \
         secret, or listen on a loopback address such as 127.0.0.1:8080"
    )]
    ExposedWithoutToken(SocketAddr),
    /// A non-loopback listen address with a configured token too short to resist guessing.
    #[error(
        "refusing to listen on {listen} with an admin token of {len} characters: an address other \
         machines can reach needs a token of at least 32 random characters. Make one with \
         `openssl rand -hex 32` and set it as KURIR_ADMIN_TOKEN (or admin_token in kurir.toml, or \
         --admin-token)"
    )]
    WeakToken {
        /// The listen address.
        listen: SocketAddr,
        /// The configured token's length in characters (never the token).
        len: usize,
    },
    /// The token file could not be read or written.
    #[error("cannot {action} the admin token file {}: {source}", path.display())]
    File {
        /// `read` or `create`.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// What went wrong.
        source: std::io::Error,
    },
    /// The token file exists but holds nothing.
    #[error("the admin token file {} is empty; delete it to have a new token generated", .0.display())]
    EmptyFile(PathBuf),
}

/// The token `kurir serve` uses on `listen`: the configured one, else the data directory's file
/// (created with a fresh token when missing, only when `listen` is a loopback address).
pub fn for_serving(
    configured: Option<&str>,
    data_dir: &Path,
    listen: SocketAddr,
) -> Result<(String, TokenSource), TokenError> {
    check_exposure(configured, listen)?;
    if let Some(token) = configured {
        return Ok((token.to_owned(), TokenSource::Configured));
    }
    let path = data_dir.join(TOKEN_FILE);
    if let Some(token) = read_file(data_dir)? {
        return Ok((token, TokenSource::File(path)));
    }
    let token = generate();
    match write_new(&path, &token) {
        Ok(()) => Ok((token, TokenSource::Generated(path))),
        // Another process created it first: use theirs.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => read_file(data_dir)?
            .map(|t| (t, TokenSource::File(path.clone())))
            .ok_or(TokenError::EmptyFile(path)),
        Err(source) => Err(TokenError::File {
            action: "create",
            path,
            source,
        }),
    }
}

/// Refuses a non-loopback `listen` without a configured token, or with one shorter than
/// [`MIN_EXPOSED_TOKEN_LEN`] (checked before anything starts). On loopback any token will do:
/// only this machine can reach it.
pub fn check_exposure(configured: Option<&str>, listen: SocketAddr) -> Result<(), TokenError> {
    if listen.ip().is_loopback() {
        return Ok(());
    }
    match configured.map(|t| t.chars().count()) {
        None => Err(TokenError::ExposedWithoutToken(listen)),
        Some(len) if len < MIN_EXPOSED_TOKEN_LEN => Err(TokenError::WeakToken { listen, len }),
        Some(_) => Ok(()),
    }
}

/// The token in `<data_dir>/admin-token`, if the file exists.
pub fn read_file(data_dir: &Path) -> Result<Option<String>, TokenError> {
    let path = data_dir.join(TOKEN_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) if text.trim().is_empty() => Err(TokenError::EmptyFile(path)),
        Ok(text) => Ok(Some(text.trim().to_owned())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(TokenError::File {
            action: "read",
            path,
            source,
        }),
    }
}

/// `kurir_` and 32 random bytes in hex.
fn generate() -> String {
    let mut bytes = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut bytes);
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("kurir_{hex}")
}

/// Creates `path` (and its directory) readable by the owner only; fails if it exists.
pub(crate) fn write_new(path: &Path, token: &str) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(path)?;
    file.write_all(format!("{token}\n").as_bytes())?;
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn verify_accepts_only_the_token() {
        let t = AdminToken::new("admin", "s3cret-token");
        assert!(t.verify("s3cret-token"));
        assert!(!t.verify("s3cret-token "));
        assert!(!t.verify(""));
        assert!(!format!("{t:?}").contains("s3cret"));
    }

    #[test]
    fn a_generated_token_is_written_once_with_owner_only_permissions() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let (first, source) = for_serving(None, &data, addr("127.0.0.1:8080")).unwrap();
        assert_eq!(source, TokenSource::Generated(data.join(TOKEN_FILE)));
        assert!(first.starts_with("kurir_") && first.len() == 70);
        let (again, source) = for_serving(None, &data, addr("[::1]:8080")).unwrap();
        assert_eq!(
            (again, source),
            (first, TokenSource::File(data.join(TOKEN_FILE)))
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(data.join(TOKEN_FILE))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }

    #[test]
    fn a_public_address_needs_an_explicit_token() {
        let dir = tempfile::tempdir().unwrap();
        let err = for_serving(None, dir.path(), addr("0.0.0.0:8080")).unwrap_err();
        assert!(err.to_string().contains("KURIR_ADMIN_TOKEN"), "{err}");
        assert!(!dir.path().join(TOKEN_FILE).exists());
        let chosen = "0123456789abcdef0123456789abcdef";
        let (token, source) = for_serving(Some(chosen), dir.path(), addr("0.0.0.0:8080")).unwrap();
        assert_eq!((token.as_str(), source), (chosen, TokenSource::Configured));
    }

    #[test]
    fn a_public_address_refuses_a_short_token_and_says_how_to_make_one() {
        let dir = tempfile::tempdir().unwrap();
        for listen in ["0.0.0.0:8080", "[::]:8080", "192.0.2.10:8080"] {
            let err = for_serving(Some("abc"), dir.path(), addr(listen)).unwrap_err();
            assert!(matches!(err, TokenError::WeakToken { len: 3, .. }), "{err}");
            assert!(err.to_string().contains("openssl rand -hex 32"), "{err}");
        }
        let short_on_loopback = for_serving(Some("abc"), dir.path(), addr("127.0.0.1:8080"));
        assert!(short_on_loopback.is_ok(), "loopback is for local use");
        let long = "x".repeat(MIN_EXPOSED_TOKEN_LEN);
        assert!(check_exposure(Some(&long), addr("0.0.0.0:8080")).is_ok());
    }
}
