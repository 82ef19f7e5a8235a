//! One delivery attempt: build the signed request, send it outside any transaction, and turn
//! what happened into a [`Completion`].
//!
//! This module owns the wire side of sending (body, headers, timeouts, redirects, response
//! capture) and the mapping from HTTP outcome to retry decision. It does not touch the store.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::Utc;
use kurir_core::event::Envelope;
use kurir_core::retry::{AttemptOutcome, Next};
use serde_json::value::RawValue;

use super::ssrf::{Guard, GuardedResolver, Refused};
use crate::config::DeliveryConfig;
use crate::delivery::{ClaimedDelivery, Completion, NextState};

/// At most this much of a response body is kept.
pub const RESPONSE_CAPTURE_BYTES: usize = 4096;

/// How an attempt ended, for logs and metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// 2xx.
    Sent,
    /// Failed; another attempt is scheduled.
    Retry,
    /// Failed for the last time (or 410), whatever the failure: the delivery is dead-lettered.
    DeadLetter,
    /// The SSRF guard refused the destination; another attempt is scheduled.
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

/// What came back from an attempt, coarsely, for metrics: a status class or why there was no
/// response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResponseClass {
    /// An HTTP response; the status code divided by 100 (1 to 5; anything else is 0).
    Status(u8),
    /// The response (or the connection) did not come in time.
    Timeout,
    /// The connection could not be made (refused, reset, DNS, TLS).
    ConnectError,
    /// The SSRF guard refused the destination; nothing was sent.
    Refused,
    /// Anything else: an invalid URL, a stored payload that is not JSON, a broken request.
    RequestError,
}

impl ResponseClass {
    /// The class of an HTTP status code.
    pub fn of_status(code: u16) -> Self {
        Self::Status(if (100..600).contains(&code) {
            (code / 100) as u8
        } else {
            0
        })
    }

    /// Lower-case label: `2xx`…`5xx`, `timeout`, `connect_error`, `refused`, `request_error`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Status(1) => "1xx",
            Self::Status(2) => "2xx",
            Self::Status(3) => "3xx",
            Self::Status(4) => "4xx",
            Self::Status(5) => "5xx",
            Self::Status(_) => "other",
            Self::Timeout => "timeout",
            Self::ConnectError => "connect_error",
            Self::Refused => "refused",
            Self::RequestError => "request_error",
        }
    }
}

/// One attempt, made: what to record, and how it ended for logs and metrics.
#[derive(Clone, Debug)]
pub struct Attempted {
    /// What the store records.
    pub completion: Completion,
    /// How the attempt ended.
    pub outcome: Outcome,
    /// What came back.
    pub class: ResponseClass,
}

/// Sends deliveries. Holds one HTTP client per distinct connect timeout (reqwest sets the
/// connect timeout per client), all sharing the SSRF-guarded resolver.
pub struct Sender {
    config: DeliveryConfig,
    guard: Arc<Guard>,
    clients: Mutex<HashMap<Duration, reqwest::Client>>,
    user_agent: String,
}

impl Sender {
    /// A sender with the process-wide delivery settings.
    pub fn new(config: DeliveryConfig) -> Self {
        let guard = Arc::new(Guard::new(config.allowed_networks.clone()));
        Self {
            config,
            guard,
            clients: Mutex::new(HashMap::new()),
            user_agent: format!("kurir/{}", env!("CARGO_PKG_VERSION")),
        }
    }

    fn client(&self, connect_timeout: Duration) -> Result<reqwest::Client, reqwest::Error> {
        let mut clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = clients.get(&connect_timeout) {
            return Ok(c.clone());
        }
        let client = reqwest::Client::builder()
            .connect_timeout(connect_timeout)
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .tcp_nodelay(true)
            .pool_max_idle_per_host(64)
            .dns_resolver(Arc::new(GuardedResolver::new(self.guard.clone())))
            .build()?;
        clients.insert(connect_timeout, client.clone());
        Ok(client)
    }

    /// Makes one attempt and decides what happens next. Never fails: every problem becomes a
    /// recorded attempt.
    pub async fn attempt(&self, d: &ClaimedDelivery) -> Attempted {
        let started_at = crate::store::now_millis();
        let clock = Instant::now();
        let result = self.send(d, started_at).await;
        let duration_ms = clock.elapsed().as_millis() as i64;
        let policy = d.endpoint.overrides.retry_policy(&self.config.retry);
        let (status_code, error, response_body, outcome, class) = match result {
            Ok(resp) => {
                let o = classify_status(resp.status, resp.retry_after);
                let class = ResponseClass::of_status(resp.status);
                (Some(resp.status), None, Some(resp.body), o, class)
            }
            Err(SendError::Refused(r)) => (
                None,
                Some(r.to_string()),
                None,
                AttemptOutcome::Failed,
                ResponseClass::Refused,
            ),
            Err(SendError::Http(class, e)) => (None, Some(e), None, AttemptOutcome::Failed, class),
        };
        let (next, label) = match (status_code, policy.next(d.attempt, &outcome, Utc::now())) {
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
    ) -> Result<Response, SendError> {
        let url = reqwest::Url::parse(&d.endpoint.url)
            .map_err(|e| SendError::request(format!("invalid endpoint URL: {e}")))?;
        self.guard.check_url(&url).map_err(SendError::Refused)?;
        let body = envelope_body(d)?;
        let secrets = d.endpoint.signing_secrets(at);
        let headers = kurir_core::sign::signature_headers(
            &d.event.event_id,
            &d.event.event_type,
            &secrets,
            at,
            &body,
        );
        let o = &d.endpoint.overrides;
        let connect_timeout = o
            .connect_timeout_ms
            .map_or(self.config.connect_timeout, |ms| {
                Duration::from_millis(ms.into())
            });
        let request_timeout = o
            .request_timeout_ms
            .map_or(self.config.request_timeout, |ms| {
                Duration::from_millis(ms.into())
            });
        let client = self
            .client(connect_timeout)
            .map_err(|e| SendError::request(error_chain(&e)))?;
        let mut request = client
            .post(url)
            .timeout(request_timeout)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(reqwest::header::USER_AGENT, &self.user_agent);
        for (name, value) in headers {
            request = request.header(name, value);
        }
        let mut response = request
            .body(body)
            .send()
            .await
            .map_err(SendError::from_reqwest)?;
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| kurir_core::retry::parse_retry_after(v, Utc::now()));
        let mut captured = Vec::new();
        // A body that stops mid-way or times out still leaves the status: keep what arrived.
        while captured.len() < RESPONSE_CAPTURE_BYTES {
            match response.chunk().await {
                Ok(Some(chunk)) => captured.extend_from_slice(&chunk),
                _ => break,
            }
        }
        captured.truncate(RESPONSE_CAPTURE_BYTES);
        Ok(Response {
            status,
            retry_after,
            body: String::from_utf8_lossy(&captured).into_owned(),
        })
    }
}

struct Response {
    status: u16,
    retry_after: Option<Duration>,
    body: String,
}

enum SendError {
    Refused(Refused),
    Http(ResponseClass, String),
}

impl SendError {
    fn request(message: String) -> Self {
        Self::Http(ResponseClass::RequestError, message)
    }

    fn from_reqwest(e: reqwest::Error) -> Self {
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
        while let Some(s) = source {
            if let Some(r) = s.downcast_ref::<Refused>() {
                return Self::Refused(r.clone());
            }
            source = s.source();
        }
        let (class, kind) = if e.is_timeout() {
            (ResponseClass::Timeout, "timeout")
        } else if e.is_connect() {
            (ResponseClass::ConnectError, "connect error")
        } else {
            (ResponseClass::RequestError, "request error")
        };
        Self::Http(class, format!("{kind}: {}", error_chain(&e.without_url())))
    }
}

/// The error and its sources, joined with ": " (reqwest's own message alone is too terse).
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![e.to_string()];
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = s.source();
    }
    parts.join(": ")
}

fn envelope_body(d: &ClaimedDelivery) -> Result<Vec<u8>, SendError> {
    let data: &RawValue = serde_json::from_str(&d.event.payload)
        .map_err(|e| SendError::request(format!("stored payload is not JSON: {e}")))?;
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
