//! A connection as the application sees it, whichever socket carries it:
//! the wire in use (or that it is recovering, or closed), the channels,
//! the recorded topology and the signals. The supervisor task watches
//! each wire and, when one ends without the application asking, has
//! `recovery.rs` open the next.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::watch;

use super::channel::ChannelState;
use super::error::Error;
use super::events::Event;
use super::recovery::{self, RecoveryOptions};
use super::topology::Topology;
use super::wire::{Signals, Wire};
use crate::tls::TlsOptions;
use crate::uri::AmqpUri;

/// Where a connection stands.
#[derive(Clone)]
pub(crate) enum Link {
    Open(Arc<Wire>),
    Recovering,
    Closed(Error),
}

pub(crate) struct Core {
    /// The addresses to connect to, the first one first.
    pub(crate) uris: Vec<AmqpUri>,
    /// The name the broker's management shows (client property
    /// `connection_name`).
    pub(crate) name: Option<String>,
    /// The secret (an OAuth 2 token) given by the last accepted
    /// update-secret: a recovery logs in with it, not the URI's password.
    pub(crate) secret: Mutex<Option<String>>,
    /// TLS options of the application's (else the URIs' own).
    pub(crate) tls: Option<TlsOptions>,
    pub(crate) recovery: RecoveryOptions,
    /// How many deliveries `Consumer::run` handles at once.
    pub(crate) consumer_concurrency: usize,
    pub(crate) link: watch::Sender<Link>,
    /// Every channel the application has open, by number; recovery
    /// reopens them under the same numbers.
    pub(crate) channels: Mutex<BTreeMap<u16, Arc<ChannelState>>>,
    pub(crate) topology: Mutex<Topology>,
    pub(crate) signals: Arc<Signals>,
}

impl Core {
    pub(crate) fn new(
        uris: Vec<AmqpUri>,
        name: Option<String>,
        tls: Option<TlsOptions>,
        recovery: RecoveryOptions,
        consumer_concurrency: usize,
        wire: Arc<Wire>,
    ) -> Arc<Core> {
        Arc::new(Core {
            uris,
            name,
            secret: Mutex::new(None),
            tls,
            consumer_concurrency,
            recovery,
            signals: wire.signals.clone(),
            link: watch::Sender::new(Link::Open(wire)),
            channels: Mutex::new(BTreeMap::new()),
            topology: Mutex::new(Topology::default()),
        })
    }

    /// The wire to use now, waiting out a recovery.
    pub(crate) async fn wire(&self) -> Result<Arc<Wire>, Error> {
        // Every publish asks: answer an open link without subscribing.
        if let Link::Open(w) = &*self.link.borrow() {
            if !w.is_ended() {
                return Ok(w.clone());
            }
        }
        let mut rx = self.link.subscribe();
        loop {
            match &*rx.borrow_and_update() {
                Link::Open(w) if !w.is_ended() => return Ok(w.clone()),
                Link::Closed(e) => return Err(e.clone()),
                Link::Open(_) | Link::Recovering => {}
            }
            if rx.changed().await.is_err() {
                return Err(Error::ClosedByClient);
            }
        }
    }

    /// Whether `wire` is still the one in use.
    pub(crate) fn is_current(&self, wire: &Arc<Wire>) -> bool {
        matches!(&*self.link.borrow(), Link::Open(w) if Arc::ptr_eq(w, wire)) && !wire.is_ended()
    }

    pub(crate) fn closed(&self) -> Option<Error> {
        match &*self.link.borrow() {
            Link::Closed(e) => Some(e.clone()),
            _ => None,
        }
    }

    /// Wait while the broker has blocked publishing.
    pub(crate) async fn unblocked(&self) {
        if !*self.signals.blocked.borrow() {
            return;
        }
        let mut rx = self.signals.blocked.subscribe();
        let _ = rx.wait_for(|b| !*b).await;
    }

    /// The connection is over for good: the link says why and every
    /// channel ends.
    pub(crate) fn close_for_good(&self, why: Error) {
        self.link.send_if_modified(|l| match l {
            Link::Closed(_) => false,
            _ => {
                *l = Link::Closed(why.clone());
                true
            }
        });
        let channels: Vec<_> = std::mem::take(&mut *self.channels.lock()).into_values().collect();
        for c in channels {
            c.closed(why.clone());
        }
        self.signals.blocked.send_replace(false);
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
        if !core.recovery.enabled || matches!(why, Error::ClosedByClient) {
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
        match recovery::recover(&core).await {
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
