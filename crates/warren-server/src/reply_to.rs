//! Direct reply-to (RabbitMQ's `amq.rabbitmq.reply-to`): a channel consuming
//! from the pseudo-queue gets a name, `amq.rabbitmq.reply-to.<token>`, that
//! requests carry in reply_to; replies published to the default exchange
//! under that name go straight to the consumer, with no queue in between.

use std::collections::HashMap;
use std::sync::Arc;

use base64::Engine;
use parking_lot::Mutex;
use rand::RngCore;
use warren_amqp091::ShortStr;
use warren_core::message::MessageRef;

use crate::amqp091::outbox::Outbox;

pub const PSEUDO_QUEUE: &str = "amq.rabbitmq.reply-to";
pub const PREFIX: &str = "amq.rabbitmq.reply-to.";

#[derive(Debug, Clone)]
struct Consumer {
    outbox: Arc<Outbox>,
    channel: u16,
    tag: ShortStr,
}

#[derive(Debug, Default)]
pub struct Registry {
    consumers: Mutex<HashMap<String, Consumer>>,
}

impl Registry {
    /// Register a reply consumer; returns the reply-to name to hand out.
    pub fn register(&self, outbox: Arc<Outbox>, channel: u16, tag: ShortStr) -> String {
        let mut raw = [0u8; 18];
        rand::thread_rng().fill_bytes(&mut raw);
        let token = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw);
        self.consumers
            .lock()
            .insert(token.clone(), Consumer { outbox, channel, tag });
        format!("{PREFIX}{token}")
    }

    pub fn unregister(&self, name: &str) {
        if let Some(token) = name.strip_prefix(PREFIX) {
            self.consumers.lock().remove(token);
        }
    }

    pub fn is_alive(&self, name: &[u8]) -> bool {
        let Some(token) = name.strip_prefix(PREFIX.as_bytes()) else {
            return false;
        };
        let Ok(token) = std::str::from_utf8(token) else {
            return false;
        };
        self.consumers.lock().contains_key(token)
    }

    /// Deliver a reply; false when nobody is waiting for it (it is dropped).
    pub fn deliver(&self, name: &[u8], message: MessageRef) -> bool {
        let Some(token) = name.strip_prefix(PREFIX.as_bytes()) else {
            return false;
        };
        let Ok(token) = std::str::from_utf8(token) else {
            return false;
        };
        let c = self.consumers.lock().get(token).cloned();
        match c {
            Some(c) => {
                c.outbox.push_reply(c.channel, c.tag, message);
                true
            }
            None => false,
        }
    }
}
