//! The HTTP client kurir POSTs webhooks with: to endpoints (the dispatcher) and to forward URLs
//! (the inbox gateway). Every address connected to passes the SSRF guard, redirects are not
//! followed, no proxy is used, and at most the first [`RESPONSE_CAPTURE_BYTES`] of a response
//! body are kept.
//!
//! The two timeouts are separate ([`Timeouts`]). reqwest's own per-request timeout runs from
//! before connecting to the end of the body, so it is not used: the request body reports when
//! hyper first reads it (`Signalled`), which happens once a connection (a new one, or one
//! from the pool) is there and the request is being written. Until then the connect timeout
//! runs; from then, the response timeout.
//!
//! This module owns the wire mechanics only. What to send (body, signature headers) and what an
//! answer means for the retry schedule are its callers' business.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use chrono::Utc;
use http_body::{Frame, SizeHint};
use ipnet::IpNet;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::ssrf::{Guard, GuardedResolver, Refused};
use crate::delivery::WireText;

/// At most this much of a response body is kept.
pub const RESPONSE_CAPTURE_BYTES: usize = 4096;

/// The time allowed to connect, and then for the response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// Until a connection is there to send the request on: name resolution, TCP, TLS.
    pub connect: Duration,
    /// From sending the request to the end of the response: its headers and the captured
    /// body. A body still arriving then is cut; the status stands.
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
        let (started, sending) = oneshot::channel();
        let body = Signalled {
            body: Some(Bytes::from(body)),
            started: Some(started),
        };
        let mut request = client
            .post(url)
            .header(reqwest::header::USER_AGENT, &self.user_agent);
        for (name, value) in headers {
            request = request.header(*name, value);
        }
        let send = request.body(reqwest::Body::wrap(body)).send();
        let (response, deadline) = exchange(send, sending, timeouts).await?;
        Ok(capture(response, deadline).await)
    }
}

/// Runs `send` within `timeouts`: the connect timeout until `sending` reports the request going
/// out, the response timeout from then until the headers; returns the response and the
/// instant the response timeout ends (the captured body must be in by then).
async fn exchange(
    send: impl std::future::Future<Output = reqwest::Result<reqwest::Response>>,
    sending: oneshot::Receiver<()>,
    timeouts: Timeouts,
) -> Result<(reqwest::Response, Instant), PostError> {
    tokio::pin!(send);
    let connecting = async {
        tokio::select! {
            biased;
            done = &mut send => Some(done),
            // The body dropped unread: the request failed, which `send` reports.
            Ok(()) = sending => None,
        }
    };
    let done = match tokio::time::timeout(timeouts.connect, connecting).await {
        Ok(done) => done,
        Err(_) => {
            let connect = timeouts.connect;
            return Err(PostError::Timeout(
                format!("timeout: not connected within the connect timeout of {connect:?}").into(),
            ));
        }
    };
    let deadline = Instant::now() + timeouts.response;
    let done = match done {
        Some(done) => done,
        None => tokio::time::timeout_at(deadline, send).await.map_err(|_| {
            let response = timeouts.response;
            PostError::Timeout(
                format!("timeout: no response within the response timeout of {response:?}").into(),
            )
        })?,
    };
    Ok((done.map_err(PostError::from_reqwest)?, deadline))
}

/// The status, `Retry-After` and first bytes of `response`, read until `deadline`.
async fn capture(mut response: reqwest::Response, deadline: Instant) -> Response {
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| kurir_core::retry::parse_retry_after(v, Utc::now()));
    let mut captured = Vec::new();
    // A body that stops mid-way or outlasts the response timeout still leaves the status: keep
    // what arrived.
    while captured.len() < RESPONSE_CAPTURE_BYTES {
        match tokio::time::timeout_at(deadline, response.chunk()).await {
            Ok(Ok(Some(chunk))) => captured.extend_from_slice(&chunk),
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

/// A request body that reports, once, when it is first read: the connection is there and the
/// request is being written.
struct Signalled {
    body: Option<Bytes>,
    started: Option<oneshot::Sender<()>>,
}

impl http_body::Body for Signalled {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if let Some(started) = self.started.take() {
            let _ = started.send(());
        }
        Poll::Ready(self.body.take().map(|b| Ok(Frame::data(b))))
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        // Exact, so the request carries Content-Length rather than a chunked body.
        SizeHint::with_exact(self.body.as_ref().map_or(0, |b| b.len() as u64))
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
