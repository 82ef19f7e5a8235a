//! Checks an operator can run on an endpoint before real events depend on it: a warning when its
//! URL names an address the SSRF guard will refuse ([`Probe::url_warning`]), and a signed
//! `kurir.test` event sent at once ([`Probe::send_test`]).
//!
//! The test event goes through the dispatcher's own [`Sender`], so it is built, signed, guarded
//! and timed exactly as a real delivery is. It is not stored: nothing is retried and no delivery
//! row exists; the answer is the attempt's result.

use std::sync::Arc;

use kurir_core::Clock;
use serde::Serialize;
use utoipa::ToSchema;

use crate::config::DeliveryConfig;
use crate::delivery::{ClaimedDelivery, EventSnapshot, Trigger};
use crate::dispatch::deliver::Sender;
use crate::endpoint::Endpoint;
use crate::webhook_client::ssrf::Guard;

/// The event type of a test event.
pub const TEST_EVENT_TYPE: &str = "kurir.test";

/// What a test event's one attempt came to.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct TestResult {
    /// The test event's id (the `webhook-id` the endpoint saw).
    pub event_id: String,
    /// Whether the endpoint answered 2xx.
    pub delivered: bool,
    /// The HTTP status, when a response arrived.
    pub status_code: Option<u16>,
    /// How long the attempt took.
    pub duration_ms: i64,
    /// What went wrong when no response arrived (refused, timeout, connect error).
    pub error: Option<String>,
    /// At most the first 4 KiB of the response body.
    pub response_body: Option<String>,
    /// The request that was sent: the endpoint's own to see, as its signing secret is (it is
    /// never logged).
    pub request: TestRequest,
}

/// The request a test event was sent as.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct TestRequest {
    /// Always `POST`.
    pub method: &'static str,
    /// The endpoint's URL.
    pub url: String,
    /// Every header kurir set, in the order sent: the content type, the seed scheme's
    /// `x-webhook-*` and Standard Webhooks' `webhook-*` ones, signatures included.
    pub headers: Vec<TestHeader>,
    /// The body, as sent.
    pub body: String,
}

/// One header of a [`TestRequest`].
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct TestHeader {
    /// Its name, lower case.
    pub name: String,
    /// Its value.
    pub value: String,
}

/// Sends test events and judges URLs with the process's delivery settings. One per process.
pub struct Probe {
    sender: Sender,
    guard: Guard,
}

impl std::fmt::Debug for Probe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Probe").finish_non_exhaustive()
    }
}

impl Probe {
    /// A probe with `config`'s timeouts and SSRF exemptions, its events stamped by `clock`.
    pub fn new(config: &DeliveryConfig, clock: Clock) -> Arc<Self> {
        Arc::new(Self {
            guard: Guard::new(config.allowed_networks.clone()),
            sender: Sender::new(config.clone(), clock),
        })
    }

    /// A warning when `url`'s host is a literal address the SSRF guard refuses: every delivery
    /// to it would fail. Host names are not resolved here (their addresses may change), so only
    /// literals are judged.
    pub fn url_warning(&self, url: &str) -> Option<String> {
        let parsed = reqwest::Url::parse(url).ok()?;
        self.guard.check_url(&parsed).err().map(|refused| {
            format!(
                "deliveries to this URL will be refused: {} is a {} address; list its network \
                 in KURIR_ALLOWED_NETWORKS if it is meant",
                refused.ip, refused.kind
            )
        })
    }

    /// Sends one signed `kurir.test` event to `endpoint` now, whatever its filter or state.
    pub async fn send_test(&self, endpoint: Endpoint) -> TestResult {
        let event_id = uuid::Uuid::now_v7().to_string();
        let payload = serde_json::json!({
            "test": true,
            "endpoint_id": endpoint.id.as_str(),
            "message": "a test event sent by an operator from kurir",
        });
        let claimed = ClaimedDelivery {
            delivery_id: 0,
            attempt: 1,
            trigger: Trigger::Scheduled,
            event: EventSnapshot {
                event_id: event_id.clone(),
                event_type: TEST_EVENT_TYPE.to_owned(),
                version: 1,
                occurred_at: self.sender.clock().now_millis(),
                aggregate_id: None,
                payload: payload.to_string(),
            },
            endpoint: Arc::new(endpoint),
            // Not leased: nothing else can send a test event, so no deadline binds it.
            lease_deadline: tokio::time::Instant::now() + std::time::Duration::from_secs(3600),
        };
        let c = self.sender.attempt(&claimed).await.completion;
        // Built again for the attempt's time, it is what was sent.
        let (headers, body) =
            crate::dispatch::deliver::request(&claimed, c.started_at).unwrap_or_default();
        let request = TestRequest {
            method: "POST",
            url: claimed.endpoint.url.clone(),
            headers: headers
                .into_iter()
                .map(|(name, value)| TestHeader {
                    name: name.to_owned(),
                    value,
                })
                .collect(),
            body: String::from_utf8_lossy(&body).into_owned(),
        };
        tracing::info!(endpoint_id = %claimed.endpoint.id, event_id = %event_id,
            status_code = c.status_code, duration_ms = c.duration_ms, error = c.error.as_deref(),
            "endpoint test event sent");
        TestResult {
            event_id,
            delivered: c.status_code.is_some_and(|s| (200..300).contains(&s)),
            status_code: c.status_code,
            duration_ms: c.duration_ms,
            error: c.error.map(|t| t.as_str().to_owned()),
            response_body: c.response_body.map(|t| t.as_str().to_owned()),
            request,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal_addresses_the_guard_refuses_are_warned_about() {
        let probe = Probe::new(&DeliveryConfig::default(), Clock::system());
        let warning = probe.url_warning("http://127.0.0.1:9000/hook").unwrap();
        assert!(
            warning.contains("127.0.0.1 is a loopback address"),
            "{warning}"
        );
        assert!(probe.url_warning("http://10.0.0.7/hook").is_some());
        assert!(probe.url_warning("https://partner.example/hook").is_none());
        assert!(probe.url_warning("https://93.184.216.34/hook").is_none());
        let allowed = DeliveryConfig {
            allowed_networks: vec!["127.0.0.0/8".parse().unwrap()],
            ..DeliveryConfig::default()
        };
        assert!(Probe::new(&allowed, Clock::system())
            .url_warning("http://127.0.0.1:9000/hook")
            .is_none());
    }
}
