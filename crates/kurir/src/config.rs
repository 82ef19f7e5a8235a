//! Settings: loaded raw from `kurir.toml`, the environment and command-line flags (each layer
//! overriding the one before), then validated into a [`Config`] with errors that name the
//! variable at fault.
//!
//! The environment names are part of kurir's contract; [`SETTINGS`] is the single list of them,
//! used by the loader ([`raw`]), the validator and `kurir serve --help`.

mod portal;
mod raw;
mod retention;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ipnet::IpNet;
use kurir_core::retry::RetryPolicy;
use kurir_core::BreakerPolicy;

use crate::limits;
use crate::redact::url_without_password;
pub use portal::PortalConfig;
pub use raw::{shown_value, ConfigError, Origin, RawConfig};
pub use retention::RetentionConfig;

/// One setting: its key in `kurir.toml`, its environment variable, its default.
#[derive(Debug)]
pub struct Setting {
    /// Key in `kurir.toml`; the flag is the same with `-` for `_`.
    pub key: &'static str,
    /// Environment variable.
    pub env: &'static str,
    /// Default, if any.
    pub default: Option<&'static str>,
    /// What it does.
    pub help: &'static str,
}

/// Every setting kurir reads.
pub const SETTINGS: &[Setting] = &[
    Setting { key: "database_url", env: "KURIR_DATABASE_URL", default: None, help: "PostgreSQL, MySQL/MariaDB or SQLite URL [default: sqlite://<data_dir>/kurir.db]" },
    Setting { key: "data_dir", env: "KURIR_DATA_DIR", default: Some("./kurir-data"), help: "directory for the SQLite database and the generated admin token" },
    Setting { key: "listen", env: "KURIR_LISTEN", default: Some("127.0.0.1:8080"), help: "address of the HTTP server (admin API, health, metrics)" },
    Setting { key: "admin_token", env: "KURIR_ADMIN_TOKEN", default: None, help: "bearer token of the admin API; at least 32 characters unless listening on loopback (openssl rand -hex 32) [default: generated into <data_dir>/admin-token]" },
    Setting { key: "encryption_key", env: "KURIR_ENCRYPTION_KEY", default: None, help: "key that encrypts the secrets kurir stores: 32 bytes in base64 (openssl rand -base64 32); during a key rotation, the new and the old key separated by a comma, the new first. Every process sharing a database needs the same key [default: generated into <data_dir>/encryption-key]" },
    Setting { key: "connect_timeout", env: "KURIR_CONNECT_TIMEOUT", default: Some("2s"), help: "time allowed to connect to an endpoint: name resolution, TCP and TLS" },
    Setting { key: "request_timeout", env: "KURIR_REQUEST_TIMEOUT", default: Some("5s"), help: "time allowed for an endpoint's response, from sending the request to the end of the response kept (headers and the first 4 KiB of the body)" },
    Setting { key: "retry_initial_delay", env: "KURIR_RETRY_INITIAL_DELAY", default: Some("2s"), help: "delay before the first retry; doubles each attempt" },
    Setting { key: "retry_max_delay", env: "KURIR_RETRY_MAX_DELAY", default: Some("5m"), help: "longest delay between attempts" },
    Setting { key: "retry_max_attempts", env: "KURIR_RETRY_MAX_ATTEMPTS", default: Some("10"), help: "attempts before a delivery is dead-lettered" },
    Setting { key: "retry_jitter", env: "KURIR_RETRY_JITTER", default: Some("0.2"), help: "random spread of retry delays, as a fraction (0 to 1)" },
    Setting { key: "allowed_networks", env: "KURIR_ALLOWED_NETWORKS", default: Some(""), help: "comma-separated CIDRs that endpoints and inbox forward URLs may resolve to despite the SSRF guard, e.g. 127.0.0.0/8,::1/128" },
    Setting { key: "max_concurrency", env: "KURIR_MAX_CONCURRENCY", default: Some("256"), help: "concurrent deliveries per process, all endpoints together" },
    Setting { key: "batch_size", env: "KURIR_BATCH_SIZE", default: Some("200"), help: "rows per relay batch and per claim" },
    Setting { key: "lease_margin", env: "KURIR_LEASE_MARGIN", default: Some("30s"), help: "added to an endpoint's timeouts to make a delivery's lease, and kept free at its end to record the attempt (a delivery that cannot start in time is handed back); after a crash, deliveries are retried once their lease expires, each expiry counting as an attempt" },
    Setting { key: "circuit_failure_threshold", env: "KURIR_CIRCUIT_FAILURE_THRESHOLD", default: Some("5"), help: "failed attempts in a row (timeouts, connection errors, 5xx) that open an endpoint's circuit breaker while it had fewer than 20 attempts in the last minute; with 20 or more, it opens when half of them failed (so a partner failing now and then at a high rate is not cut off by a chance run); 0 turns the breaker off for endpoints without a threshold of their own" },
    Setting { key: "circuit_cooldown", env: "KURIR_CIRCUIT_COOLDOWN", default: Some("30s"), help: "how long an open circuit breaker sends nothing before one probe delivery; doubles each time the probe fails, up to 10m" },
    Setting { key: "endpoint_disable_after", env: "KURIR_ENDPOINT_DISABLE_AFTER", default: Some("5days"), help: "an endpoint whose attempts have all failed for this long is disabled; its pending deliveries wait until it is enabled again" },
    Setting { key: "max_body_size", env: "KURIR_MAX_BODY_SIZE", default: Some("256KiB"), help: "largest admin API request body, e.g. an event with its data (bytes, or with KiB or MiB); larger requests get 413" },
    Setting { key: "poll_interval", env: "KURIR_POLL_INTERVAL", default: Some("50ms"), help: "how long the dispatcher and the inbox gateway wait between looks while they find work; with none, the wait grows to 2 s (the relay and kurir's own writes wake them at once)" },
    Setting { key: "relay_poll_interval", env: "KURIR_RELAY_POLL_INTERVAL", default: Some("5ms"), help: "how often the relay looks for new outbox rows while it finds them; after a quiet spell it slows to one look per 800 ms, the longest a plain SQL insert waits (kurir's own publishes wake it at once); each look is one index probe" },
    Setting { key: "http_header_timeout", env: "KURIR_HTTP_HEADER_TIMEOUT", default: Some("10s"), help: "time a client has to send a request's head (and the longest an idle connection stays open); slower clients are disconnected" },
    Setting { key: "http_body_timeout", env: "KURIR_HTTP_BODY_TIMEOUT", default: Some("30s"), help: "time a client has to send a request's whole body once its head arrived; slower requests get 408" },
    Setting { key: "max_connections", env: "KURIR_MAX_CONNECTIONS", default: Some("512"), help: "HTTP connections open at once; at the cap a new client takes the slot of the connection idle longest, else waits for one to close (keep it below the process's file descriptor limit)" },
    Setting { key: "shutdown_timeout", env: "KURIR_SHUTDOWN_TIMEOUT", default: Some("25s"), help: "longest time from SIGTERM or SIGINT to exit, whatever clients or the database do: requests still open are then cut, and deliveries still in flight are retried once their leases expire" },
    Setting { key: "retention", env: "KURIR_RETENTION", default: Some("30d"), help: "how long an event whose every delivery was sent is kept, with its deliveries and attempts, e.g. 30d, 12h" },
    Setting { key: "dead_letter_retention", env: "KURIR_DEAD_LETTER_RETENTION", default: Some("90d"), help: "how long an event with a dead-lettered delivery is kept (once none of its deliveries is still to be made)" },
    Setting { key: "inbox_retention", env: "KURIR_INBOX_RETENTION", default: Some("30d"), help: "how long a completed inbox event is kept (a partner's retry of it after that is processed again)" },
    Setting { key: "replay_audit_retention", env: "KURIR_REPLAY_AUDIT_RETENTION", default: Some("forever"), help: "how long the replay audit is kept: forever, or a duration" },
    Setting { key: "prune_interval", env: "KURIR_PRUNE_INTERVAL", default: Some("1m"), help: "time between the pruner's rounds; a round deletes in small batches until nothing is left to prune" },
    Setting { key: "event_catalog", env: "KURIR_EVENT_CATALOG", default: Some("open"), help: "how events are checked against the event catalog: off (not at all), open (an event whose type and version has a JSON Schema must pass it; others pass), strict (as open, and a type or version the catalog lacks is refused). The API answers 422; a row written with SQL is recorded as refused (kurir events recheck)" },
    Setting { key: "metrics_require_token", env: "KURIR_METRICS_REQUIRE_TOKEN", default: Some("false"), help: "whether GET /metrics needs the admin token (true or false)" },
    Setting { key: "public_url", env: "KURIR_PUBLIC_URL", default: None, help: "where browsers reach this kurir, e.g. https://hooks.example.com: subscriber portal links start with it [default: http://<listen>]" },
    Setting { key: "portal_session_ttl", env: "KURIR_PORTAL_SESSION_TTL", default: Some("8h"), help: "how long a subscriber portal session lasts after its link is opened" },
    Setting { key: "portal_frame_ancestors", env: "KURIR_PORTAL_FRAME_ANCESTORS", default: None, help: "origins allowed to show the subscriber portal in an iframe, separated by spaces or commas, e.g. https://app.example.com [default: none; framing is refused]" },
    Setting { key: "portal_title", env: "KURIR_PORTAL_TITLE", default: Some("Webhooks"), help: "the subscriber portal's title" },
    Setting { key: "portal_logo_url", env: "KURIR_PORTAL_LOGO_URL", default: None, help: "an http(s) URL of an image shown beside the subscriber portal's title" },
    Setting { key: "portal_accent_color", env: "KURIR_PORTAL_ACCENT_COLOR", default: Some("#1f4f99"), help: "the subscriber portal's accent colour, # and 3 or 6 hex digits" },
];

/// How deliveries are made; shared by every delivery of a process unless an endpoint overrides.
#[derive(Clone, Debug)]
pub struct DeliveryConfig {
    /// Connect timeout.
    pub connect_timeout: Duration,
    /// Response timeout.
    pub request_timeout: Duration,
    /// Retry schedule.
    pub retry: RetryPolicy,
    /// Networks exempt from the SSRF guard.
    pub allowed_networks: Vec<IpNet>,
    /// Concurrent deliveries per process.
    pub max_concurrency: u32,
    /// Rows per relay batch and per claim.
    pub batch_size: u32,
    /// Idle wait of the dispatcher loop.
    pub poll_interval: Duration,
    /// Idle wait of the relay loop: how long an event written by plain SQL may wait.
    pub relay_poll_interval: Duration,
    /// Added to the timeouts to make a lease.
    pub lease_margin: Duration,
    /// When an endpoint's circuit breaker opens, unless the endpoint overrides.
    pub breaker: BreakerPolicy,
    /// How long an endpoint fails with no success before it is disabled.
    pub endpoint_disable_after: Duration,
}

impl Default for DeliveryConfig {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(2),
            request_timeout: Duration::from_secs(5),
            retry: RetryPolicy::default(),
            allowed_networks: Vec::new(),
            max_concurrency: 256,
            batch_size: 200,
            poll_interval: Duration::from_millis(50),
            relay_poll_interval: Duration::from_millis(5),
            lease_margin: Duration::from_secs(30),
            breaker: BreakerPolicy::default(),
            endpoint_disable_after: Duration::from_secs(5 * 86_400),
        }
    }
}

/// How the HTTP server treats its clients ([`crate::listener`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HttpConfig {
    /// Time a client has to send a request's head.
    pub header_timeout: Duration,
    /// Time a client has to send a request's body.
    pub body_timeout: Duration,
    /// Connections open at once.
    pub max_connections: u32,
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            max_connections: 512,
        }
    }
}

/// The longest a process takes from SIGTERM to exit unless configured otherwise.
pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(25);

/// Validated settings of a kurir process. `Debug` hides the admin token and the database URL's
/// password.
#[derive(Clone)]
pub struct Config {
    /// Database URL.
    pub database_url: String,
    /// Data directory.
    pub data_dir: PathBuf,
    /// HTTP listen address.
    pub listen: SocketAddr,
    /// Admin token, when set explicitly.
    pub admin_token: Option<String>,
    /// Keys that encrypt stored secrets, when set explicitly (base64, comma-separated).
    pub encryption_key: Option<String>,
    /// Largest admin API request body, in bytes.
    pub max_body_bytes: usize,
    /// Whether `GET /metrics` needs the admin token.
    pub metrics_require_token: bool,
    /// How events are checked against the event catalog.
    pub event_catalog: crate::catalog::CatalogMode,
    /// Delivery settings.
    pub delivery: DeliveryConfig,
    /// How the HTTP server treats its clients.
    pub http: HttpConfig,
    /// The longest time from SIGTERM to exit.
    pub shutdown_timeout: Duration,
    /// How long finished history is kept.
    pub retention: RetentionConfig,
    /// The subscriber portal's settings.
    pub portal: PortalConfig,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("database_url", &url_without_password(&self.database_url))
            .field("data_dir", &self.data_dir)
            .field("listen", &self.listen)
            .field("admin_token", &self.admin_token.as_ref().map(|_| "***"))
            .field(
                "encryption_key",
                &self.encryption_key.as_ref().map(|_| "***"),
            )
            .field("max_body_bytes", &self.max_body_bytes)
            .field("metrics_require_token", &self.metrics_require_token)
            .field("event_catalog", &self.event_catalog)
            .field("delivery", &self.delivery)
            .field("http", &self.http)
            .field("shutdown_timeout", &self.shutdown_timeout)
            .field("retention", &self.retention)
            .field("portal", &self.portal)
            .finish()
    }
}

impl Config {
    /// Validates `raw`; the first invalid value is reported with its origin.
    pub fn from_raw(raw: &RawConfig) -> Result<Self, ConfigError> {
        let data_dir: PathBuf =
            raw.required("data_dir", "a directory", |s| Some(PathBuf::from(s)))?;
        let database_url = raw
            .parse(
                "database_url",
                "a postgres://…, mysql://…, mariadb://… or sqlite://… URL",
                |s| {
                    (s.starts_with("postgres://")
                        || s.starts_with("postgresql://")
                        || s.starts_with("mysql://")
                        || s.starts_with("mariadb://")
                        || s.starts_with("sqlite:"))
                    .then(|| s.to_owned())
                },
            )?
            .unwrap_or_else(|| default_database_url(&data_dir));
        let delivery = DeliveryConfig::from_raw(raw)?;
        Ok(Self {
            database_url,
            listen: raw.required("listen", "an address such as 127.0.0.1:8080", |s| {
                s.parse().ok()
            })?,
            admin_token: raw.parse("admin_token", "a non-empty token", |s| {
                (!s.is_empty()).then(|| s.to_owned())
            })?,
            encryption_key: raw.parse("encryption_key", "one or more base64 keys", |s| {
                (!s.is_empty()).then(|| s.to_owned())
            })?,
            max_body_bytes: raw.required(
                "max_body_size",
                &format!(
                    "a size {} bytes, such as 262144, 256KiB or 1MiB",
                    limits::describe(&limits::MAX_BODY_BYTES)
                ),
                |s| byte_size(s).filter(|n| limits::MAX_BODY_BYTES.contains(n)),
            )?,
            metrics_require_token: raw.required(
                "metrics_require_token",
                "true or false",
                boolean,
            )?,
            event_catalog: raw.required(
                "event_catalog",
                "off, open or strict",
                crate::catalog::CatalogMode::parse,
            )?,
            data_dir,
            delivery,
            http: HttpConfig {
                header_timeout: raw
                    .duration_in("http_header_timeout", &limits::HTTP_HEADER_TIMEOUT)?,
                body_timeout: raw.duration_in("http_body_timeout", &limits::HTTP_BODY_TIMEOUT)?,
                max_connections: raw.number_in("max_connections", &limits::MAX_CONNECTIONS)?,
            },
            shutdown_timeout: raw.duration_in("shutdown_timeout", &limits::SHUTDOWN_TIMEOUT)?,
            retention: RetentionConfig::from_raw(raw)?,
            portal: PortalConfig::from_raw(raw)?,
        })
    }
}

impl DeliveryConfig {
    /// The delivery settings of `raw`, each within its bound ([`crate::limits`]).
    pub fn from_raw(raw: &RawConfig) -> Result<Self, ConfigError> {
        let jitter = raw.required("retry_jitter", "a fraction between 0 and 1", |s| {
            s.parse::<f64>().ok().filter(|j| (0.0..=1.0).contains(j))
        })?;
        let delivery = DeliveryConfig {
            connect_timeout: raw.duration_in("connect_timeout", &limits::TIMEOUT)?,
            request_timeout: raw.duration_in("request_timeout", &limits::TIMEOUT)?,
            retry: RetryPolicy {
                initial_delay: raw.duration_in("retry_initial_delay", &limits::RETRY_DELAY)?,
                max_delay: raw.duration_in("retry_max_delay", &limits::RETRY_DELAY)?,
                max_attempts: raw.number_in("retry_max_attempts", &limits::RETRY_ATTEMPTS)?,
                jitter,
            },
            allowed_networks: raw.required(
                "allowed_networks",
                "comma-separated CIDRs such as 127.0.0.0/8,::1/128",
                parse_networks,
            )?,
            max_concurrency: raw.number_in("max_concurrency", &limits::MAX_CONCURRENCY)?,
            batch_size: raw.number_in("batch_size", &limits::BATCH_SIZE)?,
            poll_interval: raw.duration_in("poll_interval", &limits::POLL_INTERVAL)?,
            relay_poll_interval: raw.duration_in("relay_poll_interval", &limits::POLL_INTERVAL)?,
            lease_margin: raw.duration_in("lease_margin", &limits::LEASE_MARGIN)?,
            breaker: BreakerPolicy {
                failure_threshold: raw.number_in(
                    "circuit_failure_threshold",
                    &limits::CIRCUIT_FAILURE_THRESHOLD_DEFAULT,
                )?,
                cooldown: raw.duration_in("circuit_cooldown", &limits::CIRCUIT_COOLDOWN)?,
            },
            endpoint_disable_after: raw
                .duration_in("endpoint_disable_after", &limits::ENDPOINT_DISABLE_AFTER)?,
        };
        if delivery.retry.initial_delay > delivery.retry.max_delay {
            let (value, origin) = raw
                .get("retry_initial_delay")
                .cloned()
                .unwrap_or((String::new(), Origin::Default));
            return Err(ConfigError::Invalid {
                origin,
                value,
                expected: format!(
                    "at most the retry max delay ({})",
                    humantime::format_duration(delivery.retry.max_delay)
                ),
            });
        }
        Ok(delivery)
    }
}

/// Bytes, or a whole number of `KiB` or `MiB`; at least 1 KiB.
fn byte_size(s: &str) -> Option<usize> {
    let (digits, unit) = match s.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => s.split_at(i),
        None => (s, ""),
    };
    let unit = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1024,
        "MiB" => 1024 * 1024,
        _ => return None,
    };
    digits
        .parse::<usize>()
        .ok()?
        .checked_mul(unit)
        .filter(|n| *n >= 1024)
}

fn boolean(s: &str) -> Option<bool> {
    match s.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Some(true),
        "false" | "0" | "no" | "off" => Some(false),
        _ => None,
    }
}

/// Parses a comma-separated CIDR list; a bare address counts as a single-host network.
pub fn parse_networks(s: &str) -> Option<Vec<IpNet>> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| {
            p.parse::<IpNet>()
                .ok()
                .or_else(|| p.parse::<std::net::IpAddr>().ok().map(IpNet::from))
        })
        .collect()
}

/// `sqlite://<data_dir>/kurir.db`.
pub fn default_database_url(data_dir: &Path) -> String {
    format!("sqlite://{}", data_dir.join("kurir.db").display())
}

#[cfg(test)]
mod tests;
