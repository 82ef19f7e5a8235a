//! The `kurir` command line: parses arguments, loads configuration, and runs the chosen command.
//! `main.rs` only calls [`main`].
//!
//! `serve` and `migrate` run kurir itself (this module). The operator commands ([`endpoints`],
//! [`events`], [`event_types`], [`deliveries`], [`replay`], [`replays`], [`stats`], [`sources`],
//! [`tokens`], [`subscribers`]) talk to a running kurir's admin API through [`client`] and print with [`output`]:
//! tables for people, `--json` for scripts.
//!
//! Everything printed goes through `output::out!`, which ignores a closed stdout: `println!`
//! panics when the reader of a pipe has gone (`kurir … | head -1`), so clippy refuses it here.

#![deny(clippy::print_stdout)]

pub mod client;
pub mod deliveries;
pub mod endpoints;
pub mod event_types;
pub mod events;
pub mod keys;
pub mod output;
pub mod prune;
pub mod replay;
pub mod replays;
pub mod sources;
pub mod stats;
pub mod subscriber_tokens;
pub mod subscribers;
pub mod tokens;

use std::path::PathBuf;

use anyhow::Context;
use clap::{Arg, ArgMatches, Args, FromArgMatches, Parser, Subcommand};
use tokio_util::sync::CancellationToken;

use crate::config::{shown_value, Config, RawConfig, SETTINGS};
use crate::redact::url_without_password;
use crate::store::Store;

/// kurir: webhook delivery that never loses an event.
#[derive(Debug, Parser)]
#[command(name = "kurir", version, about, long_about = None, after_help = WHERE)]
pub struct Cli {
    /// The command to run.
    #[command(subcommand)]
    pub command: Command,
}

/// Where the server listens and where the other commands look for it: two settings that are
/// easy to confuse, so `kurir --help` names both.
const WHERE: &str = "Where: `kurir serve` listens on KURIR_LISTEN (or --listen; default \
    127.0.0.1:8080). Every other command reaches it at KURIR_URL (or --url; default \
    http://127.0.0.1:8080): after moving the server, point KURIR_URL at it. Their token: \
    KURIR_TOKEN, else KURIR_ADMIN_TOKEN, else the one `kurir serve` generated into \
    ./kurir-data/admin-token.";

/// kurir's commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the relay, the dispatcher, the inbox gateway and the HTTP server (migrations are applied
    /// first).
    #[command(
        after_help = "Logs go to stderr, in colour only on a terminal: KURIR_LOG sets the level \
                      (env-filter syntax, default info,sqlx=warn), KURIR_LOG_FORMAT=json writes one \
                      JSON object per line. SIGTERM or SIGINT stops kurir within \
                      KURIR_SHUTDOWN_TIMEOUT."
    )]
    Serve(ServeArgs),
    /// Apply database migrations and exit (safe to run repeatedly).
    Migrate(MigrateArgs),
    /// Create, list, show, update, rotate the secret of, or delete endpoints.
    Endpoints(endpoints::EndpointsArgs),
    /// Send events, show one with its deliveries and attempts, or list them.
    Events(events::EventsArgs),
    /// The event catalog: apply a catalog file, list, show, delete or export entries.
    EventTypes(event_types::EventTypesArgs),
    /// List deliveries (e.g. --status dead_letter).
    Deliveries(deliveries::DeliveriesArgs),
    /// Replay one event's failed deliveries, or every delivery matching a filter (audited).
    Replay(replay::ReplayArgs),
    /// List the replay audit: who replayed what, when and why.
    Replays(replays::ReplaysArgs),
    /// Backlog, oldest pending age, events and deliveries per status.
    Stats(stats::StatsArgs),
    /// Create, list, show, update or delete the inbox gateway's sources.
    Sources(sources::SourcesArgs),
    /// Create, list, show, disable, enable or delete subscribers: your customers, each with its
    /// own endpoints and events; and create, list or revoke their tokens.
    Subscribers(subscribers::SubscribersArgs),
    /// Create, list or revoke named tokens (admin, operator or viewer), for people and scripts.
    Tokens(tokens::TokensArgs),
    /// Show the name and role of the token this CLI sends (KURIR_TOKEN or the admin token).
    Whoami(tokens::WhoAmIArgs),
    /// Delete the history past its retention now, or with --dry-run show what would go.
    Prune(prune::PruneArgs),
    /// Encrypt every stored secret under a new key (see `kurir rotate-encryption-key --help`).
    #[command(after_help = keys::ROTATE_HELP)]
    RotateEncryptionKey(MigrateArgs),
}

/// Arguments of `kurir serve`: every setting as a flag.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Configuration file [default: ./kurir.toml when it exists].
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Settings given as flags.
    #[command(flatten)]
    pub settings: SettingFlags,
}

/// Arguments of `kurir migrate` (and of the other commands that work on the database directly).
/// `Debug` hides the database URL's password.
#[derive(Args)]
pub struct MigrateArgs {
    /// Configuration file [default: ./kurir.toml when it exists].
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Database to migrate [env: KURIR_DATABASE_URL] [default: sqlite://./kurir-data/kurir.db].
    #[arg(long, value_name = "URL")]
    pub database_url: Option<String>,
    /// Data directory [env: KURIR_DATA_DIR] [default: ./kurir-data].
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<String>,
}

impl std::fmt::Debug for MigrateArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MigrateArgs")
            .field("config", &self.config)
            .field(
                "database_url",
                &self.database_url.as_deref().map(url_without_password),
            )
            .field("data_dir", &self.data_dir)
            .finish()
    }
}

impl MigrateArgs {
    /// The configuration with these flags applied.
    pub fn load_config(self) -> anyhow::Result<Config> {
        let mut flags = Vec::new();
        if let Some(url) = self.database_url {
            flags.push(("database_url", url));
        }
        if let Some(dir) = self.data_dir {
            flags.push(("data_dir", dir));
        }
        load_config(self.config, &flags)
    }
}

/// One flag per entry of [`SETTINGS`], built from that table so `--help` can never drift from
/// what the loader reads. `Debug` hides the admin token and the database URL's password.
#[derive(Default)]
pub struct SettingFlags {
    /// `(key, value)` for each flag given.
    pub values: Vec<(&'static str, String)>,
}

impl std::fmt::Debug for SettingFlags {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(self.values.iter().map(|(k, v)| (k, shown_value(k, v))))
            .finish()
    }
}

impl FromArgMatches for SettingFlags {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        let values = SETTINGS
            .iter()
            .filter_map(|s| m.get_one::<String>(s.key).map(|v| (s.key, v.clone())))
            .collect();
        Ok(Self { values })
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

impl Args for SettingFlags {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        cmd.args(SETTINGS.iter().map(|s| {
            let default = s
                .default
                .map(|d| format!(" [default: {d:?}]"))
                .unwrap_or_default();
            Arg::new(s.key)
                .long(s.key.replace('_', "-"))
                .value_name("VALUE")
                .help(format!("{} [env: {}]{default}", s.help, s.env))
        }))
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

/// Loads configuration: `file` (or `./kurir.toml` if present), the environment, then `flags`.
pub fn load_config(
    file: Option<PathBuf>,
    flags: &[(&'static str, String)],
) -> anyhow::Result<Config> {
    let file = file.or_else(|| {
        let default = PathBuf::from("kurir.toml");
        default.exists().then_some(default)
    });
    let raw = RawConfig::load(file.as_deref(), |k| std::env::var(k).ok(), flags)?;
    Ok(Config::from_raw(&raw)?)
}

/// Connects to the configured database and applies migrations.
pub async fn migrated_store(config: &Config) -> anyhow::Result<Store> {
    let store = Store::connect(&config.database_url).await?;
    store
        .migrate()
        .await
        .with_context(|| format!("cannot migrate the {} database", store.backend()))?;
    Ok(store)
}

/// [`migrated_store`] with the configured encryption keys, having opened every stored secret
/// (a wrong key stops here, before anything is sent) and sealed those still in plain text.
pub async fn open_store(config: &Config) -> anyhow::Result<Store> {
    let keys = keys::encryption_keys(config)?;
    let store = (migrated_store(config).await?)
        .with_keyring(keys)
        .with_event_catalog(config.event_catalog);
    let sealed = store
        .seal_secrets(false)
        .await
        .context("cannot read the stored secrets")?;
    if sealed.rewritten > 0 {
        tracing::info!(rows = sealed.rewritten, "plain-text secrets encrypted");
    }
    Ok(store)
}

/// Runs the command line; errors are returned for `main` to print on one line.
pub async fn main(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve(args) => serve(args).await,
        Command::Migrate(args) => migrate(args).await,
        Command::Endpoints(args) => endpoints::run(args).await,
        Command::Events(args) => events::run(args).await,
        Command::EventTypes(args) => event_types::run(args).await,
        Command::Deliveries(args) => deliveries::run(args).await,
        Command::Replay(args) => replay::run(args).await,
        Command::Replays(args) => replays::run(args).await,
        Command::Stats(args) => stats::run(args).await,
        Command::Sources(args) => sources::run(args).await,
        Command::Subscribers(args) => subscribers::run(args).await,
        Command::Tokens(args) => tokens::run(args).await,
        Command::Whoami(args) => tokens::whoami(args).await,
        Command::RotateEncryptionKey(args) => keys::rotate(args).await,
        Command::Prune(args) => prune::run(args).await,
    }
}

async fn migrate(args: MigrateArgs) -> anyhow::Result<()> {
    let config = args.load_config()?;
    let store = migrated_store(&config).await?;
    store.close().await;
    output::out!("migrations applied to the {} database", store.backend());
    Ok(())
}

/// `kurir serve`. Signals are heeded from the start: a SIGTERM while the database is being
/// reached or migrated stops at once, rather than after however long that takes.
async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let config = load_config(args.config, &args.settings.values)?;
    crate::admin_token::check_exposure(config.admin_token.as_deref(), config.listen)?;
    let shutdown = CancellationToken::new();
    crate::serve::cancel_on_signals(shutdown.clone());
    let start = async {
        let store = open_store(&config).await?;
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .with_context(|| format!("cannot listen on {}", config.listen))?;
        anyhow::Ok((store, listener))
    };
    let (store, listener) = tokio::select! {
        started = start => started?,
        () = shutdown.cancelled() => {
            tracing::info!("stopped before serving");
            return Ok(());
        }
    };
    crate::serve::run(config, store, listener, shutdown).await
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        super::Cli::command().debug_assert();
    }
}
