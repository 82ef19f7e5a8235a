//! One delivery attempt: build the signed request, send it outside any transaction, and turn
//! what happened into a [`Completion`].
//!
//! This module owns what a delivery sends (the envelope, its signature headers, the endpoint's
//! timeouts) and the mapping from HTTP outcome to retry decision; the HTTP mechanics (SSRF
//! guard, redirects, response capture) are [`crate::webhook_client`]'s. It does not touch the store.

use std::time::Duration;

use chrono::Utc;
use kurir_core::event::Envelope;
use kurir_core::retry::{AttemptOutcome, Next};
use kurir_core::Clock;
use serde_json::value::RawValue;

use crate::config::DeliveryConfig;
use crate::delivery::{
    Attempted, ClaimedDelivery, Completion, NextState, Outcome, ResponseClass, WireText,
};
use crate::endpoint::Endpoint;
use crate::pauses::OwnTime;
use crate::webhook_client::{PostError, Response, Timeouts, WebhookClient};

pub use crate::webhook_client::RESPONSE_CAPTURE_BYTES;

/// The class of a request that got no response: why there was none.
fn class_of_error(error: &PostError) -> ResponseClass {
    match error {
        PostError::Refused(_) => ResponseClass::Refused,
        PostError::Timeout(_) => ResponseClass::Timeout,
        PostError::Connect(_) => ResponseClass::ConnectError,
        PostError::Request(_) => ResponseClass::RequestError,
    }
}

/// Sends deliveries, through the shared [`WebhookClient`].
pub struct Sender {
    config: DeliveryConfig,
    http: WebhookClient,
    /// What an attempt's time (its signature's timestamp) and its retry's time are read from:
    /// the store's, which the database's claims agree with (see `crate::clock`).
    clock: Clock,
}

impl Sender {
    /// A sender with the process-wide delivery settings, reading time from `clock`.
    pub fn new(config: DeliveryConfig, clock: Clock) -> Self {
        Self {
            http: WebhookClient::new(
                config.allowed_networks.clone(),
                config.max_concurrency as usize,
            )
            .with_clock(clock.clone()),
            config,
            clock,
        }
    }

    /// The clock attempts are timed by.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// Makes one attempt and decides what happens next. Never fails: every problem becomes a
    /// recorded attempt.
    pub async fn attempt(&self, d: &ClaimedDelivery) -> Attempted {
        let started_at = self.clock.now_millis();
        // The request's own time: a pause of the whole process is not the endpoint's.
        let took = OwnTime::start();
        let result = self.send(d, started_at).await;
        let duration_ms = took.elapsed().as_millis() as i64;
        let policy = d.endpoint.overrides.retry_policy(&self.config.retry);
        let (status_code, error, response_body, outcome, class) = match result {
            Ok(resp) => {
                let o = classify_status(resp.status, resp.retry_after);
                let class = ResponseClass::of_status(resp.status);
                // An answer other than 2xx is the attempt's error: its status and what the
                // receiver said, which the lists show as the last error.
                let error = (!(200..300).contains(&resp.status)).then(|| resp.as_failure());
                (Some(resp.status), error, Some(resp.body), o, class)
            }
            Err(e) => {
                let class = class_of_error(&e);
                (
                    None,
                    Some(WireText::from(e.to_string())),
                    None,
                    AttemptOutcome::Failed,
                    class,
                )
            }
        };
        // Compared with the database's `now()` by every process's claim: the clock is the one
        // corrected to the database's.
        let retry = policy.next(d.attempt, &outcome, self.clock.now());
        let (next, label) = match (status_code, retry) {
            (Some(code), _) if (200..300).contains(&code) => (NextState::Sent, Outcome::Sent),
            (Some(410), _) => (NextState::Gone, Outcome::DeadLetter),
            (_, Next::DeadLetter) => (NextState::DeadLetter, Outcome::DeadLetter),
            (_, Next::Retry(at)) => (NextState::Retry(at), Outcome::Retry),
        };
        // A refusal that gives up still counts as a dead letter: that outcome counts every
        // delivery given up on, whatever the last failure was.
        let label = match (class, label) {
            (ResponseClass::Refused, Outcome::Retry) => Outcome::Refused,
            (_, label) => label,
        };
        let completion = Completion {
            delivery_id: d.delivery_id,
            endpoint_id: d.endpoint.id.clone(),
            attempt: d.attempt,
            trigger: d.trigger,
            started_at,
            duration_ms,
            status_code,
            error,
            response_body,
            next,
        };
        Attempted {
            completion,
            outcome: label,
            class,
        }
    }

    async fn send(
        &self,
        d: &ClaimedDelivery,
        at: chrono::DateTime<Utc>,
    ) -> Result<Response, PostError> {
        let (headers, body) = request(d, at)?;
        self.http
            .post(&d.endpoint.url, &headers, body, self.timeouts(&d.endpoint))
            .await
    }

    /// `endpoint`'s connect and response timeouts: its overrides, else the process's.
    pub fn timeouts(&self, endpoint: &Endpoint) -> Timeouts {
        let o = &endpoint.overrides;
        let ms = |v: Option<u32>, default| v.map_or(default, |ms| Duration::from_millis(ms.into()));
        Timeouts {
            connect: ms(o.connect_timeout_ms, self.config.connect_timeout),
            response: ms(o.request_timeout_ms, self.config.request_timeout),
        }
    }

    /// The longest one attempt to `endpoint` can take, from connecting to the end of the
    /// response, plus the lease margin (the time to record it).
    pub fn attempt_budget(&self, endpoint: &Endpoint) -> Duration {
        let t = self.timeouts(endpoint);
        t.connect + t.response + self.config.lease_margin
    }

    /// The last instant `d`'s attempt may start and still be over, and recorded, within its
    /// lease. A delivery not started by then is handed back instead.
    pub fn latest_start(&self, d: &ClaimedDelivery) -> tokio::time::Instant {
        // Before the clock's own start: long past.
        d.lease_deadline
            .checked_sub(self.attempt_budget(&d.endpoint))
            .unwrap_or_else(tokio::time::Instant::now)
    }
}

/// The headers of one attempt, by name, in the order sent.
pub type RequestHeaders = Vec<(&'static str, String)>;

/// The headers and body of `d`'s attempt started `at`: what [`Sender::attempt`] posts. The same
/// for the same `at` (the signatures' time), so a test send can show what it sent.
pub fn request(
    d: &ClaimedDelivery,
    at: chrono::DateTime<Utc>,
) -> Result<(RequestHeaders, Vec<u8>), PostError> {
    let body = envelope_body(d)?;
    let secrets = d.endpoint.signing_secrets(at);
    let mut headers = vec![("content-type", "application/json".to_owned())];
    headers.extend(kurir_core::sign::signature_headers(
        &d.event.event_id,
        &d.event.event_type,
        &secrets,
        at,
        &body,
    ));
    Ok((headers, body))
}

fn envelope_body(d: &ClaimedDelivery) -> Result<Vec<u8>, PostError> {
    let data: &RawValue = serde_json::from_str(&d.event.payload)
        .map_err(|e| PostError::Request(format!("stored payload is not JSON: {e}").into()))?;
    Ok(Envelope {
        event_id: &d.event.event_id,
        event_type: &d.event.event_type,
        version: d.event.version,
        occurred_at: d.event.occurred_at,
        delivery_attempt: d.attempt,
        data,
    }
    .to_json())
}

/// Maps an HTTP status to the retry policy's input: 410 is final, 429/503 may carry Retry-After.
fn classify_status(status: u16, retry_after: Option<Duration>) -> AttemptOutcome {
    match (status, retry_after) {
        (410, _) => AttemptOutcome::Gone,
        (429 | 503, Some(after)) => AttemptOutcome::FailedRetryAfter(after),
        _ => AttemptOutcome::Failed,
    }
}

/// One line per attempt (INFO when it delivered, WARN when it failed), and one more at ERROR when
/// the delivery is given up on. Never the payload, the secret, the signature or the response body
/// (which may echo the payload).
pub(super) fn log_attempt(d: &ClaimedDelivery, a: &Attempted) {
    let c = &a.completion;
    // The fields every line about this attempt carries, then the line's own.
    macro_rules! attempt_event {
        ($level:expr, $($own:tt)*) => {
            tracing::event!(
                $level,
                event_id = %d.event.event_id,
                event_type = %d.event.event_type,
                aggregate_id = d.event.aggregate_id.as_deref(),
                endpoint_id = %d.endpoint.id,
                attempt = d.attempt,
                status_code = c.status_code,
                // Only a failure without an answer: an answer's error quotes its body.
                error = c.error.as_deref().filter(|_| c.status_code.is_none()),
                $($own)*
            )
        };
    }
    macro_rules! attempt_line {
        ($level:expr) => {
            attempt_event!(
                $level,
                duration_ms = c.duration_ms,
                outcome = a.outcome.as_str(),
                trigger = c.trigger.as_str(),
                "delivery attempt"
            )
        };
    }
    if a.outcome == Outcome::Sent {
        attempt_line!(tracing::Level::INFO);
    } else {
        attempt_line!(tracing::Level::WARN);
    }
    if matches!(c.next, NextState::DeadLetter | NextState::Gone) {
        attempt_event!(
            tracing::Level::ERROR,
            gone = c.next == NextState::Gone,
            "delivery dead-lettered"
        );
    }
}
