//! One delivery attempt: build the signed request, send it outside any transaction, and turn
//! what happened into a [`Completion`].
//!
//! This module owns what a delivery sends (the envelope, its signature headers, the endpoint's
//! timeouts) and the mapping from HTTP outcome to retry decision; the HTTP mechanics (SSRF
//! guard, redirects, response capture) are [`super::http`]'s. It does not touch the store.

use std::time::{Duration, Instant};

use chrono::Utc;
use kurir_core::event::Envelope;
use kurir_core::retry::{AttemptOutcome, Next};
use serde_json::value::RawValue;

use super::http::{PostError, Response, Timeouts, WebhookClient};
use crate::config::DeliveryConfig;
use crate::delivery::{ClaimedDelivery, Completion, NextState};

pub use super::http::RESPONSE_CAPTURE_BYTES;

/// How an attempt ended, for logs and metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// 2xx.
    Sent,
    /// Failed; another attempt is scheduled.
    Retry,
    /// Failed for the last time (or 410).
    DeadLetter,
    /// The SSRF guard refused the destination.
    Refused,
}

impl Outcome {
    /// Lower-case label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Sent => "sent",
            Self::Retry => "retry",
            Self::DeadLetter => "dead_letter",
            Self::Refused => "refused",
        }
    }
}

/// Sends deliveries, through the shared [`WebhookClient`].
pub struct Sender {
    config: DeliveryConfig,
    http: WebhookClient,
}

impl Sender {
    /// A sender with the process-wide delivery settings.
    pub fn new(config: DeliveryConfig) -> Self {
        Self {
            http: WebhookClient::new(config.allowed_networks.clone()),
            config,
        }
    }

    /// Makes one attempt and decides what happens next. Never fails: every problem becomes a
    /// recorded attempt.
    pub async fn attempt(&self, d: &ClaimedDelivery) -> (Completion, Outcome) {
        let started_at = crate::store::now_millis();
        let clock = Instant::now();
        let result = self.send(d, started_at).await;
        let duration_ms = clock.elapsed().as_millis() as i64;
        let policy = d.endpoint.overrides.retry_policy(&self.config.retry);
        let (status_code, error, response_body, outcome) = match result {
            Ok(resp) => {
                let o = classify_status(resp.status, resp.retry_after);
                (Some(resp.status), None, Some(resp.body), o)
            }
            Err(e) => (None, Some(e.to_string()), None, AttemptOutcome::Failed),
        };
        let refused = error
            .as_deref()
            .is_some_and(|e| e.starts_with("refused by the SSRF guard"));
        let (next, label) = match (status_code, policy.next(d.attempt, &outcome, Utc::now())) {
            (Some(code), _) if (200..300).contains(&code) => (NextState::Sent, Outcome::Sent),
            (Some(410), _) => (NextState::Gone, Outcome::DeadLetter),
            (_, Next::DeadLetter) => (NextState::DeadLetter, Outcome::DeadLetter),
            (_, Next::Retry(at)) => (NextState::Retry(at), Outcome::Retry),
        };
        let label = if refused { Outcome::Refused } else { label };
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
        (completion, label)
    }

    async fn send(
        &self,
        d: &ClaimedDelivery,
        at: chrono::DateTime<Utc>,
    ) -> Result<Response, PostError> {
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
        let o = &d.endpoint.overrides;
        let timeouts = Timeouts {
            connect: o
                .connect_timeout_ms
                .map_or(self.config.connect_timeout, |ms| {
                    Duration::from_millis(ms.into())
                }),
            response: o
                .request_timeout_ms
                .map_or(self.config.request_timeout, |ms| {
                    Duration::from_millis(ms.into())
                }),
        };
        self.http
            .post(&d.endpoint.url, &headers, body, timeouts)
            .await
    }
}

fn envelope_body(d: &ClaimedDelivery) -> Result<Vec<u8>, PostError> {
    let data: &RawValue = serde_json::from_str(&d.event.payload)
        .map_err(|e| PostError::Http(format!("stored payload is not JSON: {e}")))?;
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
