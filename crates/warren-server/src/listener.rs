//! The accept loop: one task per connection, at most `max_connections` at
//! once (a semaphore, so excess connections wait in the kernel's backlog
//! rather than costing memory), and a shutdown signal every connection
//! watches.

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};

use crate::amqp091::connection;
use crate::ServerCtx;

pub async fn accept_loop(tcp: TcpListener, ctx: Arc<ServerCtx>, mut shutdown: watch::Receiver<bool>) {
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
                let rx = shutdown.clone();
                tasks.spawn(async move {
                    connection::serve(stream, peer, ctx, rx).await;
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
    // Connections saw the signal too; give them a moment to say goodbye.
    let _ = tokio::time::timeout(Duration::from_secs(5), async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
}
