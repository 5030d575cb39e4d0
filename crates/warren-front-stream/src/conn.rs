//! A stream connection's state as its handlers see it ([`Conn`]): the
//! socket's buffers, the login, its publishers and subscriptions, what the
//! writer has yet to complete; and what wakes the connection ([`Wake`]).
//! The task that drives it is `connection.rs`; the handlers are
//! `publish.rs`, `subscribe.rs` and `admin.rs`.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use warren_core::{Grant, User, VHost};
use warren_node::ServerCtx;
use warren_stream::command::{code, Command, Response};
use warren_stream::CodecError;

use crate::publisher::Publisher;
use crate::subscription::Subscription;
use crate::wake::Wake;

/// Stop producing deliveries while this much is waiting to be written.
pub(super) const WRITE_HIGH: usize = 1 << 20;

/// Why the connection ends.
#[derive(Debug)]
pub(super) enum Stop {
    /// The peer went away or closed.
    Gone,
    /// We close it: a Close frame with this code and reason.
    Close(u16, String),
}

impl From<CodecError> for Stop {
    fn from(e: CodecError) -> Stop {
        match e {
            CodecError::FrameTooLarge { .. } => Stop::Close(code::FRAME_TOO_LARGE, e.to_string()),
            CodecError::UnknownKey(_) => Stop::Close(code::UNKNOWN_FRAME, e.to_string()),
            _ => Stop::Close(code::UNKNOWN_FRAME, format!("malformed frame: {e}")),
        }
    }
}

pub struct Conn {
    pub(super) stream: warren_node::transport::Transport,
    pub(super) peer: SocketAddr,
    pub(super) local: SocketAddr,
    /// Its entry in the connection registry (management API).
    pub(super) entry: Arc<warren_node::connections::Entry>,
    pub(super) ctx: Arc<ServerCtx>,
    /// The stream front end's node-wide parts.
    pub(super) shared: Arc<crate::Shared>,
    pub(super) rbuf: BytesMut,
    /// The size of the last frame read here that was larger than a usual
    /// read: room is made for one like it at each frame's start.
    pub(super) large_frame: usize,
    pub(super) wbuf: BytesMut,
    pub(super) frame_max: u32,
    /// The frame_max agreed in Tune, in force once the connection is open.
    pub(super) frame_max_after_open: u32,
    pub(super) heartbeat: Duration,
    pub(super) last_recv: Instant,
    pub(super) last_sent: Instant,
    pub(super) vhost: Option<Arc<VHost>>,
    pub(super) user: Option<User>,
    /// What the user may do in `vhost`; streams are queues to permissions.
    pub(super) grant: Option<Grant>,
    pub(super) publishers: HashMap<u8, Publisher>,
    pub(super) subscriptions: HashMap<u8, Subscription>,
    pub(super) wake: Arc<Wake>,
    /// Deliver version 2 (with the committed chunk id) if the client asked.
    pub(super) deliver_v2: bool,
    /// This connection's id (single-active-consumer groups name members by it).
    pub(super) id: u64,
    /// ConsumerUpdates we sent, by correlation id: the subscription and
    /// whether it was told it is active.
    pub(super) consumer_updates: HashMap<u32, (u8, bool)>,
    pub(super) next_correlation: u32,
    /// Chunks handed to the writer and not completed yet.
    pub(super) outstanding: usize,
    /// Chunks written on a replicated stream's leader whose confirms wait
    /// for a majority.
    pub(super) uncommitted: usize,
    /// Bytes of Publish frames waiting in publishers.
    pub(super) pending_bytes: usize,
    /// The entries waiting in publishers, in the order they came: runs of
    /// (publisher id, entries). A stream stores one connection's
    /// messages in that order, whichever publisher sent them.
    pub(super) arrivals: VecDeque<(u8, usize)>,
}

pub(super) fn response(out: &mut BytesMut, k: u16, correlation_id: u32, code: u16, rest: &[u8]) {
    Command::Response(Response {
        key: k,
        correlation_id,
        code,
        rest: Bytes::copy_from_slice(rest),
    })
    .encode(out);
}
