//! Loading settings raw: strings by key from `kurir.toml`, the environment and flags, each with
//! its origin so an error can point at it ([`RawConfig`]); what [`super::Config`] validates.

use std::collections::HashMap;
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::SETTINGS;
use crate::limits;
use crate::redact::url_without_password;

/// Where a value came from, so an error can point at it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Built-in default.
    Default,
    /// `kurir.toml` (or the `--config` file).
    File(PathBuf),
    /// An environment variable.
    Env(&'static str),
    /// A command-line flag.
    Flag(String),
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Default => f.write_str("the default"),
            Origin::File(p) => write!(f, "{}", p.display()),
            Origin::Env(name) => f.write_str(name),
            Origin::Flag(flag) => f.write_str(flag),
        }
    }
}

/// A setting that could not be loaded or is invalid.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file could not be read or parsed.
    #[error("cannot read config file {path}: {message}")]
    File {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// A value is invalid.
    #[error("{origin}: invalid value '{value}': {expected}")]
    Invalid {
        /// Where it came from (e.g. `KURIR_CONNECT_TIMEOUT`).
        origin: Origin,
        /// The value given.
        value: String,
        /// What was expected.
        expected: String,
    },
}

/// Raw settings: strings, by key, with their origin. `Debug` hides the admin token and the
/// database URL's password (see [`shown_value`]).
#[derive(Clone, Default)]
pub struct RawConfig {
    values: HashMap<&'static str, (String, Origin)>,
}

impl std::fmt::Debug for RawConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut map = f.debug_map();
        for (key, (value, origin)) in &self.values {
            map.entry(key, &(shown_value(key, value), origin));
        }
        map.finish()
    }
}

/// A setting's value as it may be shown (in `Debug` output and error messages): the admin token
/// as `***`, a URL without its password, anything else as given.
pub fn shown_value(key: &str, value: &str) -> String {
    match key {
        "admin_token" | "encryption_key" => "***".to_owned(),
        _ => url_without_password(value),
    }
}

impl RawConfig {
    /// Layers defaults, then `file` (if given and present), then the environment, then `flags`
    /// (`(key, value)` pairs; later layers win).
    pub fn load(
        file: Option<&Path>,
        env: impl Fn(&str) -> Option<String>,
        flags: &[(&'static str, String)],
    ) -> Result<Self, ConfigError> {
        let mut raw = RawConfig::default();
        for s in SETTINGS {
            if let Some(d) = s.default {
                raw.values.insert(s.key, (d.to_owned(), Origin::Default));
            }
        }
        if let Some(path) = file {
            raw.merge_file(path)?;
        }
        for s in SETTINGS {
            if let Some(v) = env(s.env) {
                raw.values.insert(s.key, (v, Origin::Env(s.env)));
            }
        }
        for (key, value) in flags {
            raw.values.insert(
                key,
                (
                    value.clone(),
                    Origin::Flag(format!("--{}", key.replace('_', "-"))),
                ),
            );
        }
        Ok(raw)
    }

    fn merge_file(&mut self, path: &Path) -> Result<(), ConfigError> {
        let file_err = |message: String| ConfigError::File {
            path: path.to_owned(),
            message,
        };
        let text = std::fs::read_to_string(path).map_err(|e| file_err(e.to_string()))?;
        let table: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| file_err(e.to_string()))?;
        for (key, value) in table {
            let Some(setting) = SETTINGS.iter().find(|s| s.key == key) else {
                return Err(file_err(format!("unknown setting '{key}'")));
            };
            let value = match value {
                toml::Value::String(s) => s,
                toml::Value::Array(items) => items
                    .iter()
                    .map(|i| {
                        i.as_str()
                            .map(str::to_owned)
                            .unwrap_or_else(|| i.to_string())
                    })
                    .collect::<Vec<_>>()
                    .join(","),
                other => other.to_string(),
            };
            self.values
                .insert(setting.key, (value, Origin::File(path.to_owned())));
        }
        Ok(())
    }

    pub(super) fn get(&self, key: &str) -> Option<&(String, Origin)> {
        self.values.get(key)
    }

    pub(super) fn parse<T>(
        &self,
        key: &'static str,
        expected: &str,
        parse: impl Fn(&str) -> Option<T>,
    ) -> Result<Option<T>, ConfigError> {
        let Some((value, origin)) = self.get(key) else {
            return Ok(None);
        };
        parse(value.trim())
            .map(Some)
            .ok_or_else(|| ConfigError::Invalid {
                origin: origin.clone(),
                value: shown_value(key, value),
                expected: expected.to_owned(),
            })
    }

    /// A duration within `range`.
    pub(super) fn duration_in(
        &self,
        key: &'static str,
        range: &RangeInclusive<Duration>,
    ) -> Result<Duration, ConfigError> {
        let expected = format!(
            "a duration {}, such as 150ms, 2s or 5m",
            limits::describe_durations(range)
        );
        self.required(key, &expected, |s| {
            duration(s).filter(|d| range.contains(d))
        })
    }

    /// A whole number within `range`.
    pub(super) fn number_in(
        &self,
        key: &'static str,
        range: &RangeInclusive<u32>,
    ) -> Result<u32, ConfigError> {
        let expected = format!("a whole number {}", limits::describe(range));
        self.required(key, &expected, |s| {
            s.parse::<u32>().ok().filter(|n| range.contains(n))
        })
    }

    pub(super) fn required<T>(
        &self,
        key: &'static str,
        expected: &str,
        parse: impl Fn(&str) -> Option<T>,
    ) -> Result<T, ConfigError> {
        // Every required key has a default in SETTINGS, so it is always present.
        self.parse(key, expected, parse)?
            .ok_or_else(|| ConfigError::Invalid {
                origin: Origin::Default,
                value: String::new(),
                expected: format!("{key} to be set"),
            })
    }
}

pub(super) fn duration(s: &str) -> Option<Duration> {
    humantime::parse_duration(s).ok()
}
