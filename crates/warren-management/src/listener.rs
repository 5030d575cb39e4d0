//! The HTTP servers' listener, plain or TLS, as axum's `Listener`. Over
//! TLS, handshakes run in their own tasks (at most `MAX_HANDSHAKES` at
//! once, each bounded by `ssl_handshake_timeout`), so a client that stalls
//! its handshake holds up nobody else's accept.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{mpsc, Semaphore};

use warren_node::tls::Tls;
use warren_node::transport::Transport;

/// TLS handshakes in progress at once on one HTTP listener.
const MAX_HANDSHAKES: usize = 256;

pub struct HttpListener {
    local: SocketAddr,
    inner: Inner,
}

enum Inner {
    Plain(TcpListener),
    Tls {
        done: mpsc::Receiver<(Transport, SocketAddr)>,
        task: tokio::task::JoinHandle<()>,
    },
}

impl HttpListener {
    pub fn plain(tcp: TcpListener) -> std::io::Result<HttpListener> {
        Ok(HttpListener {
            local: tcp.local_addr()?,
            inner: Inner::Plain(tcp),
        })
    }

    pub fn tls(tcp: TcpListener, tls: Arc<Tls>, timeout: Duration) -> std::io::Result<HttpListener> {
        let local = tcp.local_addr()?;
        let (tx, done) = mpsc::channel(16);
        let task = tokio::spawn(async move {
            let limit = Arc::new(Semaphore::new(MAX_HANDSHAKES));
            loop {
                let Ok(permit) = limit.clone().acquire_owned().await else {
                    return;
                };
                let (sock, peer) = match tcp.accept().await {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::warn!("accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let (tls, tx) = (tls.clone(), tx.clone());
                tokio::spawn(async move {
                    if let Some(t) =
                        warren_node::transport::Transport::accept_tls(&tls, sock, peer, timeout).await
                    {
                        let _ = tx.send((t, peer)).await;
                    }
                    drop(permit);
                });
            }
        });
        Ok(HttpListener {
            local,
            inner: Inner::Tls { done, task },
        })
    }
}

impl Drop for HttpListener {
    fn drop(&mut self) {
        if let Inner::Tls { task, .. } = &self.inner {
            task.abort();
        }
    }
}

impl axum::serve::Listener for HttpListener {
    type Io = Transport;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Transport, SocketAddr) {
        match &mut self.inner {
            Inner::Plain(tcp) => loop {
                match TcpListener::accept(tcp).await {
                    Ok((s, peer)) => return (Transport::Plain(s), peer),
                    Err(e) => {
                        tracing::warn!("accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            },
            Inner::Tls { done, .. } => match done.recv().await {
                Some(c) => c,
                None => std::future::pending().await,
            },
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        Ok(self.local)
    }
}
