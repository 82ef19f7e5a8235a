//! How long finished history is kept ([`RetentionConfig`]): the `*_retention` settings and how
//! often the pruner looks.

use std::time::Duration;

use super::raw::{duration, RawConfig};
use super::ConfigError;
use crate::limits;

/// How long finished rows are kept before the pruner deletes them ([`crate::prune`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetentionConfig {
    /// Events whose every delivery is sent, with their deliveries and attempts.
    pub events: Duration,
    /// Events with a dead-lettered delivery (and none still to make), with theirs.
    pub dead_letters: Duration,
    /// Completed inbox events.
    pub inbox: Duration,
    /// Replay audit rows; `None`: kept forever.
    pub replay_audit: Option<Duration>,
    /// Time between the pruner's rounds (a round goes on while its batches come back full).
    pub interval: Duration,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        const DAY: u64 = 24 * 3600;
        Self {
            events: Duration::from_secs(30 * DAY),
            dead_letters: Duration::from_secs(90 * DAY),
            inbox: Duration::from_secs(30 * DAY),
            replay_audit: None,
            interval: Duration::from_secs(60),
        }
    }
}

impl RetentionConfig {
    pub(super) fn from_raw(raw: &RawConfig) -> Result<Self, ConfigError> {
        let kept = |key| raw.duration_in(key, &limits::RETENTION);
        Ok(Self {
            events: kept("retention")?,
            dead_letters: kept("dead_letter_retention")?,
            inbox: kept("inbox_retention")?,
            replay_audit: raw.required(
                "replay_audit_retention",
                "forever, or a duration such as 30d, 12h or 5s",
                |s| match s {
                    "forever" => Some(None),
                    _ => duration(s)
                        .filter(|d| limits::RETENTION.contains(d))
                        .map(Some),
                },
            )?,
            interval: raw.duration_in("prune_interval", &limits::PRUNE_INTERVAL)?,
        })
    }
}
