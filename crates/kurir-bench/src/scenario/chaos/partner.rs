//! The partners of `chaos` and `noisy`: one loopback server whose path `/p/{k}` is partner `k`,
//! each with a [`Shape`], recording every delivery it answered `200` (event, attempt, when).
//! It can refuse connections for a while (its listener closed, its connections cut) and come
//! back on the same port.
//!
//! Which requests fail, or answer slowly, is decided by a hash of the event, the attempt and the
//! partner rather than by a random generator: the same run makes the same choices.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpSocket};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::clock::now_ns;

/// How a partner answers.
#[derive(Clone, Copy, Debug)]
pub enum Shape {
    /// `200` at once.
    Healthy,
    /// `500` to this percentage of requests, at random; `200` to the rest.
    Failing(u64),
    /// `200` after `delay` to this percentage of requests; at once to the rest.
    Slow(u64, Duration),
}

/// What one partner answered `200`: per event number, the `delivery_attempt` and arrival time
/// of each such answer.
#[derive(Default)]
pub struct Answered {
    by_event: HashMap<u64, Vec<(u32, u64)>>,
    /// Requests answered anything (`200`, `500`).
    pub requests: u64,
    /// When the first request arrived.
    pub first_request_ns: Option<u64>,
}

impl Answered {
    /// Answers per event.
    pub fn by_event(&self) -> &HashMap<u64, Vec<(u32, u64)>> {
        &self.by_event
    }
}

type Book = Arc<Vec<Mutex<Answered>>>;

/// The running partners.
pub struct Partners {
    addr: SocketAddr,
    shapes: Arc<Vec<Shape>>,
    book: Book,
    life: Mutex<CancellationToken>,
}

impl Partners {
    /// Starts partners `0..shapes.len()` on a loopback port.
    pub async fn start(shapes: Vec<Shape>) -> anyhow::Result<Self> {
        let book: Book = Arc::new(shapes.iter().map(|_| Mutex::default()).collect());
        let listener = bind("127.0.0.1:0".parse()?)?;
        let addr = listener.local_addr()?;
        let this = Self {
            addr,
            shapes: Arc::new(shapes),
            book,
            life: Mutex::new(CancellationToken::new()),
        };
        this.serve(listener);
        Ok(this)
    }

    /// The URL of partner `k`.
    pub fn url(&self, k: usize) -> String {
        format!("http://{}/p/{k}", self.addr)
    }

    /// Closes the listener and cuts every connection: connections are refused until
    /// [`Partners::resume`].
    pub fn refuse(&self) {
        self.life.lock().unwrap().cancel();
    }

    /// Listens again on the same port.
    pub async fn resume(&self) -> anyhow::Result<()> {
        // The old listener closes as its task ends; the port may take a moment to be free.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let listener = loop {
            match bind(self.addr) {
                Ok(l) => break l,
                Err(e) if std::time::Instant::now() > deadline => return Err(e.into()),
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        };
        *self.life.lock().unwrap() = CancellationToken::new();
        self.serve(listener);
        Ok(())
    }

    /// Stops for good.
    pub fn stop(&self) {
        self.refuse();
    }

    /// Runs `f` on what partner `k` answered.
    pub fn answered<T>(&self, k: usize, f: impl FnOnce(&Answered) -> T) -> T {
        f(&self.book[k].lock().unwrap())
    }

    /// Deliveries partner `k` answered `200` at least once.
    pub fn delivered(&self, k: usize) -> usize {
        self.answered(k, |a| a.by_event.len())
    }

    fn serve(&self, listener: TcpListener) {
        let life = self.life.lock().unwrap().clone();
        tokio::spawn(accept(
            listener,
            Arc::clone(&self.shapes),
            Arc::clone(&self.book),
            life,
        ));
    }
}

impl Drop for Partners {
    fn drop(&mut self) {
        self.refuse();
    }
}

fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = TcpSocket::new_v4()?;
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(1024)
}

async fn accept(
    listener: TcpListener,
    shapes: Arc<Vec<Shape>>,
    book: Book,
    life: CancellationToken,
) {
    // Dropping the set when the life ends cuts every connection, answers in progress included.
    let mut connections = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            () = life.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let Ok((stream, _)) = accepted else { continue };
        let _ = stream.set_nodelay(true);
        let (shapes, book) = (Arc::clone(&shapes), Arc::clone(&book));
        connections.spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                answer(Arc::clone(&shapes), Arc::clone(&book), req)
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
        while connections.try_join_next().is_some() {}
    }
}

async fn answer(
    shapes: Arc<Vec<Shape>>,
    book: Book,
    req: Request<Incoming>,
) -> Result<Response<Empty<Bytes>>, Infallible> {
    let event = req
        .headers()
        .get("x-webhook-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("ev-"))
        .and_then(|v| v.parse::<u64>().ok());
    let partner = req
        .uri()
        .path()
        .strip_prefix("/p/")
        .and_then(|k| k.parse::<usize>().ok())
        .filter(|k| *k < shapes.len());
    let body = req.into_body().collect().await.map(|b| b.to_bytes());
    let (Some(n), Some(k), Ok(body)) = (event, partner, body) else {
        return Ok(status(StatusCode::BAD_REQUEST));
    };
    let attempt = delivery_attempt(&body);
    let roll = roll(n, attempt, k);
    book[k]
        .lock()
        .unwrap()
        .first_request_ns
        .get_or_insert_with(now_ns);
    match shapes[k] {
        Shape::Failing(percent) if roll < percent => {
            book[k].lock().unwrap().requests += 1;
            return Ok(status(StatusCode::INTERNAL_SERVER_ERROR));
        }
        Shape::Slow(percent, delay) if roll < percent => tokio::time::sleep(delay).await,
        _ => {}
    }
    let mut answered = book[k].lock().unwrap();
    answered.requests += 1;
    answered
        .by_event
        .entry(n)
        .or_default()
        .push((attempt, now_ns()));
    Ok(status(StatusCode::OK))
}

fn status(code: StatusCode) -> Response<Empty<Bytes>> {
    let mut response = Response::new(Empty::new());
    *response.status_mut() = code;
    response
}

/// The body's `delivery_attempt` (0 if it has none).
fn delivery_attempt(body: &[u8]) -> u32 {
    let text = String::from_utf8_lossy(body);
    text.split_once(r#""delivery_attempt":"#)
        .and_then(|(_, rest)| {
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        })
        .unwrap_or(0)
}

/// A number in `0..100` fixed by the event, the attempt and the partner (splitmix64).
fn roll(n: u64, attempt: u32, k: usize) -> u64 {
    let mut z = n
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(u64::from(attempt) << 32)
        .wrapping_add(k as u64);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (z ^ (z >> 31)) % 100
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_share_fails_about_that_share() {
        let failed = (0..10_000u64).filter(|n| roll(*n, 1, 1) < 30).count();
        assert!((2_700..3_300).contains(&failed), "{failed}");
        assert_eq!(
            delivery_attempt(br#"{"delivery_attempt":12,"data":{}}"#),
            12
        );
    }
}
