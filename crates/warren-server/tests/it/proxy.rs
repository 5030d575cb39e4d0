//! A fault-injecting TCP proxy for the inter-node links: it forwards to a
//! node's inter-node port until told to blackhole, then stops moving bytes
//! either way (connections stay open, nothing is reset: the peers see only
//! silence, as across a dead switch), and new connections hang; healed,
//! it forwards again what waited.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub struct Proxy {
    pub port: u16,
    blackholed: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

async fn wait_while(flag: &AtomicBool) {
    while flag.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    hole: Arc<AtomicBool>,
) {
    let mut buf = vec![0u8; 64 << 10];
    loop {
        wait_while(&hole).await;
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        // What was read before the blackhole began goes after it ends.
        wait_while(&hole).await;
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

impl Proxy {
    pub async fn start(target: u16) -> Proxy {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let blackholed = Arc::new(AtomicBool::new(false));
        let hole = blackholed.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = l.accept().await {
                let hole = hole.clone();
                tokio::spawn(async move {
                    wait_while(&hole).await;
                    let Ok(server) = TcpStream::connect(("127.0.0.1", target)).await else {
                        return;
                    };
                    let (cr, cw) = client.into_split();
                    let (sr, sw) = server.into_split();
                    tokio::spawn(pump(cr, sw, hole.clone()));
                    tokio::spawn(pump(sr, cw, hole));
                });
            }
        });
        Proxy {
            port,
            blackholed,
            task,
        }
    }

    pub fn blackhole(&self, on: bool) {
        self.blackholed.store(on, Ordering::Relaxed);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}
