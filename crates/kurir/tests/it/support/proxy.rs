//! A TCP proxy the test controls, on 127.0.0.1:0, in front of PostgreSQL, MySQL/MariaDB or a
//! receiver: it takes the database (or the receiver) away from a running kurir without touching
//! the server, which other tests share.
//!
//! [`Proxy::cut`] drops every proxied connection and closes the port, so new connections are
//! refused, as when a host goes away; [`Proxy::restore`] opens the same port again. In front of a
//! database ([`Proxy::counting`]) it also counts the statements clients send through it: on
//! PostgreSQL each simple `Query` and each extended-protocol `Execute` message, on MySQL each
//! `COM_QUERY` and `COM_STMT_EXECUTE` command. Those are the statements of the proxied clients
//! only, which a server-wide counter (MariaDB's `Questions`) cannot tell apart from other tests'.
//! It also counts the bytes the server answers with ([`Proxy::bytes_answered`]) and those the
//! clients send ([`Proxy::bytes_sent`]).
//! Clients must not use TLS, or there is nothing to read: [`url_through`] turns it off.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// What the proxy reads of the bytes clients send.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Protocol {
    /// Nothing: it only forwards them.
    Bytes,
    Postgres,
    Mysql,
}

struct Shared {
    target: SocketAddr,
    protocol: Protocol,
    statements: AtomicU64,
    /// Bytes the proxied clients sent to the target.
    sent: AtomicU64,
    /// Bytes the target sent to the proxied clients.
    answered: AtomicU64,
    /// Bumped by `cut`: every connection of an earlier generation is dropped.
    generation: watch::Sender<u64>,
}

/// The proxy; stops (and drops its connections) when dropped.
pub struct Proxy {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    accepting: Mutex<Option<JoinHandle<()>>>,
}

impl Proxy {
    /// A proxy on 127.0.0.1:0 to `target` that forwards bytes only.
    pub async fn start(target: SocketAddr) -> Self {
        Self::open(target, Protocol::Bytes).await
    }

    /// A proxy to the database server `url` names (`postgres://` or `mysql://`) that counts
    /// statements.
    pub async fn counting(url: &str) -> Self {
        let protocol = if is_mysql(url) {
            Protocol::Mysql
        } else {
            Protocol::Postgres
        };
        Self::open(server_addr(url), protocol).await
    }

    async fn open(target: SocketAddr, protocol: Protocol) -> Self {
        let listener = bind("127.0.0.1:0".parse().unwrap());
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared {
            target,
            protocol,
            statements: AtomicU64::new(0),
            sent: AtomicU64::new(0),
            answered: AtomicU64::new(0),
            generation: watch::channel(0).0,
        });
        let accepting = tokio::spawn(accept(listener, shared.clone()));
        Self {
            addr,
            shared,
            accepting: Mutex::new(Some(accepting)),
        }
    }

    /// Statements counted so far ([`Proxy::counting`] proxies only).
    pub fn statements(&self) -> u64 {
        self.shared.statements.load(Ordering::Relaxed)
    }

    /// Bytes the proxied clients have sent to the database (or receiver) so far: what their
    /// statements cost, arguments and all.
    pub fn bytes_sent(&self) -> u64 {
        self.shared.sent.load(Ordering::Relaxed)
    }

    /// Bytes the database (or receiver) has sent to the proxied clients so far: what its
    /// answers cost, rows and all.
    pub fn bytes_answered(&self) -> u64 {
        self.shared.answered.load(Ordering::Relaxed)
    }

    /// Drops every connection and closes the port: connecting is refused until [`Proxy::restore`].
    pub fn cut(&self) {
        if let Some(task) = self.accepting.lock().unwrap().take() {
            task.abort();
        }
        self.shared.generation.send_modify(|g| *g += 1);
    }

    /// Opens the port again, on the same address.
    pub async fn restore(&self) {
        let mut accepting = self.accepting.lock().unwrap();
        if accepting.is_none() {
            let listener = bind(self.addr);
            *accepting = Some(tokio::spawn(accept(listener, self.shared.clone())));
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.cut();
    }
}

/// A listener on `addr` that can be bound again right after it was closed.
fn bind(addr: SocketAddr) -> TcpListener {
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_reuseaddr(true).unwrap();
    socket
        .bind(addr)
        .unwrap_or_else(|e| panic!("proxy cannot bind {addr}: {e}"));
    socket.listen(1024).unwrap()
}

async fn accept(listener: TcpListener, shared: Arc<Shared>) {
    while let Ok((inbound, _)) = listener.accept().await {
        tokio::spawn(pipe(inbound, shared.clone()));
    }
}

/// Carries one connection both ways until either side closes or the proxy is cut.
async fn pipe(inbound: TcpStream, shared: Arc<Shared>) {
    let mut cut = shared.generation.subscribe();
    let Ok(outbound) = TcpStream::connect(shared.target).await else {
        return;
    };
    let _ = (inbound.set_nodelay(true), outbound.set_nodelay(true));
    let (mut from_client, mut to_client) = inbound.into_split();
    let (mut from_server, mut to_server) = outbound.into_split();
    let upstream = async {
        let mut counter = Counter::new(shared.protocol);
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = from_client.read(&mut buf).await?;
            if n == 0 {
                return Ok::<(), std::io::Error>(());
            }
            let found = counter.feed(&buf[..n]);
            shared.statements.fetch_add(found, Ordering::Relaxed);
            shared.sent.fetch_add(n as u64, Ordering::Relaxed);
            to_server.write_all(&buf[..n]).await?;
        }
    };
    let downstream = async {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = from_server.read(&mut buf).await?;
            if n == 0 {
                return Ok::<(), std::io::Error>(());
            }
            shared.answered.fetch_add(n as u64, Ordering::Relaxed);
            to_client.write_all(&buf[..n]).await?;
        }
    };
    // Either side closing ends both: no database protocol nor HTTP/1.1 needs half-open connections.
    tokio::select! {
        _ = cut.changed() => {}
        _ = upstream => {}
        _ = downstream => {}
    }
}

/// Counts the statements in what a client sends, by protocol.
enum Counter {
    Bytes,
    Postgres(PgCounter),
    Mysql(MyCounter),
}

impl Counter {
    fn new(protocol: Protocol) -> Self {
        match protocol {
            Protocol::Bytes => Self::Bytes,
            Protocol::Postgres => Self::Postgres(PgCounter::default()),
            Protocol::Mysql => Self::Mysql(MyCounter::default()),
        }
    }

    fn feed(&mut self, bytes: &[u8]) -> u64 {
        match self {
            Self::Bytes => 0,
            Self::Postgres(c) => c.feed(bytes),
            Self::Mysql(c) => c.feed(bytes),
        }
    }
}

/// Reads the frontend side of the PostgreSQL protocol and counts `Query` (`Q`) and `Execute`
/// (`E`) messages. The first messages (SSL or GSS requests, then the startup message) carry no
/// type byte.
#[derive(Default)]
struct PgCounter {
    started: bool,
    buf: Vec<u8>,
}

impl PgCounter {
    fn feed(&mut self, bytes: &[u8]) -> u64 {
        self.buf.extend_from_slice(bytes);
        let mut found = 0;
        let mut at = 0;
        loop {
            let rest = &self.buf[at..];
            let (header, kind) = if self.started {
                (5, rest.first().copied())
            } else {
                (4, None)
            };
            if rest.len() < header {
                break;
            }
            let len_at = header - 4;
            let len = u32::from_be_bytes(rest[len_at..header].try_into().unwrap()) as usize;
            let total = len_at + len;
            if rest.len() < total {
                break;
            }
            match kind {
                Some(b'Q' | b'E') => found += 1,
                Some(_) => {}
                None => {
                    // SSLRequest and GSSENCRequest are followed by the startup message.
                    let code = u32::from_be_bytes(rest[4..8].try_into().unwrap());
                    self.started = !matches!(code, 80_877_103 | 80_877_104);
                }
            }
            at += total;
        }
        self.buf.drain(..at);
        found
    }
}

/// Reads the client side of the MySQL protocol and counts `COM_QUERY` (0x03) and
/// `COM_STMT_EXECUTE` (0x17) commands. Every packet is a 3-byte length and a sequence number; a
/// command is the first packet of its exchange (sequence 0), while the handshake's client packets
/// answer the server's greeting (sequence 1 and on), so they never look like commands.
#[derive(Default)]
struct MyCounter {
    buf: Vec<u8>,
}

impl MyCounter {
    fn feed(&mut self, bytes: &[u8]) -> u64 {
        self.buf.extend_from_slice(bytes);
        let mut found = 0;
        let mut at = 0;
        while let Some(header) = self.buf.get(at..at + 4) {
            let len = u32::from_le_bytes([header[0], header[1], header[2], 0]) as usize;
            let sequence = header[3];
            let Some(payload) = self.buf.get(at + 4..at + 4 + len) else {
                break;
            };
            if sequence == 0 && matches!(payload.first(), Some(0x03 | 0x17)) {
                found += 1;
            }
            at += 4 + len;
        }
        self.buf.drain(..at);
        found
    }
}

fn is_mysql(url: &str) -> bool {
    url.starts_with("mysql:") || url.starts_with("mariadb:")
}

/// The address a `postgres://` or `mysql://` URL points at.
pub fn server_addr(url: &str) -> SocketAddr {
    let default_port = if is_mysql(url) { 3306 } else { 5432 };
    let url = url::Url::parse(url).expect("a database URL");
    let host = url.host_str().unwrap_or("127.0.0.1");
    let port = url.port().unwrap_or(default_port);
    std::net::ToSocketAddrs::to_socket_addrs(&(host, port))
        .expect("resolve the database host")
        .find(SocketAddr::is_ipv4)
        .expect("an IPv4 address for the database host")
}

/// `url` (a `postgres://` or `mysql://` URL) through `proxy`, without TLS so the proxy can read
/// it.
pub fn url_through(url: &str, proxy: &Proxy) -> String {
    let no_tls = if is_mysql(url) {
        ("ssl-mode", "disabled")
    } else {
        ("sslmode", "disable")
    };
    let mut url = url::Url::parse(url).expect("a database URL");
    url.set_host(Some("127.0.0.1")).unwrap();
    url.set_port(Some(proxy.addr.port())).unwrap();
    url.query_pairs_mut().append_pair(no_tls.0, no_tls.1);
    url.to_string()
}
