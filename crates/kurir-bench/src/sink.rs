//! The built-in HTTP sink: a loopback server that answers `200` as fast as it can and records,
//! per delivery, when it arrived.
//!
//! Paths: `/e/{k}` is endpoint `k` (fast), `/slow/{k}` an endpoint answering after
//! [`SLOW_ANSWER`], `/d/{ms}/{k}` endpoint `k` answering after `ms` milliseconds (recorded like
//! `/e/{k}`), `/never/{k}` an endpoint that should get nothing (a stray), `/raw` only counts (the ceiling's raw POSTs). The event is named by the
//! `x-webhook-event-id` header kurir sends, `ev-<n>`, so recording is an index into an array
//! rather than a map lookup.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::clock::now_ns;

/// How long the slow endpoint of the isolation scenario takes to answer: past kurir's default
/// 5 s response timeout.
pub const SLOW_ANSWER: Duration = Duration::from_secs(10);

/// Event number `n` as an event id.
pub fn event_id(n: u64) -> String {
    format!("ev-{n}")
}

/// Commit and arrival times of a range of events to a fixed number of endpoints.
///
/// Times are nanoseconds on [`now_ns`]'s clock plus one, so `0` means "not yet".
pub struct Recorder {
    base: u64,
    events: usize,
    endpoints: usize,
    commits: Vec<AtomicU64>,
    arrivals: Vec<AtomicU64>,
    received: AtomicU64,
    duplicates: AtomicU64,
    stray: AtomicU64,
    slow: AtomicU64,
    raw: AtomicU64,
}

impl Recorder {
    /// Room for events `base .. base + events`, each to `endpoints` endpoints.
    pub fn new(base: u64, events: usize, endpoints: usize) -> Arc<Self> {
        let zeros = |n: usize| (0..n).map(|_| AtomicU64::new(0)).collect();
        Arc::new(Self {
            base,
            events,
            endpoints,
            commits: zeros(events),
            arrivals: zeros(events * endpoints),
            received: AtomicU64::new(0),
            duplicates: AtomicU64::new(0),
            stray: AtomicU64::new(0),
            slow: AtomicU64::new(0),
            raw: AtomicU64::new(0),
        })
    }

    /// Notes that event `n` committed at `at_ns`.
    pub fn committed(&self, n: u64, at_ns: u64) {
        if let Some(slot) = n
            .checked_sub(self.base)
            .and_then(|i| self.commits.get(i as usize))
        {
            slot.store(at_ns + 1, Ordering::Relaxed);
        }
    }

    fn arrived(&self, n: u64, endpoint: usize, at_ns: u64) {
        let slot = n
            .checked_sub(self.base)
            .filter(|i| (*i as usize) < self.events && endpoint < self.endpoints)
            .and_then(|i| self.arrivals.get(i as usize * self.endpoints + endpoint));
        match slot {
            Some(slot) => {
                if slot
                    .compare_exchange(0, at_ns + 1, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
                {
                    self.received.fetch_add(1, Ordering::Relaxed);
                } else {
                    self.duplicates.fetch_add(1, Ordering::Relaxed);
                }
            }
            None => {
                self.stray.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// First recorded deliveries (duplicates not counted).
    pub fn received(&self) -> u64 {
        self.received.load(Ordering::Relaxed)
    }

    /// Deliveries that arrived a second time (at-least-once at work).
    pub fn duplicates(&self) -> u64 {
        self.duplicates.load(Ordering::Relaxed)
    }

    /// Requests to the slow endpoint.
    pub fn slow_requests(&self) -> u64 {
        self.slow.load(Ordering::Relaxed)
    }

    /// Requests to `/raw`.
    pub fn raw_requests(&self) -> u64 {
        self.raw.load(Ordering::Relaxed)
    }

    /// Requests naming an unknown event or endpoint.
    pub fn stray(&self) -> u64 {
        self.stray.load(Ordering::Relaxed)
    }

    /// Commit time of event `base + i`, if committed.
    pub fn commit_of(&self, i: usize) -> Option<u64> {
        match self.commits[i].load(Ordering::Relaxed) {
            0 => None,
            t => Some(t - 1),
        }
    }

    /// Arrival time of event `base + i` at `endpoint`, if it arrived.
    pub fn arrival_of(&self, i: usize, endpoint: usize) -> Option<u64> {
        match self.arrivals[i * self.endpoints + endpoint].load(Ordering::Relaxed) {
            0 => None,
            t => Some(t - 1),
        }
    }

    /// Number of events.
    pub fn events(&self) -> usize {
        self.events
    }

    /// The first event number.
    pub fn base(&self) -> u64 {
        self.base
    }
}

/// A running sink; stops when dropped or [`Sink::stop`]ped.
pub struct Sink {
    addr: SocketAddr,
    stop: CancellationToken,
}

impl Sink {
    /// Starts a sink on `127.0.0.1:0` recording into `recorder`.
    pub async fn start(recorder: Arc<Recorder>) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let stop = CancellationToken::new();
        tokio::spawn(accept(listener, recorder, stop.clone()));
        Ok(Self { addr, stop })
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Closes the listener and every connection.
    pub fn stop(&self) {
        self.stop.cancel();
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn accept(listener: TcpListener, recorder: Arc<Recorder>, stop: CancellationToken) {
    // Dropping the set when the sink stops aborts every connection, slow answers included.
    let mut connections = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            _ = stop.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let Ok((stream, _)) = accepted else { continue };
        let _ = stream.set_nodelay(true);
        let recorder = recorder.clone();
        connections.spawn(async move {
            let service = hyper::service::service_fn(move |req| answer(recorder.clone(), req));
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
        // Reap finished connections so the set stays small.
        while connections.try_join_next().is_some() {}
    }
}

async fn answer(
    recorder: Arc<Recorder>,
    req: Request<Incoming>,
) -> Result<Response<Empty<Bytes>>, Infallible> {
    let at = now_ns();
    let event = req
        .headers()
        .get("x-webhook-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("ev-"))
        .and_then(|v| v.parse::<u64>().ok());
    let path = req.uri().path().to_owned();
    // Read the body to the end, as a real subscriber must before answering.
    let _ = req.into_body().collect().await;
    if path == "/raw" {
        recorder.raw.fetch_add(1, Ordering::Relaxed);
    } else if path.starts_with("/slow/") {
        // Counted, never recorded: kurir has given up on the request long before this answers.
        recorder.slow.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(SLOW_ANSWER).await;
    } else if let Some((ms, k)) = delayed(&path) {
        // A partner that takes `ms` to answer, recorded like a fast one once it has.
        tokio::time::sleep(Duration::from_millis(ms)).await;
        match event {
            Some(n) => recorder.arrived(n, k, now_ns()),
            None => {
                recorder.stray.fetch_add(1, Ordering::Relaxed);
            }
        }
    } else {
        match (event, path.strip_prefix("/e/").map(str::parse::<usize>)) {
            (Some(n), Some(Ok(k))) => recorder.arrived(n, k, at),
            _ => {
                recorder.stray.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    Ok(Response::new(Empty::new()))
}

/// The answer time and endpoint of a path `/d/{ms}/{k}`.
fn delayed(path: &str) -> Option<(u64, usize)> {
    let (ms, k) = path.strip_prefix("/d/")?.split_once('/')?;
    Some((ms.parse().ok()?, k.parse().ok()?))
}
