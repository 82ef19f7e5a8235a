//! A TCP proxy on loopback that a test can cut and restore, to take a database away from a
//! running kurir without touching the database server (other tests share it).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

/// Forwards every connection to `target` until [`Proxy::cut`].
pub struct Proxy {
    pub addr: SocketAddr,
    target: SocketAddr,
    running: Arc<Mutex<Option<JoinSet<()>>>>,
}

impl Proxy {
    /// A proxy on 127.0.0.1:0 to `target`.
    pub async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let proxy = Self {
            addr: listener.local_addr().unwrap(),
            target,
            running: Arc::default(),
        };
        proxy.serve(listener);
        proxy
    }

    fn serve(&self, listener: TcpListener) {
        let mut tasks = JoinSet::new();
        let target = self.target;
        let connections = Arc::new(Mutex::new(JoinSet::new()));
        let held = connections.clone();
        tasks.spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                held.lock().unwrap().spawn(async move {
                    if let Ok(mut server) = TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
            }
        });
        // Dropping the accept loop closes the listener (new connections are refused); dropping
        // the connections' set aborts every forwarded connection.
        tasks.spawn(async move {
            let _keep = connections;
            std::future::pending::<()>().await
        });
        *self.running.lock().unwrap() = Some(tasks);
    }

    /// The database goes away: open connections break, new ones are refused.
    pub fn cut(&self) {
        self.running.lock().unwrap().take();
    }

    /// The database comes back on the same address.
    pub async fn restore(&self) {
        let listener = TcpListener::bind(self.addr)
            .await
            .expect("rebind the proxy");
        self.serve(listener);
    }
}
