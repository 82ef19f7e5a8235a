//! The connections webhooks travel over: hyper-util's pooled client on a connector that resolves
//! names through the SSRF guard, connects with a timeout and `TCP_NODELAY`, speaks TLS (rustls,
//! the Mozilla roots) with HTTP/1.1 or HTTP/2 by ALPN, and bounds what one answer may make
//! kurir read ([`READ_BUDGET`]).
//!
//! The bound is why kurir drives hyper itself rather than through reqwest, which has no hook for
//! it: hyper's HTTP/1 client skips `1xx` answers in a loop with no limit, so an endpoint that
//! answers `100 Continue` for ever kept kurir parsing at wire speed, and each such connection
//! held a runtime thread for hundreds of milliseconds per poll: every other endpoint, the
//! database work and the timers (the response timeout included) waited behind it.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::Uri;
use http_body::{Frame, SizeHint};
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::dns::Name;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::oneshot;

use super::ssrf::GuardedResolver;

/// The most bytes kurir reads from one connection between two of its writes. An HTTP/1 answer's
/// head (hyper's own limit is about 400 KiB, `1xx` answers aside) and what hyper reads ahead of
/// the body fit; so does what HTTP/2 flow control lets the other side send unasked
/// ([`H2_CONNECTION_WINDOW`]). Past it the connection is dropped and the attempt fails.
pub const READ_BUDGET: usize = 2 << 20;

/// HTTP/2 flow-control windows: kurir keeps at most the first 4 KiB of a body, so it lets the
/// other side send little ahead (hyper's defaults are 2 MiB a stream and 5 MiB a connection).
const H2_STREAM_WINDOW: u32 = 256 << 10;
const H2_CONNECTION_WINDOW: u32 = 1 << 20;

/// The largest HTTP/2 header list kurir accepts, about what hyper allows an HTTP/1 head.
const H2_MAX_HEADER_LIST: u32 = 256 << 10;

/// How long an idle connection is kept for the next request to its host.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(90);

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The pooled client: requests with a [`Signalled`] body, over budgeted connections.
pub type HttpClient = Client<HttpsConnector<BudgetedConnector>, Signalled>;

/// A request body that reports when hyper first reads it: the moment a connection is there and
/// the request goes out, where the response timeout starts (see [`super`]).
pub struct Signalled {
    body: Option<Bytes>,
    started: Option<oneshot::Sender<()>>,
}

impl Signalled {
    /// `body`, reporting on `started` when it is first read.
    pub fn new(body: Bytes, started: oneshot::Sender<()>) -> Self {
        Self {
            body: Some(body),
            started: Some(started),
        }
    }
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

/// A client whose connections resolve through `resolver`, take at most `connect_timeout` to
/// open, and of which up to `max_idle_per_host` are kept idle per host.
pub fn client(
    resolver: Arc<GuardedResolver>,
    connect_timeout: Duration,
    max_idle_per_host: usize,
) -> HttpClient {
    let mut tcp = HttpConnector::new_with_resolver(Resolver(resolver));
    tcp.enforce_http(false);
    tcp.set_nodelay(true);
    tcp.set_connect_timeout(Some(connect_timeout));
    let connector = HttpsConnectorBuilder::new()
        .with_webpki_roots()
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .wrap_connector(BudgetedConnector(tcp));
    Client::builder(TokioExecutor::new())
        .timer(TokioTimer::new())
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(POOL_IDLE_TIMEOUT)
        .pool_max_idle_per_host(max_idle_per_host)
        .http2_initial_stream_window_size(H2_STREAM_WINDOW)
        .http2_initial_connection_window_size(H2_CONNECTION_WINDOW)
        .http2_max_header_list_size(H2_MAX_HEADER_LIST)
        .build(connector)
}

/// hyper-util's resolver interface over the SSRF guard's (written for reqwest).
#[derive(Clone)]
pub struct Resolver(Arc<GuardedResolver>);

impl tower_service::Service<Name> for Resolver {
    type Response = reqwest::dns::Addrs;
    type Error = BoxError;
    type Future = reqwest::dns::Resolving;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: Name) -> Self::Future {
        match name.as_str().parse() {
            Ok(name) => reqwest::dns::Resolve::resolve(&*self.0, name),
            Err(e) => Box::pin(std::future::ready(Err(Box::new(e) as BoxError))),
        }
    }
}

/// Opens TCP connections and wraps each in a [`Budgeted`] stream.
#[derive(Clone)]
pub struct BudgetedConnector(HttpConnector<Resolver>);

impl tower_service::Service<Uri> for BudgetedConnector {
    type Response = TokioIo<Budgeted>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.0.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let connecting = self.0.call(uri);
        Box::pin(async move {
            let tcp = connecting.await?.into_inner();
            Ok(TokioIo::new(Budgeted {
                tcp,
                read_since_write: 0,
            }))
        })
    }
}

/// A TCP stream that fails a read once [`READ_BUDGET`] bytes came in since kurir last wrote.
pub struct Budgeted {
    tcp: TcpStream,
    read_since_write: usize,
}

impl AsyncRead for Budgeted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.read_since_write >= READ_BUDGET {
            return Poll::Ready(Err(io::Error::other(format!(
                "the answer went on past {} MiB before kurir had what it needs (endless 1xx \
                 answers or headers)",
                READ_BUDGET >> 20
            ))));
        }
        let before = buf.filled().len();
        ready!(Pin::new(&mut self.tcp).poll_read(cx, buf))?;
        self.read_since_write += buf.filled().len() - before;
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Budgeted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let written = ready!(Pin::new(&mut self.tcp).poll_write(cx, buf))?;
        if written > 0 {
            self.read_since_write = 0;
        }
        Poll::Ready(Ok(written))
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let written = ready!(Pin::new(&mut self.tcp).poll_write_vectored(cx, bufs))?;
        if written > 0 {
            self.read_since_write = 0;
        }
        Poll::Ready(Ok(written))
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }
}

impl Connection for Budgeted {
    fn connected(&self) -> Connected {
        self.tcp.connected()
    }
}

/// Takes the user name and password out of `url` as a Basic `Authorization` value.
pub(super) fn basic_auth(url: &mut reqwest::Url) -> Option<String> {
    use base64::Engine as _;
    if url.username().is_empty() && url.password().is_none() {
        return None;
    }
    let decode = |s: &str| {
        percent_encoding::percent_decode_str(s)
            .decode_utf8_lossy()
            .into_owned()
    };
    let pair = format!(
        "{}:{}",
        decode(url.username()),
        decode(url.password().unwrap_or_default())
    );
    let _ = url.set_username("");
    let _ = url.set_password(None);
    Some(format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(pair)
    ))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::AsyncWriteExt;

    use crate::webhook_client::{PostError, Timeouts, WebhookClient};

    #[test]
    fn credentials_in_the_url_become_basic_authorization() {
        let mut url = reqwest::Url::parse("https://hook%40acme:p%C3%A4ss@example.com/in").unwrap();
        assert_eq!(
            super::basic_auth(&mut url).as_deref(),
            // base64("hook@acme:päss")
            Some("Basic aG9va0BhY21lOnDDpHNz")
        );
        assert_eq!(url.as_str(), "https://example.com/in");
        let mut plain = reqwest::Url::parse("https://example.com/in").unwrap();
        assert_eq!(super::basic_auth(&mut plain), None);
    }

    /// TLS is wired in: an `https://` URL gets a handshake, which a plain-text server fails.
    #[tokio::test]
    async fn an_https_url_gets_a_tls_handshake() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let _ = s
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                    .await;
            }
        });
        let allowed = crate::config::parse_networks("127.0.0.0/8").unwrap();
        let client = WebhookClient::new(allowed, 1);
        let timeouts = Timeouts {
            connect: Duration::from_secs(5),
            response: Duration::from_secs(5),
        };
        let url = format!("https://{addr}/hook");
        let answer = client.post(&url, &[], b"{}".to_vec(), timeouts).await;
        let Err(PostError::Connect(message)) = answer else {
            panic!("expected a failed TLS handshake, got {answer:?}")
        };
        assert!(message.starts_with("connect error"), "{message}");
    }
}
