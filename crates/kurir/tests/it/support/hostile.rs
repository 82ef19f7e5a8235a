//! A hostile HTTP receiver on raw TCP, on 127.0.0.1:0: it reads each request and answers with
//! one [`Shape`] that a broken or malicious endpoint may send, written byte for byte with no HTTP
//! library in between (a library would refuse to write most of them).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// How the receiver answers every request.
#[derive(Clone, Debug)]
pub enum Shape {
    /// `200` announcing and sending a body of this many bytes.
    LongBody(usize),
    /// `200`, chunked, chunk after chunk for as long as the client reads.
    EndlessChunked,
    /// `200` with one header line this many bytes long.
    LongHeader(usize),
    /// `200` with this many headers.
    ManyHeaders(usize),
    /// `100 Continue`, again and again, never a final status.
    InterimFlood,
    /// `307 Temporary Redirect` to this URL.
    Redirect(String),
    /// This status with exactly this body.
    Body(u16, Vec<u8>),
}

/// The receiver; stops when dropped.
pub struct Hostile {
    pub addr: SocketAddr,
    requests: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl Hostile {
    pub async fn start(shape: Shape) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(AtomicUsize::new(0));
        let counted = requests.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, shape.clone(), counted.clone()));
            }
        });
        Self {
            addr,
            requests,
            task,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}/hook", self.addr)
    }

    /// Requests read so far.
    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::Relaxed)
    }
}

impl Drop for Hostile {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Reads one request (head and `Content-Length` body), answers it, and closes the connection.
async fn serve(mut stream: TcpStream, shape: Shape, requests: Arc<AtomicUsize>) {
    if read_request(&mut stream).await.is_none() {
        return;
    }
    requests.fetch_add(1, Ordering::Relaxed);
    // The client hanging up ends the answer: a write error is how an endless shape stops.
    let _ = answer(&mut stream, &shape).await;
}

async fn read_request(stream: &mut TcpStream) -> Option<()> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1024];
    let end = loop {
        let n = stream.read(&mut byte).await.ok()?;
        if n == 0 || head.len() > 1 << 20 {
            return None;
        }
        head.extend_from_slice(&byte[..n]);
        if let Some(i) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let text = String::from_utf8_lossy(&head[..end]).to_ascii_lowercase();
    let length: usize = text
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let mut remaining = length.saturating_sub(head.len() - end);
    while remaining > 0 {
        let n = stream.read(&mut byte).await.ok()?;
        if n == 0 {
            return None;
        }
        remaining = remaining.saturating_sub(n);
    }
    Some(())
}

async fn answer(stream: &mut TcpStream, shape: &Shape) -> std::io::Result<()> {
    let chunk = vec![b'x'; 64 * 1024];
    match shape {
        Shape::LongBody(len) => {
            let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {len}\r\n\r\n");
            stream.write_all(head.as_bytes()).await?;
            let mut left = *len;
            while left > 0 {
                let n = left.min(chunk.len());
                stream.write_all(&chunk[..n]).await?;
                left -= n;
            }
        }
        Shape::EndlessChunked => {
            stream
                .write_all(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
                .await?;
            loop {
                stream.write_all(b"10000\r\n").await?;
                stream.write_all(&chunk).await?;
                stream.write_all(b"\r\n").await?;
            }
        }
        Shape::LongHeader(len) => {
            stream.write_all(b"HTTP/1.1 200 OK\r\nx-long: ").await?;
            let mut left = *len;
            while left > 0 {
                let n = left.min(chunk.len());
                stream.write_all(&chunk[..n]).await?;
                left -= n;
            }
            stream.write_all(b"\r\ncontent-length: 0\r\n\r\n").await?;
        }
        Shape::ManyHeaders(n) => {
            let mut head = String::from("HTTP/1.1 200 OK\r\n");
            for i in 0..*n {
                head.push_str(&format!("x-header-{i}: {i}\r\n"));
            }
            head.push_str("content-length: 0\r\n\r\n");
            stream.write_all(head.as_bytes()).await?;
        }
        Shape::InterimFlood => {
            let many = b"HTTP/1.1 100 Continue\r\n\r\n".repeat(2048);
            loop {
                stream.write_all(&many).await?;
            }
        }
        Shape::Redirect(to) => {
            let head = format!(
                "HTTP/1.1 307 Temporary Redirect\r\nlocation: {to}\r\ncontent-length: 0\r\n\r\n"
            );
            stream.write_all(head.as_bytes()).await?;
        }
        Shape::Body(status, body) => {
            let head = format!(
                "HTTP/1.1 {status} Whatever\r\ncontent-length: {}\r\n\r\n",
                body.len()
            );
            stream.write_all(head.as_bytes()).await?;
            stream.write_all(body).await?;
        }
    }
    stream.shutdown().await
}
