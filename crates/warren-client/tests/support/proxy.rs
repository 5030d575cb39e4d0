//! A TCP proxy in front of a broker that can stop passing the client's
//! bytes on: the client's socket and then its outbox fill, so its sends
//! wait for room (and a test can drop them there).

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub struct Proxy {
    pub port: u16,
    paused: watch::Sender<bool>,
}

impl Proxy {
    /// Listen on a free loopback port, passing each connection to `to`.
    pub async fn start(to: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (paused, watch) = watch::channel(false);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(broker) = TcpStream::connect(to).await else {
                    continue;
                };
                let (cr, cw) = client.into_split();
                let (br, bw) = broker.into_split();
                tokio::spawn(pass(cr, bw, Some(watch.clone())));
                tokio::spawn(pass(br, cw, None));
            }
        });
        Proxy { port, paused }
    }

    /// Stop (or go on) reading what clients send.
    pub fn pause(&self, on: bool) {
        self.paused.send_replace(on);
    }
}

/// Copy `from` to `to`, waiting while `paused` says so.
async fn pass(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut paused: Option<watch::Receiver<bool>>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        if let Some(p) = paused.as_mut() {
            if p.wait_for(|on| !on).await.is_err() {
                return;
            }
        }
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if to.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
        }
    }
}
