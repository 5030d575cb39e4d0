//! Direct reply-to (RabbitMQ's `amq.rabbitmq.reply-to`): a channel consuming
//! from the pseudo-queue gets a name, `amq.rabbitmq.reply-to.<token>`, that
//! requests carry in reply_to; replies published to the default exchange
//! under that name go straight to the consumer, with no queue in between.
//!
//! On a cluster the name also says which node the consumer is on
//! (`amq.rabbitmq.reply-to.<node>.<token>`, the node's name in URL-safe
//! base64, as RabbitMQ's names carry the consumer's Erlang pid and so its
//! node): a reply published on another node crosses the link to it
//! (`QueueMsg::Reply`). Neither part contains a dot, so the name splits at
//! its last one.

use std::collections::HashMap;
use std::sync::OnceLock;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use parking_lot::Mutex;
use rand::RngCore;
use warren_amqp091::ShortStr;
use warren_core::message::MessageRef;

use crate::outbox::Outbox;
use std::sync::Arc;

pub const PSEUDO_QUEUE: &str = "amq.rabbitmq.reply-to";
pub const PREFIX: &str = "amq.rabbitmq.reply-to.";

#[derive(Debug, Clone)]
struct Consumer {
    outbox: Arc<Outbox>,
    channel: u16,
    tag: ShortStr,
}

/// Where a reply-to name's consumer is.
#[derive(Debug, PartialEq, Eq)]
pub enum Whose {
    /// Here: its token.
    Here(String),
    /// On this other node of the cluster.
    Node(String),
}

#[derive(Debug, Default)]
pub struct Registry {
    consumers: Mutex<HashMap<String, Consumer>>,
    /// This node's name as names carry it (set on a cluster only, so a
    /// single node's names are as before).
    node_tag: OnceLock<String>,
}

impl Registry {
    /// On a cluster: names made from now on carry `node`.
    pub fn set_node(&self, node: &str) {
        let _ = self.node_tag.set(URL_SAFE_NO_PAD.encode(node));
    }

    /// Register a reply consumer; returns the reply-to name to hand out.
    pub fn register(&self, outbox: Arc<Outbox>, channel: u16, tag: ShortStr) -> String {
        let mut raw = [0u8; 18];
        rand::thread_rng().fill_bytes(&mut raw);
        let token = URL_SAFE_NO_PAD.encode(raw);
        self.consumers
            .lock()
            .insert(token.clone(), Consumer { outbox, channel, tag });
        match self.node_tag.get() {
            Some(node) => format!("{PREFIX}{node}.{token}"),
            None => format!("{PREFIX}{token}"),
        }
    }

    /// Whose consumer `name` is; None for what is not a reply-to name.
    pub fn whose(&self, name: &[u8]) -> Option<Whose> {
        let rest = std::str::from_utf8(name.strip_prefix(PREFIX.as_bytes())?).ok()?;
        let Some((node, token)) = rest.rsplit_once('.') else {
            return Some(Whose::Here(rest.to_string()));
        };
        if self.node_tag.get().map(String::as_str) == Some(node) {
            return Some(Whose::Here(token.to_string()));
        }
        let node = String::from_utf8(URL_SAFE_NO_PAD.decode(node).ok()?).ok()?;
        Some(Whose::Node(node))
    }

    fn token(&self, name: &[u8]) -> Option<String> {
        match self.whose(name)? {
            Whose::Here(t) => Some(t),
            Whose::Node(_) => None,
        }
    }

    pub fn unregister(&self, name: &str) {
        if let Some(token) = self.token(name.as_bytes()) {
            self.consumers.lock().remove(&token);
        }
    }

    /// Is the consumer of `name`, on this node, still there?
    pub fn is_alive(&self, name: &[u8]) -> bool {
        self.token(name)
            .is_some_and(|t| self.consumers.lock().contains_key(&t))
    }

    /// Deliver a reply to a consumer on this node; false when nobody is
    /// waiting for it (it is dropped).
    pub fn deliver(&self, name: &[u8], message: MessageRef) -> bool {
        let Some(token) = self.token(name) else {
            return false;
        };
        let c = self.consumers.lock().get(&token).cloned();
        match c {
            Some(c) => {
                c.outbox.push_reply(c.channel, c.tag, message);
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_say_which_node_their_consumer_is_on() {
        let r = Registry::default();
        assert_eq!(
            r.whose(b"amq.rabbitmq.reply-to.abc"),
            Some(Whose::Here("abc".into()))
        );
        r.set_node("warren@node-1");
        let other = format!("{PREFIX}{}.tok", URL_SAFE_NO_PAD.encode("warren@node-2"));
        assert_eq!(
            r.whose(other.as_bytes()),
            Some(Whose::Node("warren@node-2".into()))
        );
        let mine = format!("{PREFIX}{}.tok", URL_SAFE_NO_PAD.encode("warren@node-1"));
        assert_eq!(r.whose(mine.as_bytes()), Some(Whose::Here("tok".into())));
        assert_eq!(r.whose(b"amq.rabbitmq.reply-to.!!.tok"), None);
        assert_eq!(r.whose(b"some-queue"), None);
    }
}
