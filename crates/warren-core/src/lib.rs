//! Warren's broker model, independent of any wire protocol and of sockets:
//! virtual hosts, exchanges and their routing, the protocol-neutral message,
//! and queue types behind one interface. Protocol front ends (in
//! `warren-front-*`) call into this crate and carry out what it returns; code
//! here never writes to a socket. The one I/O it does is the message
//! store's (`warren-store`): buffered appends and reads of paged-out
//! messages, under a queue's lock; fsync happens on the store's own thread.

pub mod alarms;
pub mod broker;
pub mod changes;
pub mod decl;
pub mod error;
pub mod exchange;
pub mod limits;
pub mod message;
mod pattern;
pub mod permissions;
pub mod policy;
pub mod queue;
pub mod replication;
pub mod scopes;
pub mod stats;
pub mod topic_permissions;
pub mod user;
pub mod vhost;

pub use broker::{Broker, BrokerConfig};
pub use error::BrokerError;
pub use limits::Limits;
pub use message::Message;
pub use permissions::{Access, Grant, Permission, Resource};
pub use topic_permissions::{TopicAccess, TopicGrants, TopicPermission};
pub use user::User;
pub use vhost::VHost;
