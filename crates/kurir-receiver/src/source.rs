//! A configured webhook source: its name, the one scheme and the secrets it signs with, the timestamp
//! tolerance, the body limit and the clock verification reads.
//!
//! Building one validates everything up front ([`ConfigError`] says what to fix), so a request can
//! only fail for reasons that are the sender's. Turning a request into a
//! [`VerifiedEvent`](crate::VerifiedEvent) is [`crate::extract`]'s job.

use std::sync::Arc;
use std::time::Duration;

use kurir_core::{Scheme, Verifier};
use metrics::Recorder;

use crate::clock::Clock;
use crate::error::ConfigError;
use crate::metrics::InboxMetrics;

/// Largest request body accepted unless configured otherwise: 1 MiB. Larger bodies get `413`.
pub const DEFAULT_BODY_LIMIT: usize = 1024 * 1024;

/// Longest source name accepted.
const MAX_NAME_LEN: usize = 64;

/// One sender of webhooks, as this application knows it. Cheap to clone.
#[derive(Clone, Debug)]
pub struct WebhookSource(Arc<Settings>);

#[derive(Clone, Debug)]
struct Settings {
    name: String,
    verifier: Verifier,
    body_limit: usize,
    clock: Clock,
    metrics: InboxMetrics,
}

impl WebhookSource {
    /// A source named `name` (1 to 64 characters from `A-Z a-z 0-9 . _ -`; it keys the inbox rows
    /// and may appear in URLs) that signs under `scheme` with any of `secrets`. Several secrets are
    /// how a rotation works: list the new one and the old one until the sender has switched.
    ///
    /// Secrets are read with [`Scheme::parse_secret`]; the tolerance defaults to 5 minutes, the body
    /// limit to [`DEFAULT_BODY_LIMIT`], the clock to the system clock.
    pub fn new<I, S>(name: &str, scheme: Scheme, secrets: I) -> Result<WebhookSource, ConfigError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        check_name(name)?;
        let secrets = secrets
            .into_iter()
            .enumerate()
            .map(|(index, secret)| {
                scheme
                    .parse_secret(secret.as_ref())
                    .map_err(|reason| ConfigError::InvalidSecret {
                        source_name: name.to_owned(),
                        index,
                        reason,
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        if secrets.is_empty() {
            return Err(ConfigError::NoSecrets(name.to_owned()));
        }
        Ok(WebhookSource(Arc::new(Settings {
            name: name.to_owned(),
            verifier: Verifier::new(scheme, secrets),
            body_limit: DEFAULT_BODY_LIMIT,
            clock: Clock::system(),
            metrics: InboxMetrics::default(),
        })))
    }

    /// How far a signed timestamp may be from now, either way (schemes without a timestamp ignore it).
    pub fn tolerance(mut self, tolerance: Duration) -> WebhookSource {
        let settings = Arc::make_mut(&mut self.0);
        settings.verifier = settings.verifier.clone().with_tolerance(tolerance);
        self
    }

    /// The largest body accepted, in bytes; a larger one is answered `413` without being verified.
    pub fn body_limit(mut self, bytes: usize) -> WebhookSource {
        Arc::make_mut(&mut self.0).body_limit = bytes;
        self
    }

    /// The clock timestamps are checked against; tests pass one they control.
    pub fn clock(mut self, clock: Clock) -> WebhookSource {
        Arc::make_mut(&mut self.0).clock = clock;
        self
    }

    /// Counts this source's requests (`kurir_inbox_events_total`, see [`crate::metrics`]) in
    /// `recorder` instead of the `metrics` crate's global recorder.
    pub fn metrics_recorder(mut self, recorder: Arc<dyn Recorder + Send + Sync>) -> WebhookSource {
        Arc::make_mut(&mut self.0).metrics = InboxMetrics::new(recorder);
        self
    }

    /// Adds one request with `outcome` to `kurir_inbox_events_total` for this source. The
    /// extractor, [`WebhookSource::verify`] and [`Receiver::accept`](crate::Receiver::accept)
    /// already count; this is for code that stores verified events some other way.
    pub fn count(&self, outcome: &'static str) {
        self.0.metrics.count(&self.0.name, outcome);
    }

    /// The source's name, as stored in `kurir_inbox.source`.
    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// The scheme its requests are verified under.
    pub fn scheme(&self) -> Scheme {
        self.0.verifier.scheme()
    }

    pub(crate) fn verifier(&self) -> &Verifier {
        &self.0.verifier
    }

    pub(crate) fn limit(&self) -> usize {
        self.0.body_limit
    }

    pub(crate) fn now(&self) -> chrono::DateTime<chrono::Utc> {
        self.0.clock.now()
    }
}

impl WebhookSource {
    /// Whether `name` is a valid source name: 1 to 64 characters from `A-Z a-z 0-9 . _ -`. Any
    /// other name cannot belong to a source.
    pub fn is_valid_name(name: &str) -> bool {
        let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
        !name.is_empty() && name.len() <= MAX_NAME_LEN && name.chars().all(allowed)
    }
}

fn check_name(name: &str) -> Result<(), ConfigError> {
    if !WebhookSource::is_valid_name(name) {
        return Err(ConfigError::InvalidSourceName(name.to_owned()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_url_safe_and_bounded() {
        let ok = |n: &str| WebhookSource::new(n, Scheme::Github, ["a-long-secret"]).is_ok();
        assert!(ok("billing"));
        assert!(ok("stripe.live_2-eu"));
        assert!(!ok(""));
        assert!(!ok("has space"));
        assert!(!ok("a/b"));
        assert!(!ok(&"x".repeat(65)));
    }

    #[test]
    fn a_source_needs_a_valid_secret() {
        let none: [&str; 0] = [];
        assert!(matches!(
            WebhookSource::new("s", Scheme::Github, none),
            Err(ConfigError::NoSecrets(_))
        ));
        let err = WebhookSource::new("s", Scheme::StandardWebhooks, ["long-enough", "whsec_!!"])
            .unwrap_err();
        assert!(matches!(err, ConfigError::InvalidSecret { index: 1, .. }));
        assert!(!err.to_string().contains("whsec_!!"), "{err}");
    }
}
