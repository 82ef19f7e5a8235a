//! Endpoints: where events are delivered, which event types they want, and how they are signed.
//!
//! This module owns the endpoint model and its rules (the event-type filter, secret rotation,
//! per-endpoint overrides). Storing endpoints is the store's job; sending is the dispatcher's.

use std::fmt;

use chrono::{DateTime, Utc};
use kurir_core::secret::Secret;
use serde::{Deserialize, Serialize};

use crate::limits;

pub use ordering::{ordering_key, OnDeadLetter, Ordering};
pub(crate) use overrides::each_override;
pub use overrides::{Overrides, OverridesUpdate};

/// The default cap on concurrent requests to one endpoint from one kurir process.
pub const DEFAULT_MAX_IN_FLIGHT: u32 = 16;

/// An endpoint's identifier: a UUIDv7 in its hyphenated text form.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct EndpointId(String);

impl EndpointId {
    /// A new, time-ordered id.
    pub fn generate() -> Self {
        Self(uuid::Uuid::now_v7().hyphenated().to_string())
    }

    /// Parses an id given by a user, refusing anything that is not a UUID.
    pub fn parse(s: &str) -> Result<Self, InvalidEndpoint> {
        uuid::Uuid::try_parse(s)
            .map(|u| Self(u.hyphenated().to_string()))
            .map_err(|_| InvalidEndpoint::new("id", format!("'{s}' is not a UUID")))
    }

    /// Wraps an id read back from the store, which only ever holds ids made by [`EndpointId::parse`]
    /// or [`EndpointId::generate`].
    pub(crate) fn from_stored(s: String) -> Self {
        Self(s)
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for EndpointId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A problem with endpoint input, naming the field at fault.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{field}: {message}")]
pub struct InvalidEndpoint {
    /// The field that is wrong, as named in the API.
    pub field: &'static str,
    /// What is wrong with it.
    pub message: String,
}

impl InvalidEndpoint {
    fn new(field: &'static str, message: impl Into<String>) -> Self {
        Self {
            field,
            message: message.into(),
        }
    }
}

/// Which event types an endpoint receives: exact names, `*`, or prefix wildcards such as
/// `order.*` (which matches `order.paid` and `order.item.added`, not `order` itself).
/// An empty filter receives everything.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct EventFilter(Vec<String>);

impl EventFilter {
    /// Validates each pattern: an event type, `*`, or an event type followed by `.*`.
    pub fn parse(patterns: Vec<String>) -> Result<Self, InvalidEndpoint> {
        for p in &patterns {
            let name = p.strip_suffix(".*").unwrap_or(p);
            if p != "*" && kurir_core::event::EventType::parse(name).is_err() {
                return Err(InvalidEndpoint::new(
                    "event_types",
                    format!("'{p}' is not an event type, '*', or a prefix wildcard like 'order.*'"),
                ));
            }
        }
        Ok(Self(patterns))
    }

    /// Whether an event of this type is delivered to the endpoint.
    pub fn matches(&self, event_type: &str) -> bool {
        self.0.is_empty() || self.0.iter().any(|p| pattern_matches(p, event_type))
    }

    /// The patterns as given.
    pub fn patterns(&self) -> &[String] {
        &self.0
    }
}

fn pattern_matches(pattern: &str, event_type: &str) -> bool {
    match pattern.strip_suffix('*') {
        None => pattern == event_type,
        Some("") => true,
        Some(prefix) => event_type.starts_with(prefix) && event_type.len() > prefix.len(),
    }
}

/// A secret that was rotated out and still signs until it expires.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PreviousSecret {
    /// The old secret.
    #[serde(with = "secret_serde")]
    pub secret: Secret,
    /// When it stops signing.
    pub expires_at: DateTime<Utc>,
}

mod secret_serde {
    use kurir_core::secret::Secret;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(secret: &Secret, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(secret.expose())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Secret, D::Error> {
        let raw = String::deserialize(d)?;
        Secret::parse(&raw).map_err(serde::de::Error::custom)
    }
}

/// An endpoint as stored.
#[derive(Clone, Debug)]
pub struct Endpoint {
    /// Its id.
    pub id: EndpointId,
    /// Where events are POSTed.
    pub url: String,
    /// Free text for operators.
    pub description: String,
    /// Which event types it receives.
    pub event_types: EventFilter,
    /// The current signing secret.
    pub secret: Secret,
    /// Rotated-out secrets that still sign until they expire.
    pub previous_secrets: Vec<PreviousSecret>,
    /// Whether deliveries are made.
    pub enabled: bool,
    /// Why it was disabled (by an operator or by a `410 Gone`).
    pub disabled_reason: Option<String>,
    /// Per-endpoint overrides.
    pub overrides: Overrides,
    /// Concurrent requests to this endpoint allowed per kurir process.
    pub max_in_flight: u32,
    /// Requests per second to it, all processes together; `None`: no limit.
    pub rate_limit_per_second: Option<u32>,
    /// Whether its deliveries are attempted in outbox order per aggregate.
    pub ordering: Ordering,
    /// What a dead-lettered delivery does to the later ones of its aggregate.
    pub ordering_on_dead_letter: OnDeadLetter,
    /// The subscriber it belongs to (`None`: the operator's own). Set at creation, never moved:
    /// it gets only that subscriber's events.
    pub subscriber_id: Option<String>,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When it last changed.
    pub updated_at: DateTime<Utc>,
}

/// What is needed to create an endpoint.
#[derive(Clone, Debug)]
pub struct NewEndpoint {
    /// Where events are POSTed: an absolute http(s) URL.
    pub url: String,
    /// Free text for operators.
    pub description: String,
    /// Which event types it receives.
    pub event_types: EventFilter,
    /// The signing secret; generated when `None`.
    pub secret: Option<Secret>,
    /// Per-endpoint overrides.
    pub overrides: Overrides,
    /// Concurrent requests per process; [`DEFAULT_MAX_IN_FLIGHT`] when `None`.
    pub max_in_flight: Option<u32>,
    /// Requests per second, all processes together; `None`: no limit.
    pub rate_limit_per_second: Option<u32>,
    /// Ordered delivery per aggregate, or none.
    pub ordering: Ordering,
    /// What a dead-lettered delivery does to the later ones of its aggregate.
    pub ordering_on_dead_letter: OnDeadLetter,
    /// The subscriber it belongs to; `None`: the operator's own.
    pub subscriber_id: Option<String>,
}

impl NewEndpoint {
    /// An endpoint at `url` receiving every event, with defaults for everything else.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            description: String::new(),
            event_types: EventFilter::default(),
            secret: None,
            overrides: Overrides::default(),
            max_in_flight: None,
            rate_limit_per_second: None,
            ordering: Ordering::None,
            ordering_on_dead_letter: OnDeadLetter::Block,
            subscriber_id: None,
        }
    }

    /// Checks the URL, the description and every number against its bound.
    pub fn validate(&self) -> Result<(), InvalidEndpoint> {
        validate_url(&self.url)?;
        check_text("description", &self.description)?;
        check_max_in_flight(self.max_in_flight)?;
        check_rate_limit(self.rate_limit_per_second)?;
        self.overrides.validate()
    }
}

/// Changes to an endpoint; `None` leaves a field as it is. The store writes only the columns
/// of the fields given, so concurrent changes to other fields (a `410` disabling it, a secret
/// rotation) stay.
#[derive(Clone, Debug, Default)]
pub struct EndpointUpdate {
    /// New URL.
    pub url: Option<String>,
    /// New description.
    pub description: Option<String>,
    /// New filter.
    pub event_types: Option<EventFilter>,
    /// Enable or disable; disabling may carry a reason.
    pub enabled: Option<bool>,
    /// Reason recorded with `enabled: Some(false)`.
    pub disabled_reason: Option<String>,
    /// New per-process concurrency cap.
    pub max_in_flight: Option<u32>,
    /// New rate limit: `Some(None)` removes it.
    pub rate_limit_per_second: Option<Option<u32>>,
    /// New ordering: it applies to the deliveries fanned out from then on; turning it off
    /// releases the deliveries already waiting at once.
    pub ordering: Option<Ordering>,
    /// New dead-letter policy: it applies at once, to every delivery waiting.
    pub ordering_on_dead_letter: Option<OnDeadLetter>,
    /// Override changes: `Some(Some(v))` sets one, `Some(None)` clears it (back to the
    /// process-wide setting).
    pub overrides: OverridesUpdate,
}

impl EndpointUpdate {
    /// Checks each field given, as [`NewEndpoint::validate`] does, but the overrides: those are
    /// checked once applied to the stored ones ([`OverridesUpdate::applied_to`]), since a first
    /// retry delay must not exceed the longest, whichever of the two the update gives.
    pub fn validate(&self) -> Result<(), InvalidEndpoint> {
        if let Some(url) = &self.url {
            validate_url(url)?;
        }
        if let Some(description) = &self.description {
            check_text("description", description)?;
        }
        if let Some(reason) = &self.disabled_reason {
            check_text("disabled_reason", reason)?;
        }
        check_max_in_flight(self.max_in_flight)?;
        check_rate_limit(self.rate_limit_per_second.flatten())
    }
}

/// Refuses anything but an absolute `http` or `https` URL written out as it will be used: it
/// starts with `http://` or `https://` and then the host (the URL standard reads `http:///path` as
/// host `path` and `http:host` as `http://host`), holds no whitespace or control character (the
/// standard drops tabs and newlines silently), carries no user or password (every read would show
/// them; kurir authenticates its requests with signatures), and is at most
/// Refuses a rate limit outside [`limits::RATE_LIMIT_PER_SECOND`].
fn check_rate_limit(limit: Option<u32>) -> Result<(), InvalidEndpoint> {
    let range = limits::RATE_LIMIT_PER_SECOND;
    in_range(
        "rate_limit_per_second",
        limit.map(u64::from),
        &(u64::from(*range.start())..=u64::from(*range.end())),
    )
}

/// [`limits::MAX_URL_BYTES`] long.
pub fn validate_url(url: &str) -> Result<(), InvalidEndpoint> {
    let bad = |message: &str| InvalidEndpoint::new("url", message);
    if url.len() > limits::MAX_URL_BYTES {
        return Err(bad(&format!(
            "must be at most {} bytes",
            limits::MAX_URL_BYTES
        )));
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(bad(
            "must not contain spaces or control characters (percent-encode them)",
        ));
    }
    let after_scheme = ["https://", "http://"].into_iter().find_map(|scheme| {
        url.get(..scheme.len())
            .filter(|start| start.eq_ignore_ascii_case(scheme))
            .map(|_| &url[scheme.len()..])
    });
    let Some(rest) = after_scheme else {
        return Err(bad("must start with http:// or https://"));
    };
    if rest.is_empty() || rest.starts_with(['/', '\\']) {
        return Err(bad("must have a host right after the //"));
    }
    let parsed = reqwest::Url::parse(url).map_err(|e| {
        let shown = crate::redact::url_without_password(url);
        InvalidEndpoint::new("url", format!("'{shown}' is not a valid URL: {e}"))
    })?;
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(bad("must not contain a user or password"));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(bad("must have a host"));
    }
    Ok(())
}

fn check_text(field: &'static str, value: &str) -> Result<(), InvalidEndpoint> {
    match limits::text_problem(value, limits::MAX_TEXT_BYTES) {
        Some(problem) => Err(InvalidEndpoint::new(field, problem)),
        None => Ok(()),
    }
}

fn check_max_in_flight(value: Option<u32>) -> Result<(), InvalidEndpoint> {
    let range = u64::from(*limits::MAX_IN_FLIGHT.start())..=u64::from(*limits::MAX_IN_FLIGHT.end());
    in_range("max_in_flight", value.map(u64::from), &range)
}

fn in_range(
    field: &'static str,
    value: Option<u64>,
    range: &std::ops::RangeInclusive<u64>,
) -> Result<(), InvalidEndpoint> {
    match value {
        Some(v) if !range.contains(&v) => Err(InvalidEndpoint::new(
            field,
            format!("must be {}", limits::describe(range)),
        )),
        _ => Ok(()),
    }
}

impl Endpoint {
    /// The secrets that sign a request made at `now`: the current one first, then every
    /// rotated-out secret that has not expired.
    pub fn signing_secrets(&self, now: DateTime<Utc>) -> Vec<&Secret> {
        std::iter::once(&self.secret)
            .chain(
                self.previous_secrets
                    .iter()
                    .filter(|p| p.expires_at > now)
                    .map(|p| &p.secret),
            )
            .collect()
    }
}

mod ordering;
mod overrides;
#[cfg(test)]
mod tests;
