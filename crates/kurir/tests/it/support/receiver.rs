//! A real HTTP receiver on 127.0.0.1:0 that records every request and answers as the test
//! script says: fail the first N, always fail, hold requests open until released, and so on.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use tokio::sync::{Notify, Semaphore};

use super::connections::{Counting, Open};

/// The path of [`Receiver::drain`]'s probe, never recorded.
const DRAIN: &str = "/__drain";

/// One request as it arrived.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub path: String,
    pub headers: HeaderMap,
    pub body: Bytes,
    pub at: Instant,
}

impl Recorded {
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("body is JSON")
    }

    pub fn event_id(&self) -> String {
        self.json()["event_id"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }
}

/// How the receiver answers the n-th request (0-based) to a path.
pub type Script = Arc<dyn Fn(usize, &Recorded) -> Response + Send + Sync>;

#[derive(Default)]
struct Inner {
    requests: Vec<Recorded>,
    open: usize,
    max_open: usize,
}

#[derive(Clone)]
struct Shared {
    inner: Arc<Mutex<Inner>>,
    arrived: Arc<Notify>,
    script: Script,
    /// When set, every request waits for a permit before it is answered.
    gate: Option<Arc<Semaphore>>,
    /// How long the receiver takes to answer, as a partner that does some work would.
    delay: Duration,
    connections: Open,
}

/// The receiver; stops when dropped.
pub struct Receiver {
    pub addr: std::net::SocketAddr,
    shared: Shared,
    _task: tokio::task::JoinHandle<()>,
}

impl Receiver {
    /// Answers 200 to everything.
    pub async fn ok() -> Self {
        Self::scripted(|_, _| StatusCode::OK.into_response()).await
    }

    /// Answers with `script(n, request)`.
    pub async fn scripted(
        script: impl Fn(usize, &Recorded) -> Response + Send + Sync + 'static,
    ) -> Self {
        Self::start(Arc::new(script), None, Duration::ZERO).await
    }

    /// Answers 200 to everything, each after `delay`: a partner that takes its time.
    pub async fn answering_after(delay: Duration) -> Self {
        Self::start(Arc::new(|_, _| StatusCode::OK.into_response()), None, delay).await
    }

    /// Holds every request open until [`Receiver::release`] hands out permits; then answers 200.
    pub async fn holding() -> Self {
        Self::start(
            Arc::new(|_, _| StatusCode::OK.into_response()),
            Some(Arc::new(Semaphore::new(0))),
            Duration::ZERO,
        )
        .await
    }

    /// Holds every request open until [`Receiver::release`] hands out permits; then answers
    /// with `script(n, request)`.
    pub async fn holding_scripted(
        script: impl Fn(usize, &Recorded) -> Response + Send + Sync + 'static,
    ) -> Self {
        Self::start(
            Arc::new(script),
            Some(Arc::new(Semaphore::new(0))),
            Duration::ZERO,
        )
        .await
    }

    async fn start(script: Script, gate: Option<Arc<Semaphore>>, delay: Duration) -> Self {
        let shared = Shared {
            inner: Arc::default(),
            arrived: Arc::new(Notify::new()),
            script,
            gate,
            delay,
            connections: Open::default(),
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let listener = Counting {
            listener,
            open: shared.connections.clone(),
        };
        let app = Router::new().fallback(handle).with_state(shared.clone());
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self {
            addr,
            shared,
            _task: task,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.inner.lock().unwrap().requests.clone()
    }

    /// Requests to one path.
    pub fn requests_to(&self, path: &str) -> Vec<Recorded> {
        self.requests()
            .into_iter()
            .filter(|r| r.path == path)
            .collect()
    }

    /// The most requests ever open at once.
    pub fn max_open(&self) -> usize {
        self.shared.inner.lock().unwrap().max_open
    }

    /// Lets `n` held requests (present or future) be answered.
    pub fn release(&self, n: usize) {
        if let Some(gate) = &self.shared.gate {
            gate.add_permits(n);
        }
    }

    /// Waits until `pred(requests, open)` holds, where `open` is the number of requests held
    /// open right now (or 30 s pass, then panics). `pred` runs under the receiver's lock: it must
    /// not call back into the receiver.
    pub async fn wait_until(&self, what: &str, pred: impl Fn(&[Recorded], usize) -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let notified = self.shared.arrived.notified();
            let done = {
                let inner = self.shared.inner.lock().unwrap();
                pred(&inner.requests, inner.open)
            };
            if done {
                return;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                let n = self.shared.inner.lock().unwrap().requests.len();
                panic!("timed out waiting for {what} ({n} requests received)");
            }
        }
    }

    /// Waits until every request a killed sender had put on the wire has been read and
    /// answered: connections are accepted in the order they were made, so once a probe made now
    /// is answered, the sender's are all accepted; each closes after its last request is read.
    /// Without this, a request still in the socket's buffer when the sender died arrives after
    /// "no request open" held, and looks sent by whoever came next.
    pub async fn drain(&self) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut probe = tokio::net::TcpStream::connect(self.addr).await.unwrap();
        probe
            .write_all(
                format!("GET {DRAIN} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").as_bytes(),
            )
            .await
            .unwrap();
        probe.read_to_end(&mut Vec::new()).await.unwrap();
        drop(probe);
        let open = &self.shared.connections;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let closed = open.closed.notified();
            if open.count.load(Ordering::SeqCst) == 0 && self.shared.inner.lock().unwrap().open == 0
            {
                return;
            }
            let waited = tokio::time::timeout_at(deadline, closed).await;
            assert!(
                waited.is_ok(),
                "timed out waiting for the receiver's connections to close"
            );
        }
    }

    /// Waits for at least `n` requests.
    pub async fn wait_for(&self, n: usize) {
        self.wait_until(&format!("{n} requests"), |r, _| r.len() >= n)
            .await
    }
}

async fn handle(
    State(shared): State<Shared>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if uri.path() == DRAIN {
        return StatusCode::OK.into_response();
    }
    let recorded = Recorded {
        path: uri.path().to_owned(),
        headers,
        body,
        at: Instant::now(),
    };
    let n = {
        let mut inner = shared.inner.lock().unwrap();
        let n = inner
            .requests
            .iter()
            .filter(|r| r.path == recorded.path)
            .count();
        inner.requests.push(recorded.clone());
        inner.open += 1;
        inner.max_open = inner.max_open.max(inner.open);
        n
    };
    shared.arrived.notify_waiters();
    if let Some(gate) = &shared.gate {
        // The permit is consumed: each release answers one request.
        if let Ok(permit) = gate.acquire().await {
            permit.forget();
        }
    }
    if !shared.delay.is_zero() {
        // The partner's own time to answer: this is the time that must pass.
        tokio::time::sleep(shared.delay).await;
    }
    let response = (shared.script)(n, &recorded);
    shared.inner.lock().unwrap().open -= 1;
    shared.arrived.notify_waiters();
    response
}
