//! A listener that counts the connections it has open, for a receiver that must know when a
//! dead sender's last bytes have all been read (see [`super::receiver::Receiver::drain`]).

use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

/// Connections accepted and not yet closed, and a wake-up when one closes.
#[derive(Clone, Default)]
pub struct Open {
    pub count: Arc<AtomicUsize>,
    pub closed: Arc<Notify>,
}

/// A [`TcpListener`] whose accepted connections count in [`Open`] until dropped.
pub struct Counting {
    pub listener: TcpListener,
    pub open: Open,
}

/// An accepted connection, counted while it lives.
pub struct Counted {
    stream: TcpStream,
    open: Open,
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.open.count.fetch_sub(1, Ordering::SeqCst);
        self.open.closed.notify_waiters();
    }
}

impl axum::serve::Listener for Counting {
    type Io = Counted;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            if let Ok((stream, addr)) = self.listener.accept().await {
                self.open.count.fetch_add(1, Ordering::SeqCst);
                let open = self.open.clone();
                return (Counted { stream, open }, addr);
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.listener.local_addr()
    }
}

impl AsyncRead for Counted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Counted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}
