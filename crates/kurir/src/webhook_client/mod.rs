//! The HTTP client kurir POSTs webhooks with: to endpoints (the dispatcher) and to forward URLs
//! (the inbox gateway). Every address connected to passes the SSRF guard, redirects are not
//! followed, no proxy is used, and at most the first [`RESPONSE_CAPTURE_BYTES`] of a response
//! body are kept. The connections themselves are [`transport`]'s.
//!
//! The two timeouts are separate ([`Timeouts`]): the request body reports when hyper first reads
//! it ([`transport::Signalled`]), which happens once a connection (a new one, or one from the
//! pool) is there and the request is being written. Until then the connect timeout runs; from
//! then, the response timeout, to the end of the captured body. Both count the request's own
//! time, not a pause of the whole process ([`crate::pauses`]): an answer that came in while the
//! process was frozen is read, not timed out.
//!
//! This module owns the wire mechanics only. What to send (body, signature headers) and what an
//! answer means for the retry schedule are its callers' business.

pub mod ssrf;
pub mod transport;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use ipnet::IpNet;
use kurir_core::Clock;
use tokio::sync::oneshot;

use crate::delivery::WireText;
use crate::pauses::OwnDeadline;
use ssrf::{Guard, GuardedResolver, Refused};
use transport::{HttpClient, Signalled};

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

impl Response {
    /// What a non-2xx answer is recorded as (see [`answered`]).
    pub fn as_failure(&self) -> WireText {
        answered(self.status, self.body.as_str())
    }
}

/// The most characters of a response body kept in an answer's error text.
const ANSWER_PREVIEW_CHARS: usize = 120;

/// `HTTP 500`, then the start of the body on one line (`HTTP 500: upstream down`): the error
/// text of an answer that was not a success, so a list's one "last error" column says what the
/// receiver answered. The whole captured body stays in the attempt's `response_body`.
pub fn answered(status: u16, body: &str) -> WireText {
    let one_line = body.split_whitespace().collect::<Vec<_>>().join(" ");
    let start: String = one_line.chars().take(ANSWER_PREVIEW_CHARS).collect();
    if start.is_empty() {
        WireText::from(format!("HTTP {status}"))
    } else {
        WireText::from(format!("HTTP {status}: {start}"))
    }
}

/// Why no response came back. Each message says which kind of failure it was.
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

/// POSTs with the process's delivery settings. Holds one client per distinct connect timeout
/// (a connector has one), all sharing the SSRF-guarded resolver.
pub struct WebhookClient {
    guard: Arc<Guard>,
    resolver: Arc<GuardedResolver>,
    clients: Mutex<HashMap<Duration, HttpClient>>,
    user_agent: String,
    max_idle_per_host: usize,
    /// What a `Retry-After` date is taken relative to.
    clock: Clock,
}

impl WebhookClient {
    /// A client that refuses restricted addresses outside `allowed_networks` and keeps up to
    /// `max_concurrency` idle connections per host: as many as the process may use at once, so
    /// connections that go idle together (a lane waiting for its next claim) are kept, not
    /// closed and opened again. At 64, ten endpoints on one host at 160 requests in flight put
    /// 11 % of kurir's samples under the client's connect path, the kernel's handshakes aside
    /// (`perf` with DWARF call graphs, BENCHMARKS.md).
    pub fn new(allowed_networks: Vec<IpNet>, max_concurrency: usize) -> Self {
        let guard = Arc::new(Guard::new(allowed_networks));
        Self {
            resolver: Arc::new(GuardedResolver::new(guard.clone())),
            guard,
            clients: Mutex::new(HashMap::new()),
            user_agent: format!("kurir/{}", env!("CARGO_PKG_VERSION")),
            max_idle_per_host: max_concurrency.max(1),
            clock: Clock::system(),
        }
    }

    /// This client reading a `Retry-After` date relative to `clock` (the store's in kurir: the
    /// partner's date is compared with the time kurir shares, see `crate::clock`).
    #[must_use]
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    fn client(&self, connect_timeout: Duration) -> HttpClient {
        let mut clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        clients
            .entry(connect_timeout)
            .or_insert_with(|| {
                transport::client(
                    self.resolver.clone(),
                    connect_timeout,
                    self.max_idle_per_host,
                )
            })
            .clone()
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
        let (started, sending) = oneshot::channel();
        let request = self.request(url, headers, Signalled::new(Bytes::from(body), started))?;
        let send = self.client(timeouts.connect).request(request);
        let (response, deadline) = exchange(send, sending, timeouts).await?;
        Ok(capture(response, deadline, &self.clock).await)
    }

    /// The request: credentials in the URL become a Basic `Authorization` header, as browsers
    /// and curl send them.
    fn request(
        &self,
        mut url: reqwest::Url,
        headers: &[(&'static str, String)],
        body: Signalled,
    ) -> Result<http::Request<Signalled>, PostError> {
        let basic = transport::basic_auth(&mut url);
        // The headers reqwest sent by default, so subscribers see what they saw before.
        let mut request = http::Request::post(url.as_str())
            .header(http::header::USER_AGENT, &self.user_agent)
            .header(http::header::ACCEPT, "*/*");
        if let Some(credentials) = basic {
            request = request.header(http::header::AUTHORIZATION, credentials);
        }
        for (name, value) in headers {
            request = request.header(*name, value);
        }
        request
            .body(body)
            .map_err(|e| PostError::Request(format!("invalid request: {e}").into()))
    }
}

/// Runs `send` within `timeouts`: the connect timeout until `sending` reports the request going
/// out, the response timeout from then until the headers; returns the response and the
/// response timeout's deadline (the captured body must be in by then).
async fn exchange(
    send: impl std::future::Future<
        Output = Result<http::Response<Incoming>, hyper_util::client::legacy::Error>,
    >,
    sending: oneshot::Receiver<()>,
    timeouts: Timeouts,
) -> Result<(http::Response<Incoming>, OwnDeadline), PostError> {
    tokio::pin!(send);
    let connecting = async {
        tokio::select! {
            biased;
            done = &mut send => Some(done),
            // The body dropped unread: the request failed, which `send` reports.
            Ok(()) = sending => None,
        }
    };
    let Ok(done) = OwnDeadline::after(timeouts.connect).run(connecting).await else {
        let connect = timeouts.connect;
        return Err(PostError::Timeout(
            format!("timeout: not connected within the connect timeout of {connect:?}").into(),
        ));
    };
    let deadline = OwnDeadline::after(timeouts.response);
    let done = match done {
        Some(done) => done,
        None => deadline.run(send).await.map_err(|_| {
            let response = timeouts.response;
            PostError::Timeout(
                format!("timeout: no response within the response timeout of {response:?}").into(),
            )
        })?,
    };
    Ok((done.map_err(PostError::from_client)?, deadline))
}

/// The status, `Retry-After` and first bytes of `response`, reading no later than `deadline`.
async fn capture(
    response: http::Response<Incoming>,
    deadline: OwnDeadline,
    clock: &Clock,
) -> Response {
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get(http::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| kurir_core::retry::parse_retry_after(v, clock.now()));
    let mut body = response.into_body();
    let mut captured = Vec::new();
    // A body that stops mid-way or times out still leaves the status: keep what arrived.
    while captured.len() < RESPONSE_CAPTURE_BYTES {
        match deadline.run(body.frame()).await {
            Ok(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    captured.extend_from_slice(data);
                }
            }
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
    fn from_client(e: hyper_util::client::legacy::Error) -> Self {
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
        let mut timed_out = false;
        while let Some(s) = source {
            if let Some(r) = s.downcast_ref::<Refused>() {
                return Self::Refused(r.clone());
            }
            timed_out |= s
                .downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut);
            source = s.source();
        }
        let chain = error_chain(&e);
        if timed_out {
            Self::Timeout(format!("timeout: {chain}").into())
        } else if e.is_connect() {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_reads_its_status_then_the_start_of_its_body_on_one_line() {
        assert_eq!(answered(500, "").as_str(), "HTTP 500");
        assert_eq!(answered(503, " \n ").as_str(), "HTTP 503");
        assert_eq!(
            answered(500, "upstream\n  down\t again").as_str(),
            "HTTP 500: upstream down again"
        );
        let long = "é".repeat(1000);
        let cut = answered(502, &long);
        assert_eq!(cut.as_str().chars().count(), "HTTP 502: ".len() + 120);
    }
}
