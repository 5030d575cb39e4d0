//! A connection as the application sees it, whichever socket carries it:
//! the wire in use (or that it is recovering, or closed), the channels,
//! the recorded topology and the signals. When a wire ends without the
//! application asking, `recovery.rs` opens the next.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use tokio::sync::{oneshot, watch};
use warren_amqp091::frame::write_method;
use warren_amqp091::methods::ConnectionUpdateSecret;
use warren_amqp091::Method;

use super::channel_state::ChannelState;
use super::error::Error;
use super::events::Signals;
use super::settings::Settings;
use super::topology::Topology;
use super::wire::Wire;
use crate::uri::AmqpUri;

/// How long the broker has to accept a new secret.
const UPDATE_SECRET_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

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
    /// The secret (an OAuth 2 token) given by the last accepted
    /// update-secret: a recovery logs in with it, not the URI's password.
    pub(crate) secret: Mutex<Option<String>>,
    /// What the application's builder set.
    pub(crate) settings: Settings,
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
        settings: Settings,
        secret: Option<String>,
        wire: Arc<Wire>,
    ) -> Arc<Core> {
        Arc::new(Core {
            uris,
            secret: Mutex::new(secret),
            settings,
            signals: wire.signals.clone(),
            link: watch::Sender::new(Link::Open(wire)),
            channels: Mutex::new(BTreeMap::new()),
            topology: Mutex::new(Topology::default()),
        })
    }

    /// The wire in use, if the connection is open now (not recovering).
    pub(crate) fn open_wire(&self) -> Option<Arc<Wire>> {
        match &*self.link.borrow() {
            Link::Open(w) if !w.is_ended() => Some(w.clone()),
            _ => None,
        }
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

    /// connection.update-secret on the wire in use; once the broker
    /// accepts it, recoveries log in with the new secret.
    pub(crate) async fn update_secret(&self, secret: &str, reason: &str) -> Result<(), Error> {
        let wire = self.wire().await?;
        let (tx, rx) = oneshot::channel();
        *wire.update_secret_ok.lock() = Some(tx);
        let mut buf = BytesMut::new();
        let update = ConnectionUpdateSecret {
            new_secret: Bytes::copy_from_slice(secret.as_bytes()),
            reason: reason.into(),
        };
        write_method(&mut buf, 0, &Method::ConnectionUpdateSecret(update));
        wire.send(buf.freeze()).await?;
        tokio::select! {
            ok = rx => {
                if ok.is_ok() {
                    *self.secret.lock() = Some(secret.to_string());
                    return Ok(());
                }
            }
            _ = wire.ended() => {}
            _ = tokio::time::sleep(UPDATE_SECRET_TIMEOUT) => return Err(Error::Timeout(UPDATE_SECRET_TIMEOUT)),
        }
        Err(wire.ended_error())
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
