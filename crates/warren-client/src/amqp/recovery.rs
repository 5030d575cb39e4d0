//! Recovery: when a wire ends without the application closing the
//! connection, connect again (each address in turn, pausing longer after
//! each round that fails), declare again on recovery's own management
//! link pair the queues, exchanges and bindings recorded in
//! `topology.rs`, then attach the links again under their handles and
//! names (a stream consumer from after the last offset it got). Calls
//! made meanwhile wait; outcomes that were awaited fail with
//! [`Error::ConnectionLost`] when the wire goes. [`supervise`] is the
//! task that watches the wire in use.

use std::sync::Arc;

use super::connection::Shared;
use super::error::Error;
use super::events::Event;
use super::wire::{self, Wire};
use super::Management;
use crate::recovery::Backoff;

/// Watch the wire in use; when it ends, recover (or end for good).
pub(crate) async fn supervise(shared: Arc<Shared>, mut wire: Wire) {
    loop {
        let why = (&mut wire.ended)
            .await
            .unwrap_or_else(|_| Error::ConnectionClosed("the connection's tasks ended".into()));
        drop(wire);
        if shared.is_closing() {
            return; // `close` ends the session itself
        }
        if !shared.settings.recovery.enabled {
            shared.end(why);
            return;
        }
        tracing::info!(reason = %why, "AMQP 1.0 connection lost; recovering");
        shared.lost(&why);
        shared.emit(Event::Disconnected { error: why });
        let span = tracing::info_span!("amqp.recover", container = %shared.settings.container_id);
        match tracing::Instrument::instrument(recover(&shared), span).await {
            Ok(next) if !shared.is_closing() => {
                tracing::info!("AMQP 1.0 connection recovered");
                shared.emit(Event::Recovered);
                wire = next;
            }
            Ok(_) => return,
            Err(e) => {
                shared.end(e);
                return;
            }
        }
    }
}

/// Connect again and restore everything; the new wire, in use.
async fn recover(shared: &Arc<Shared>) -> Result<Wire, Error> {
    let options = &shared.settings.recovery;
    let mut backoff = Backoff::new(options, shared.settings.uris.len());
    let mut stopped = shared.stop.subscribe();
    let mut attempt = 0u32;
    loop {
        attempt += 1;
        let mut uri = shared.settings.uris[backoff.next_address()].clone();
        if let Some(secret) = shared.secret.lock().clone() {
            uri.password = secret;
        }
        let error = match wire::connect(&shared.settings, &uri).await {
            Ok(opened) => {
                shared.with(|s| {
                    s.resume(
                        opened.remote_incoming_window,
                        opened.next_incoming_id,
                        opened.max_frame,
                    )
                });
                let mut next = wire::start(shared, opened);
                let restored = tokio::select! {
                    r = restore(shared) => r,
                    why = &mut next.ended => Err(why.unwrap_or_else(|_| Error::ConnectionClosed("lost while recovering".into()))),
                };
                match restored {
                    Ok(()) => return Ok(next),
                    Err(e) => {
                        drop(next);
                        // What this wire began is forgotten with it.
                        shared.lost(&e);
                        e
                    }
                }
            }
            Err(e) => e,
        };
        tracing::debug!(attempt, "recovery attempt failed: {error}");
        shared.emit(Event::RecoveryFailed {
            attempt,
            error: error.clone(),
        });
        if options.max_attempts.is_some_and(|m| attempt >= m) {
            return Err(error);
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff.pause()) => {}
            _ = stopped.wait_for(|s| *s) => {}
        }
        if shared.is_closing() {
            return Err(Error::ConnectionClosed("closed by the application".into()));
        }
    }
}

/// Declare the recorded topology again, then attach the links again. A
/// declare or attach the broker refuses is reported and the rest go on;
/// anything else fails the attempt.
async fn restore(shared: &Arc<Shared>) -> Result<(), Error> {
    let (exchanges, queues, bindings) = {
        let t = shared.topology.lock();
        (t.exchanges.clone(), t.queues.clone(), t.bindings.clone())
    };
    if !(exchanges.is_empty() && queues.is_empty() && bindings.is_empty()) {
        let m = Management::open(shared.clone(), true).await?.unrecorded();
        let refused = |what: String, e: Error| -> Result<(), Error> {
            match e {
                Error::Management { .. } => {
                    tracing::warn!("recovery could not declare {what} again: {e}");
                    shared.emit(Event::TopologyRecoveryFailed { what, error: e });
                    Ok(())
                }
                other => Err(other),
            }
        };
        for x in &exchanges {
            if let Err(e) = m.declare_exchange(x).await {
                refused(format!("exchange {}", x.name), e)?;
            }
        }
        for q in &queues {
            if let Err(e) = m.declare_queue(q).await {
                refused(format!("queue {}", q.name), e)?;
            }
        }
        for b in &bindings {
            if let Err(e) = m.bind(b).await {
                refused(format!("binding {}", b.path()), e)?;
            }
        }
        m.close();
    }
    let waits = shared.with(|s| s.reattach());
    shared.changed.notify_waiters();
    for (handle, name, answer) in waits {
        match super::link::answered(shared, handle, answer).await {
            Ok(_) => {}
            Err(e @ Error::LinkRefused(_)) => {
                tracing::warn!("recovery could not attach link {name} again: {e}");
                shared.emit(Event::TopologyRecoveryFailed {
                    what: format!("link {name}"),
                    error: e,
                });
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
