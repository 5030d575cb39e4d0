//! The accept loop: one task per connection, at most `max_connections` at
//! once (a semaphore, so excess connections wait in the kernel's backlog
//! rather than costing memory), and a shutdown signal every connection
//! watches. On a TLS listener the connection's task first runs the
//! handshake, bounded by `ssl_handshake_timeout`; the front ends then see
//! plaintext as on a plain listener.

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};

use warren_front_amqp091::connection;
use warren_front_amqp10 as amqp10;
use warren_node::sniff::{self, Protocol};
use warren_node::tls::Tls;
use warren_node::transport::Transport;
use warren_node::ServerCtx;

/// A peer that sends no protocol header in this long is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Which protocols a listener serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Port {
    /// AMQP 0-9-1 and 1.0, told apart by the protocol header.
    Amqp,
    /// The RabbitMQ Stream protocol.
    Stream,
}

pub async fn accept_loop(
    tcp: TcpListener,
    ctx: Arc<ServerCtx>,
    streams: Arc<warren_front_stream::Shared>,
    mut shutdown: watch::Receiver<bool>,
    port: Port,
    tls: Option<Arc<Tls>>,
) {
    let limit = Arc::new(Semaphore::new(ctx.config.max_connections));
    let mut tasks = tokio::task::JoinSet::new();
    loop {
        let permit = tokio::select! {
            p = limit.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => break },
            _ = shutdown.changed() => break,
        };
        let accepted = tokio::select! {
            a = tcp.accept() => a,
            _ = shutdown.changed() => break,
        };
        match accepted {
            Ok((stream, peer)) => {
                let ctx = ctx.clone();
                let local = stream.local_addr().unwrap_or(peer);
                // Its own shutdown signal: the broker's, or a close through
                // the management API.
                let reg = ctx.connections.register(ctx.broker.next_id(), peer, local);
                let tls = tls.clone();
                let streams = streams.clone();
                tasks.spawn(async move {
                    let (rx, entry) = (reg.shutdown.clone(), reg.entry.clone());
                    let stream = match tls {
                        None => Transport::Plain(stream),
                        Some(tls) => {
                            let timeout = Duration::from_millis(ctx.config.ssl_handshake_timeout);
                            match Transport::accept_tls(&tls, stream, peer, timeout).await {
                                Some(t) => {
                                    if let Some(info) = t.tls_info() {
                                        entry.set_tls(info);
                                    }
                                    t
                                }
                                None => return,
                            }
                        }
                    };
                    let mut stream = stream;
                    if port == Port::Stream {
                        warren_front_stream::connection::serve(stream, peer, ctx, streams, rx, entry).await;
                    } else {
                        // Both AMQP protocols share the port: the header decides.
                        match sniff::sniff(&mut stream, HANDSHAKE_TIMEOUT).await {
                            Some(Protocol::Amqp10Sasl | Protocol::Amqp10) => {
                                amqp10::connection::serve(stream, peer, ctx, rx, entry).await
                            }
                            Some(Protocol::Amqp091) => connection::serve(stream, peer, ctx, rx, entry).await,
                            None => {}
                        }
                    }
                    drop(reg);
                    drop(permit);
                });
            }
            Err(e) => {
                // Out of file descriptors and the like: back off, keep going.
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        // Reap finished connection tasks so the set stays small.
        while tasks.try_join_next().is_some() {}
    }
    drop(tcp);
    // Tell every connection; give them a moment to say goodbye.
    ctx.connections.close_all();
    let _ = tokio::time::timeout(Duration::from_secs(5), async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
}
