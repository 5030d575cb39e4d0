//! Recovery: after a wire ends without the application asking, connect
//! again (pausing longer after each failed attempt, trying each address
//! in turn), declare again the exchanges, queues and bindings recorded
//! in `topology.rs` on a channel of its own, then reopen every channel
//! under its number with its QoS, confirm and transaction modes, and
//! start its consumers again under their tags. Only then do calls and
//! publishes waiting on the connection go on. [`supervise`] is the task
//! that watches the wire in use and starts a recovery when it ends.

use std::sync::Arc;

use warren_amqp091::methods::*;
use warren_amqp091::Method;

use super::channel_state::ChannelState;
use super::core::{Core, Link};
use super::error::Error;
use super::events::Event;
use super::handshake;
use super::io;
use super::topology::Topology;
use super::wire::Wire;
use crate::recovery::Backoff;

/// Connect again and restore everything; the new wire, not yet in use.
pub(crate) async fn recover(core: &Arc<Core>) -> Result<Arc<Wire>, Error> {
    let mut backoff = Backoff::new(&core.settings.recovery, core.uris.len());
    let mut attempt = 0u32;
    loop {
        attempt += 1;
        let mut uri = core.uris[backoff.next_address()].clone();
        if let Some(secret) = core.secret.lock().clone() {
            uri.password = secret;
        }
        let uri = &uri;
        let result: Result<(), Error> =
            match handshake::open(uri, core.settings.name.as_deref(), core.settings.tls.as_ref()).await {
                Ok(opened) => {
                    let wire = io::start(opened, core.signals.clone(), core.settings.busy_poll);
                    match restore(core, &wire).await {
                        Ok(()) => return Ok(wire),
                        Err(e) => {
                            wire.end(e.clone());
                            Err(e)
                        }
                    }
                }
                Err(e) => Err(e),
            };
        let error = result.expect_err("returned on success");
        tracing::debug!(attempt, "recovery attempt failed: {error}");
        core.signals.emit(Event::RecoveryFailed {
            attempt,
            error: error.clone(),
        });
        if core.settings.recovery.max_attempts.is_some_and(|m| attempt >= m) {
            return Err(error);
        }
        if let Some(e) = core.closed() {
            return Err(e);
        }
        // A pause only once every address has been tried this round.
        tokio::time::sleep(backoff.pause()).await;
        if let Some(e) = core.closed() {
            return Err(e);
        }
    }
}

/// Declare the topology again and reopen the channels on `wire`. An
/// error that ends the wire fails the attempt; a declare the broker
/// refuses is reported and the rest go on.
async fn restore(core: &Arc<Core>, wire: &Arc<Wire>) -> Result<(), Error> {
    let channels: Vec<Arc<ChannelState>> = {
        let mut chans = core.channels.lock();
        chans.retain(|_, c| !c.is_ended());
        chans.values().cloned().collect()
    };
    let free = (1..=wire.channel_max)
        .rev()
        .find(|id| !channels.iter().any(|c| c.id == *id))
        .ok_or_else(|| Error::Protocol("no channel number free for recovery".into()))?;
    redeclare(core, wire, free).await?;
    for c in channels {
        if c.is_ended() {
            continue;
        }
        if !wire.register(c.clone()) {
            return Err(wire.ended_error());
        }
        c.reopen(&wire.outbound).await?;
    }
    Ok(())
}

/// Declare the recorded exchanges, queues and bindings again on a
/// channel of recovery's own.
async fn redeclare(core: &Arc<Core>, wire: &Arc<Wire>, id: u16) -> Result<(), Error> {
    let snapshot = {
        let t = core.topology.lock();
        Topology {
            exchanges: t.exchanges.clone(),
            queues: t.queues.clone(),
            bindings: Vec::new(),
        }
    };
    let mut ch = Scratch::open(wire, id).await?;
    for x in snapshot.exchanges {
        let m = ExchangeDeclare {
            exchange: x.name.as_str().into(),
            kind: x.kind.as_str().into(),
            durable: x.options.durable,
            auto_delete: x.options.auto_delete,
            internal: x.options.internal,
            arguments: x.options.arguments.clone(),
            ..Default::default()
        };
        ch.declare(core, format!("exchange {}", x.name), m.into()).await?;
    }
    for q in snapshot.queues {
        let m = QueueDeclare {
            queue: if q.server_named {
                "".into()
            } else {
                q.name.as_str().into()
            },
            durable: q.options.durable,
            exclusive: q.options.exclusive,
            auto_delete: q.options.auto_delete,
            arguments: q.options.arguments.clone(),
            ..Default::default()
        };
        let Some(Method::QueueDeclareOk(ok)) =
            ch.declare(core, format!("queue {}", q.name), m.into()).await?
        else {
            continue;
        };
        let new = ok.queue.to_str_lossy().into_owned();
        if new != q.name {
            core.topology.lock().renamed(&q.name, &new);
            for c in core.channels.lock().values() {
                c.queue_renamed(&q.name, &new);
            }
            core.signals.emit(Event::QueueRenamed { old: q.name, new });
        }
    }
    // After the renames, so bindings name the queues' new names.
    let bindings = core.topology.lock().bindings.clone();
    for b in bindings {
        let what = format!("binding {} -> {} ({})", b.source, b.destination, b.routing_key);
        let m: Method = if b.to_exchange {
            ExchangeBind {
                destination: b.destination.as_str().into(),
                source: b.source.as_str().into(),
                routing_key: b.routing_key.as_str().into(),
                arguments: b.arguments.clone(),
                ..Default::default()
            }
            .into()
        } else {
            QueueBind {
                queue: b.destination.as_str().into(),
                exchange: b.source.as_str().into(),
                routing_key: b.routing_key.as_str().into(),
                arguments: b.arguments.clone(),
                ..Default::default()
            }
            .into()
        };
        ch.declare(core, what, m).await?;
    }
    ch.close().await
}

/// Recovery's own channel: reopened when a declare closes it.
struct Scratch<'w> {
    wire: &'w Arc<Wire>,
    state: Arc<ChannelState>,
}

impl<'w> Scratch<'w> {
    async fn open(wire: &'w Arc<Wire>, id: u16) -> Result<Scratch<'w>, Error> {
        let state = Arc::new(ChannelState::new(id));
        if !wire.register(state.clone()) {
            return Err(wire.ended_error());
        }
        state
            .call_method(&wire.outbound, ChannelOpen::default().into())
            .await?;
        Ok(Scratch { wire, state })
    }

    /// Send a declare; its reply, or None when the broker refused it
    /// (reported as an event; the channel is opened again).
    async fn declare(&mut self, core: &Core, what: String, m: Method) -> Result<Option<Method>, Error> {
        match self.state.call_method(&self.wire.outbound, m).await {
            Ok(reply) => Ok(Some(reply)),
            Err(error @ Error::ChannelClosed { .. }) => {
                tracing::warn!("recovery could not declare {what} again: {error}");
                core.signals.emit(Event::TopologyRecoveryFailed { what, error });
                *self = Scratch::open(self.wire, self.state.id).await?;
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    async fn close(self) -> Result<(), Error> {
        let close = ChannelClose {
            reply_code: 200,
            reply_text: "recovery done".into(),
            class_id: 0,
            method_id: 0,
        };
        self.state.call_method(&self.wire.outbound, close.into()).await?;
        self.wire.unregister(self.state.id);
        Ok(())
    }
}

/// Watch the wire in use; when it ends, recover (or close for good).
pub(crate) async fn supervise(core: Arc<Core>, mut wire: Arc<Wire>) {
    loop {
        wire.ended().await;
        if core.closed().is_some() {
            return;
        }
        let why = wire.ended_error();
        core.signals.blocked.send_replace(false);
        if !core.settings.recovery.enabled || matches!(why, Error::ClosedByClient) {
            core.close_for_good(why);
            return;
        }
        tracing::info!("AMQP 0-9-1 connection lost ({why}); recovering");
        core.link.send_if_modified(|l| match l {
            Link::Closed(_) => false,
            _ => {
                *l = Link::Recovering;
                true
            }
        });
        core.signals.emit(Event::Disconnected { error: why });
        let span = tracing::info_span!("amqp091.recover", connection = core.settings.name.as_deref());
        match tracing::Instrument::instrument(recover(&core), span).await {
            Ok(next) => {
                let installed = core.link.send_if_modified(|l| match l {
                    Link::Closed(_) => false,
                    _ => {
                        *l = Link::Open(next.clone());
                        true
                    }
                });
                if !installed {
                    // Closed by the application while recovering.
                    next.end(Error::ClosedByClient);
                    return;
                }
                for c in core.channels.lock().values() {
                    c.cancel_owed(&next.outbound);
                }
                tracing::info!("AMQP 0-9-1 connection recovered");
                core.signals.emit(Event::Recovered);
                wire = next;
            }
            Err(e) => {
                core.close_for_good(e);
                return;
            }
        }
    }
}
