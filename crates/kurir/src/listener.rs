//! The HTTP listener: accepts connections up to a cap, serves each with hyper's HTTP/1 under a
//! deadline for the request head and one for the body, and at shutdown stops accepting, lets
//! the requests in flight finish, and closes what is still open when its drain time is up.
//!
//! axum's own `serve` has none of these bounds: a client that sends part of a head keeps its
//! connection (and a file descriptor) forever, one that sends part of a body keeps shutdown
//! waiting forever, and connections are accepted without limit. At the cap, idle connections
//! give their slots up to new clients ([`slots`]). What each route does is the
//! router's business; this module only decides how long a client may take, and how many at once.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio::time::Sleep;
use tokio_util::sync::CancellationToken;
use tower_service::Service;

use slots::{IdleAtEnd, Room, Slots, Watched};

mod slots;

/// How long clients may take, how many may connect at once, and how long shutdown waits.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Time a client has to send a request's head, from the moment kurir starts reading it
    /// (a new connection, or the end of the previous response).
    pub header_timeout: Duration,
    /// Time a client has to send a request's whole body once its head is read.
    pub body_timeout: Duration,
    /// Connections open at once. At the cap a new client takes the slot of the connection idle
    /// longest, which is closed; with none idle it waits in the kernel's accept queue.
    pub max_connections: usize,
    /// How long shutdown waits for open connections before closing them.
    pub drain: Duration,
}

/// Serves `app` on `listener` within `limits` until `shutdown`, then drains (see the module docs).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    shutdown: CancellationToken,
) {
    let app = app.layer(middleware::from_fn_with_state(
        limits.body_timeout,
        body_deadline,
    ));
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    let slots = Slots::new(limits.max_connections);
    let mut connections = JoinSet::new();
    loop {
        let room = tokio::select! {
            () = shutdown.cancelled() => break,
            room = slots.room() => room,
        };
        let accepted = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = accept(&listener, &shutdown) => accepted,
        };
        let Some(stream) = accepted else {
            continue;
        };
        let permit = match room {
            Room::Free(permit) => permit,
            Room::Idle => tokio::select! {
                () = shutdown.cancelled() => break,
                permit = slots.make_room() => permit,
            },
        };
        while connections.try_join_next().is_some() {}
        let slot = slots.take(permit);
        let io = TokioIo::new(Watched::new(stream, slot.activity()));
        let service = tracked(app.clone(), slot.activity());
        let connection = http.serve_connection(io, service);
        let shutdown = shutdown.clone();
        connections.spawn(async move {
            let evicted = slot.evicted();
            tokio::pin!(connection);
            let ended = tokio::select! {
                ended = connection.as_mut() => ended,
                () = shutdown.cancelled() => {
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
                () = evicted.cancelled() => {
                    // Idle: hyper closes it at once (or after the request that just began).
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
            };
            drop(slot);
            if let Err(e) = ended {
                tracing::debug!(error = %e, "HTTP connection ended with an error");
            }
        });
    }
    drop(listener);
    drain(connections, limits.drain).await;
}

/// `app` as hyper's service for one connection, each response marking the connection idle once
/// written (see [`slots`]).
fn tracked(
    app: Router,
    activity: Arc<slots::Activity>,
) -> impl hyper::service::Service<
    Request<Incoming>,
    Response = Response<Body>,
    Error = Infallible,
    Future = impl Future<Output = Result<Response<Body>, Infallible>> + Send,
> + Clone {
    hyper::service::service_fn(move |request: Request<Incoming>| {
        let (mut app, activity) = (app.clone(), Arc::clone(&activity));
        async move {
            std::future::poll_fn(|cx| Service::<Request<Incoming>>::poll_ready(&mut app, cx))
                .await?;
            let response = app.call(request).await?;
            Ok::<_, Infallible>(response.map(|body| Body::new(IdleAtEnd::new(body, activity))))
        }
    })
}

/// The next connection; `None` after an accept error (logged, and waited out when it is not
/// about one connection).
async fn accept(listener: &TcpListener, shutdown: &CancellationToken) -> Option<TcpStream> {
    match listener.accept().await {
        Ok((stream, _)) => {
            // Answers are small; sending them at once matters more than batching.
            let _ = stream.set_nodelay(true);
            Some(stream)
        }
        Err(e) if is_connection_error(&e) => None,
        Err(e) => {
            // Out of file descriptors, most likely: wait for some to be freed.
            tracing::error!(error = %e, "accepting a connection failed; retrying in 1 s");
            tokio::select! {
                () = shutdown.cancelled() => {}
                () = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
            None
        }
    }
}

fn is_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    matches!(
        e.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset
    )
}

/// Waits up to `patience` for `connections` to finish, then closes the rest.
async fn drain(mut connections: JoinSet<()>, patience: Duration) {
    let finished = tokio::time::timeout(patience, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if finished.is_err() {
        tracing::warn!(
            connections = connections.len(),
            drain_ms = patience.as_millis() as u64,
            "closing HTTP connections still open when the shutdown's drain time was up"
        );
        connections.shutdown().await;
    }
}

/// Gives the request's body a deadline: reading it fails with [`BodyTimedOut`] once
/// `timeout` has passed since its head was read, however slowly the bytes trickle in.
async fn body_deadline(State(timeout): State<Duration>, request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    let body = Body::new(DeadlineBody {
        inner: body,
        deadline: Box::pin(tokio::time::sleep(timeout)),
    });
    next.run(Request::from_parts(parts, body)).await
}

/// The error a body read gets once its deadline has passed.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive in time")]
pub struct BodyTimedOut;

impl BodyTimedOut {
    /// Whether `error`, or an error it wraps, is a [`BodyTimedOut`].
    pub fn caused(error: &(dyn std::error::Error + 'static)) -> bool {
        std::iter::successors(Some(error), |e| e.source()).any(|e| e.is::<BodyTimedOut>())
    }
}

/// A body that fails once its deadline has passed.
struct DeadlineBody {
    inner: Body,
    deadline: Pin<Box<Sleep>>,
}

impl HttpBody for DeadlineBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        if let Poll::Ready(frame) = Pin::new(&mut self.inner).poll_frame(cx) {
            return Poll::Ready(frame);
        }
        match self.deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(axum::Error::new(BodyTimedOut)))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A body that sends one chunk, then nothing, forever.
    struct Trickle(bool);

    impl HttpBody for Trickle {
        type Data = Bytes;
        type Error = Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
            if std::mem::replace(&mut self.0, true) {
                Poll::Pending
            } else {
                Poll::Ready(Some(Ok(http_body::Frame::data(Bytes::from_static(b"{")))))
            }
        }
    }

    #[tokio::test]
    async fn a_body_that_does_not_arrive_in_time_fails() {
        let body = DeadlineBody {
            inner: Body::new(Trickle(false)),
            deadline: Box::pin(tokio::time::sleep(Duration::from_millis(50))),
        };
        let error = axum::body::to_bytes(Body::new(body), 1024)
            .await
            .unwrap_err();
        assert!(BodyTimedOut::caused(&error), "{error}");
    }
}
