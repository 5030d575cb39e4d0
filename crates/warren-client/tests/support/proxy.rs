//! A TCP proxy in front of a broker that can stop passing the client's
//! bytes on: the client's socket and then its outbox fill, so its sends
//! wait for room (and a test can drop them there). It can also stop at
//! the first chunk holding given bytes (a frame a test wants held), and
//! cut every connection open (a lost network, seen by the client alone).

use std::net::SocketAddr;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub struct Proxy {
    pub port: u16,
    shared: Arc<Shared>,
}

struct Shared {
    paused: watch::Sender<bool>,
    /// Client bytes that pause the proxy before they pass (once).
    trigger: Mutex<Option<Vec<u8>>>,
    /// Bumped to cut the connections open now.
    cut: watch::Sender<u64>,
}

impl Proxy {
    /// Listen on a free loopback port, passing each connection to `to`.
    pub async fn start(to: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let shared = Arc::new(Shared {
            paused: watch::channel(false).0,
            trigger: Mutex::new(None),
            cut: watch::channel(0).0,
        });
        let s = shared.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(broker) = TcpStream::connect(to).await else {
                    continue;
                };
                let (cr, cw) = client.into_split();
                let (br, bw) = broker.into_split();
                tokio::spawn(pass(cr, bw, Some(s.clone()), s.cut.subscribe()));
                tokio::spawn(pass(br, cw, None, s.cut.subscribe()));
            }
        });
        Proxy { port, shared }
    }

    /// Stop (or go on) reading what clients send.
    pub fn pause(&self, on: bool) {
        self.shared.paused.send_replace(on);
    }

    /// Pause before the first client bytes holding `bytes` pass on (what
    /// precedes them in their read goes).
    pub fn pause_at(&self, bytes: &[u8]) {
        *self.shared.trigger.lock() = Some(bytes.to_vec());
    }

    /// Wait until the proxy is paused (by [`Self::pause_at`]'s bytes).
    pub async fn until_paused(&self) {
        let mut paused = self.shared.paused.subscribe();
        let _ = paused.wait_for(|on| *on).await;
    }

    /// Close every connection open now, both ways.
    pub fn cut(&self) {
        self.shared.cut.send_modify(|n| *n += 1);
    }
}

/// Copy `from` to `to` until either ends or the connections are cut;
/// client bytes (with `shared`) wait while the proxy is paused.
async fn pass(
    from: tokio::net::tcp::OwnedReadHalf,
    to: tokio::net::tcp::OwnedWriteHalf,
    shared: Option<Arc<Shared>>,
    mut cut: watch::Receiver<u64>,
) {
    tokio::select! {
        _ = copy(from, to, shared) => {}
        _ = cut.changed() => {}
    }
}

async fn copy(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    shared: Option<Arc<Shared>>,
) {
    let mut paused = shared.as_ref().map(|s| s.paused.subscribe());
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        if let Some(p) = paused.as_mut() {
            if p.wait_for(|on| !on).await.is_err() {
                return;
            }
        }
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let mut chunk = &buf[..n];
        if let Some(s) = &shared {
            let at = {
                let mut trigger = s.trigger.lock();
                let at = trigger
                    .as_ref()
                    .and_then(|t| chunk.windows(t.len()).position(|w| w == t.as_slice()));
                if at.is_some() {
                    *trigger = None;
                }
                at
            };
            if let Some(at) = at {
                if to.write_all(&chunk[..at]).await.is_err() {
                    return;
                }
                chunk = &chunk[at..];
                s.paused.send_replace(true);
                let p = paused.as_mut().expect("client side");
                if p.wait_for(|on| !on).await.is_err() {
                    return;
                }
            }
        }
        if to.write_all(chunk).await.is_err() {
            return;
        }
    }
}
