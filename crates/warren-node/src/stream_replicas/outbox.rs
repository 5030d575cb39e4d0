//! Where replication messages for a peer go: the link's queue-protocol
//! channel (it never drops; what is sent on it is bounded here by each
//! replica's window of unacknowledged bytes).

use std::collections::HashMap;

use parking_lot::Mutex;
use warren_peer::stream::StreamMsg;
use warren_peer::Message;

use crate::cluster::links::DataSender;

#[derive(Default)]
pub struct Outbox {
    links: Mutex<HashMap<String, DataSender>>,
}

impl Outbox {
    pub fn up(&self, node: &str, data: DataSender) {
        self.links.lock().insert(node.to_string(), data);
    }

    pub fn down(&self, node: &str) {
        self.links.lock().remove(node);
    }

    pub fn is_up(&self, node: &str) -> bool {
        self.links.lock().contains_key(node)
    }

    /// Queue `m` for `node`; false when there is no link to it.
    pub fn send(&self, node: &str, m: StreamMsg) -> bool {
        let tx = self.links.lock().get(node).cloned();
        tx.is_some_and(|tx| tx.send(Message::Stream(m)).is_ok())
    }
}
