//! The HTTP client kurir POSTs webhooks with: to endpoints (the dispatcher) and to forward URLs
//! (the inbox gateway). Every address connected to passes the SSRF guard, redirects are not
//! followed, no proxy is used, the connect and response timeouts are separate, and at most the
//! first [`RESPONSE_CAPTURE_BYTES`] of a response body are kept.
//!
//! This module owns the wire mechanics only. What to send (body, signature headers) and what an
//! answer means for the retry schedule are its callers' business.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::Utc;
use ipnet::IpNet;

use super::ssrf::{Guard, GuardedResolver, Refused};
use crate::delivery::WireText;

/// At most this much of a response body is kept.
pub const RESPONSE_CAPTURE_BYTES: usize = 4096;

/// The time allowed to connect, and then for the response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// Connecting, TLS included.
    pub connect: Duration,
    /// The whole request once connected, until the response headers.
    pub response: Duration,
}

/// What came back.
#[derive(Clone, Debug)]
pub struct Response {
    /// The HTTP status.
    pub status: u16,
    /// A `Retry-After` header, as a delay from now.
    pub retry_after: Option<Duration>,
    /// The first [`RESPONSE_CAPTURE_BYTES`] of the body, made storable.
    pub body: WireText,
}

/// Why no response came back. Each message says which kind of failure it was; the messages
/// may quote the wire, so they are [`WireText`].
#[derive(Debug, thiserror::Error)]
pub enum PostError {
    /// The SSRF guard refused the destination; nothing was sent.
    #[error(transparent)]
    Refused(Refused),
    /// The response (or the connection) did not come in time.
    #[error("{0}")]
    Timeout(WireText),
    /// The connection could not be made (refused, reset, DNS, TLS).
    #[error("{0}")]
    Connect(WireText),
    /// Anything else: an invalid URL, a broken request or connection.
    #[error("{0}")]
    Request(WireText),
}

/// POSTs with the process's delivery settings. Holds one `reqwest` client per distinct connect
/// timeout (reqwest sets it per client), all sharing the SSRF-guarded resolver.
pub struct WebhookClient {
    guard: Arc<Guard>,
    clients: Mutex<HashMap<Duration, reqwest::Client>>,
    user_agent: String,
    max_idle_per_host: usize,
}

impl WebhookClient {
    /// A client that refuses restricted addresses outside `allowed_networks` and keeps up to
    /// `max_concurrency` idle connections per host: as many as the process may use at once, so
    /// connections that go idle together (a lane waiting for its next claim) are kept, not
    /// closed and opened again. At 64, ten endpoints on one host at 160 requests in flight put
    /// 11 % of kurir's samples under reqwest's connect path, the kernel's handshakes aside
    /// (`perf` with DWARF call graphs, BENCHMARKS.md).
    pub fn new(allowed_networks: Vec<IpNet>, max_concurrency: usize) -> Self {
        Self {
            guard: Arc::new(Guard::new(allowed_networks)),
            clients: Mutex::new(HashMap::new()),
            user_agent: format!("kurir/{}", env!("CARGO_PKG_VERSION")),
            max_idle_per_host: max_concurrency.max(1),
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
            .pool_max_idle_per_host(self.max_idle_per_host)
            .dns_resolver(Arc::new(GuardedResolver::new(self.guard.clone())))
            .build()?;
        clients.insert(connect_timeout, client.clone());
        Ok(client)
    }

    /// POSTs `body` to `url` with `headers` (and kurir's `User-Agent`). Any status is a
    /// [`Response`]; only a request that got no status is an error.
    pub async fn post(
        &self,
        url: &str,
        headers: &[(&'static str, String)],
        body: Vec<u8>,
        timeouts: Timeouts,
    ) -> Result<Response, PostError> {
        let url = reqwest::Url::parse(url)
            .map_err(|e| PostError::Request(format!("invalid URL: {e}").into()))?;
        self.guard.check_url(&url).map_err(PostError::Refused)?;
        let client = self
            .client(timeouts.connect)
            .map_err(|e| PostError::Request(error_chain(&e).into()))?;
        let mut request = client
            .post(url)
            .timeout(timeouts.response)
            .header(reqwest::header::USER_AGENT, &self.user_agent);
        for (name, value) in headers {
            request = request.header(*name, value);
        }
        let response = request
            .body(body)
            .send()
            .await
            .map_err(PostError::from_reqwest)?;
        Ok(capture(response).await)
    }
}

/// The status, `Retry-After` and first bytes of `response`.
async fn capture(mut response: reqwest::Response) -> Response {
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
    Response {
        status,
        retry_after,
        body: WireText::from_bytes(&captured),
    }
}

impl PostError {
    fn from_reqwest(e: reqwest::Error) -> Self {
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
        while let Some(s) = source {
            if let Some(r) = s.downcast_ref::<Refused>() {
                return Self::Refused(r.clone());
            }
            source = s.source();
        }
        let (timeout, connect) = (e.is_timeout(), e.is_connect());
        let chain = error_chain(&e.without_url());
        if timeout {
            Self::Timeout(format!("timeout: {chain}").into())
        } else if connect {
            Self::Connect(format!("connect error: {chain}").into())
        } else {
            Self::Request(format!("request error: {chain}").into())
        }
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
