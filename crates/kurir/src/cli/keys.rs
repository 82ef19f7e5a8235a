//! The encryption keys of stored secrets on the command line: the keys `kurir serve` starts with
//! ([`encryption_keys`]), and `kurir rotate-encryption-key` ([`rotate`]).

use std::sync::Arc;

use anyhow::Context;

use super::{migrated_store, output, MigrateArgs};
use crate::config::Config;
use crate::encryption::source::{self, KeySource, KEY_FILE, SETTING};
use crate::encryption::Keyring;

/// Passes over the secrets before a rotation gives up on rows that keep changing.
const MAX_PASSES: usize = 5;

/// `kurir rotate-encryption-key --help`: the two ways a rotation goes.
pub const ROTATE_HELP: &str = "\
With KURIR_ENCRYPTION_KEY set: give every process the new and the old key, the new first \
(KURIR_ENCRYPTION_KEY=<new>,<old>), then run this command with the same setting: every secret is \
encrypted again under the new key. Once it is done, the old key can be dropped from the setting.

Without it (the key file <data_dir>/encryption-key): a new key is generated and written into the \
file first, next to the old one, so a running kurir keeps reading every secret; once every secret \
is encrypted under the new key, the old key is removed from the file.";

/// The configured keys, else the data directory's key file (generated when missing).
pub fn encryption_keys(config: &Config) -> anyhow::Result<Arc<Keyring>> {
    let (keys, source) = source::load(config.encryption_key.as_deref(), &config.data_dir)?;
    let key = keys.primary_id();
    match &source {
        KeySource::Configured => tracing::info!(key, "encryption key: the configured one"),
        KeySource::File(path) => {
            tracing::info!(key, file = %path.display(), "encryption key read from file")
        }
        KeySource::Generated(path) => tracing::info!(
            key,
            file = %path.display(),
            "encryption key generated; back it up: the stored secrets cannot be read without it"
        ),
    }
    Ok(Arc::new(keys))
}

/// `kurir rotate-encryption-key`.
pub async fn rotate(args: MigrateArgs) -> anyhow::Result<()> {
    let config = args.load_config()?;
    let store = migrated_store(&config).await?;
    let result = match config.encryption_key.as_deref() {
        Some(configured) => {
            let keys = Arc::new(Keyring::parse(configured, SETTING)?);
            reseal(&store, keys).await
        }
        None => rotate_key_file(&store, &config).await,
    };
    store.close().await;
    result
}

/// A new key into the key file, next to the old ones; every secret sealed under it; the old
/// keys out of the file.
async fn rotate_key_file(store: &crate::store::Store, config: &Config) -> anyhow::Result<()> {
    let path = config.data_dir.join(KEY_FILE);
    let old = std::fs::read_to_string(&path).with_context(|| {
        format!(
            "no key to rotate: {SETTING} is not set and {} cannot be read",
            path.display()
        )
    })?;
    let mut lines = vec![Keyring::generate_key()];
    lines.extend(
        old.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_owned),
    );
    source::write_file(&path, &lines)?;
    let keys = source::read_file(&path)?.context("the key file vanished")?;
    reseal(store, Arc::new(keys)).await?;
    source::write_file(&path, &lines[..1])?;
    output::out!("the old keys were removed from {}", path.display());
    Ok(())
}

async fn reseal(store: &crate::store::Store, keys: Arc<Keyring>) -> anyhow::Result<()> {
    let key = keys.primary_id();
    let store = store.clone().with_keyring(keys);
    let mut rewritten = 0;
    // A row changed between the read and the write (by a running kurir, with the key it holds)
    // is read again: the old key goes only once no value needs it.
    for _ in 0..MAX_PASSES {
        let done = store
            .seal_secrets(true)
            .await
            .context("cannot read the stored secrets")?;
        rewritten += done.rewritten;
        if done.needed == 0 {
            output::out!(
                "{rewritten} of {} rows with secrets encrypted again; every secret is now \
                 encrypted with key {key}",
                done.rows
            );
            return Ok(());
        }
    }
    anyhow::bail!("secrets kept changing while they were encrypted again; run the command again")
}
