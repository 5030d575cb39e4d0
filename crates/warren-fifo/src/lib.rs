//! A quorum queue's rules as a pure state machine (the role of RabbitMQ's
//! `rabbit_fifo`). Every member of a queue's Raft group applies the same
//! committed [`Command`]s in the same order to a [`Fifo`] and so reaches
//! the same state and the same [`Effect`]s; each member acts on those
//! that concern it (its own node's consumers' deliveries), the leader on
//! the rest (dead letters). Nothing here reads a clock, a disk or a
//! random number: whatever varies (ids, sizes, times, what a consumer
//! asked) is in the command.
//!
//! What the state holds is each message's header (its id, size and
//! counts), never its body: each member keeps the bodies beside it
//! (`warren_core::queue::quorum_bodies`), found by the id, which is the
//! Raft index of the enqueue.
//!
//! A message is in exactly one place: waiting (returned ones first, then
//! the rest in enqueue order), or checked out by one consumer until that
//! consumer settles, returns or discards it, or goes away.

pub mod codec;
mod fifo;

pub use codec::CodecError;

pub use fifo::{
    Command, Config, Consumer, ConsumerId, DeadLetterReason, DelayedRetry, Effect, Fifo, Header, Keys, Level,
    MsgId, RetryKind, MAX_PRIORITY,
};
