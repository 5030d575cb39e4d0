//! The stream replication protocol: how a stream's leader hands its log to
//! the stream's replicas (osiris's writer, replica and replica reader, on
//! the node pair's link instead of a connection of their own per
//! replica, so it rides the link's authentication and TLS).
//!
//! A replica asks to follow (`Follow`, with the epoch it knows); the
//! leader answers with what its log holds (`Overview`: its range and each
//! epoch's last chunk, osiris_log:overview); the replica cuts its log
//! where it stops agreeing (osiris_log:init_acceptor) and says where it
//! ends (`From`); the leader checks that tail against its own log and
//! sends every chunk from there as stored (`Chunks`: the bytes of whole
//! chunks, a large one split over several frames), with the chunk a
//! majority has (committed) so a replica's consumers read no further;
//! the replica writes them verbatim and acknowledges what it wrote
//! (`Ack`). The leader sends no more than a window of bytes beyond what
//! was acknowledged. Every message names the stream and the epoch it is
//! for: one of another epoch is stale and ignored, or answered `Refuse`.

use bytes::{BufMut, Bytes, BytesMut};

use crate::error::CodecError;
use crate::queue::{put_short, short};
use crate::wire::{put_blob, put_name, Reader};

/// Frame kinds of the stream replication protocol.
pub mod kind {
    pub const FOLLOW: u8 = 0x50;
    pub const OVERVIEW: u8 = 0x51;
    pub const FROM: u8 = 0x52;
    pub const CHUNKS: u8 = 0x53;
    pub const ACK: u8 = 0x54;
    pub const REFUSE: u8 = 0x55;
    pub const TRACK: u8 = 0x56;
    pub const STOP: u8 = 0x57;
    pub const STOPPED: u8 = 0x58;
    pub const STATUS: u8 = 0x59;
    pub const STATUS_IS: u8 = 0x5a;
    pub const WRITE: u8 = 0x5b;
    pub const WRITTEN: u8 = 0x5c;
}

/// Chunk bytes from which [`crate::message::Message::encode_split`] leaves them
/// out of the encoded frame.
pub const SPLIT_MIN: usize = 16 << 10;

/// Which stream, at which epoch (the stream coordinator's count of its
/// leaders: a message of another epoch is stale).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StreamRef {
    pub vhost: String,
    pub name: Bytes,
    pub epoch: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamMsg {
    /// Replica to leader: it follows the stream; the leader's overview
    /// is asked for.
    Follow { stream: StreamRef },
    /// Leader to replica: the first and last offsets its log holds (None:
    /// none), and each epoch's last chunk id, oldest first.
    Overview {
        stream: StreamRef,
        range: Option<(u64, u64)>,
        epochs: Vec<(u64, u64)>,
    },
    /// Replica to leader: its log, cut, ends before offset `next`, with
    /// its last chunk (epoch, chunk id); send from there.
    From {
        stream: StreamRef,
        next: u64,
        last: Option<(u64, u64)>,
    },
    /// Leader to replica: bytes of whole chunks as stored (a chunk may
    /// continue in the next `Chunks`), and the last chunk a majority has.
    Chunks {
        stream: StreamRef,
        committed: Option<u64>,
        bytes: Bytes,
    },
    /// Replica to leader: its log holds every chunk up to `last` (a chunk
    /// id), and ends before offset `next`.
    Ack { stream: StreamRef, last: u64, next: u64 },
    /// Leader to replica: it will not be followed now (not the leader of
    /// that epoch, or the replica's tail is not in its log).
    Refuse { stream: StreamRef, why: String },
    /// Replica's node to leader: a consumer connected there stores its
    /// offset (only the leader writes the log; the tracking chunk comes
    /// back with the others).
    Track {
        stream: StreamRef,
        reference: String,
        offset: u64,
    },
    /// Stream coordinator to member: the leader of this epoch is gone;
    /// stop taking (or writing) its chunks and say where the log ends.
    Stop { stream: StreamRef },
    /// Member to coordinator: stopped in that epoch; its last chunk
    /// (epoch, chunk id), None for an empty log. The next leader is the
    /// member with the highest of a majority (osiris's select_leader).
    Stopped {
        stream: StreamRef,
        tail: Option<(u64, u64)>,
    },
    /// Any node to a member: its figures for `stream_status` (request
    /// `req` of the asking node).
    Status { stream: StreamRef, req: u64 },
    /// The member's figures, JSON (an operator's occasional request).
    StatusIs { stream: StreamRef, req: u64, row: Bytes },
    /// A replica's node to the leader: a publisher connected there
    /// publishes (only the leader writes, as osiris's writer). `publish`
    /// is a stream protocol Publish frame's content (version 2); the
    /// leader deduplicates by `reference` ("" for none) and answers
    /// `Written` once the chunk is committed.
    Write {
        stream: StreamRef,
        req: u64,
        reference: String,
        publish: Bytes,
    },
    /// The leader's answer to `Write`: a stream protocol response code.
    Written { stream: StreamRef, req: u64, code: u16 },
}

fn put_ref(out: &mut BytesMut, s: &StreamRef) {
    put_name(out, &s.vhost);
    put_short(out, &s.name);
    out.put_u64(s.epoch);
}

fn stream_ref(r: &mut Reader) -> Result<StreamRef, CodecError> {
    Ok(StreamRef {
        vhost: r.name("stream vhost")?,
        name: short(r, "stream name")?,
        epoch: r.u64("stream epoch")?,
    })
}

fn put_opt(out: &mut BytesMut, v: Option<u64>) {
    match v {
        Some(v) => {
            out.put_u8(1);
            out.put_u64(v);
        }
        None => out.put_u8(0),
    }
}

fn opt(r: &mut Reader, what: &'static str) -> Result<Option<u64>, CodecError> {
    Ok(if r.bool(what)? { Some(r.u64(what)?) } else { None })
}

fn put_pair(out: &mut BytesMut, v: Option<(u64, u64)>) {
    match v {
        Some((a, b)) => {
            out.put_u8(1);
            out.put_u64(a);
            out.put_u64(b);
        }
        None => out.put_u8(0),
    }
}

fn pair(r: &mut Reader, what: &'static str) -> Result<Option<(u64, u64)>, CodecError> {
    Ok(if r.bool(what)? {
        Some((r.u64(what)?, r.u64(what)?))
    } else {
        None
    })
}

impl StreamMsg {
    pub fn kind(&self) -> u8 {
        match self {
            StreamMsg::Follow { .. } => kind::FOLLOW,
            StreamMsg::Overview { .. } => kind::OVERVIEW,
            StreamMsg::From { .. } => kind::FROM,
            StreamMsg::Chunks { .. } => kind::CHUNKS,
            StreamMsg::Ack { .. } => kind::ACK,
            StreamMsg::Refuse { .. } => kind::REFUSE,
            StreamMsg::Track { .. } => kind::TRACK,
            StreamMsg::Stop { .. } => kind::STOP,
            StreamMsg::Stopped { .. } => kind::STOPPED,
            StreamMsg::Status { .. } => kind::STATUS,
            StreamMsg::StatusIs { .. } => kind::STATUS_IS,
            StreamMsg::Write { .. } => kind::WRITE,
            StreamMsg::Written { .. } => kind::WRITTEN,
        }
    }

    pub fn stream(&self) -> &StreamRef {
        match self {
            StreamMsg::Follow { stream }
            | StreamMsg::Overview { stream, .. }
            | StreamMsg::From { stream, .. }
            | StreamMsg::Chunks { stream, .. }
            | StreamMsg::Ack { stream, .. }
            | StreamMsg::Refuse { stream, .. }
            | StreamMsg::Track { stream, .. }
            | StreamMsg::Stop { stream }
            | StreamMsg::Stopped { stream, .. }
            | StreamMsg::Status { stream, .. }
            | StreamMsg::StatusIs { stream, .. }
            | StreamMsg::Write { stream, .. }
            | StreamMsg::Written { stream, .. } => stream,
        }
    }

    pub fn is_stream_kind(kind: u8) -> bool {
        (kind::FOLLOW..=kind::WRITTEN).contains(&kind)
    }

    pub(crate) fn encode_fields(&self, out: &mut BytesMut) {
        put_ref(out, self.stream());
        match self {
            StreamMsg::Follow { .. } => {}
            StreamMsg::Overview { range, epochs, .. } => {
                put_pair(out, *range);
                out.put_u32(epochs.len() as u32);
                for (e, c) in epochs {
                    out.put_u64(*e);
                    out.put_u64(*c);
                }
            }
            StreamMsg::From { next, last, .. } => {
                out.put_u64(*next);
                put_pair(out, *last);
            }
            StreamMsg::Chunks { committed, bytes, .. } => {
                put_opt(out, *committed);
                put_blob(out, bytes);
            }
            StreamMsg::Ack { last, next, .. } => {
                out.put_u64(*last);
                out.put_u64(*next);
            }
            StreamMsg::Refuse { why, .. } => put_name(out, why),
            StreamMsg::Track {
                reference, offset, ..
            } => {
                put_name(out, reference);
                out.put_u64(*offset);
            }
            StreamMsg::Stop { .. } => {}
            StreamMsg::Stopped { tail, .. } => put_pair(out, *tail),
            StreamMsg::Status { req, .. } => out.put_u64(*req),
            StreamMsg::StatusIs { req, row, .. } => {
                out.put_u64(*req);
                put_blob(out, row);
            }
            StreamMsg::Write {
                req,
                reference,
                publish,
                ..
            } => {
                out.put_u64(*req);
                put_name(out, reference);
                put_blob(out, publish);
            }
            StreamMsg::Written { req, code, .. } => {
                out.put_u64(*req);
                out.put_u16(*code);
            }
        }
    }

    /// For `Chunks` of at least [`SPLIT_MIN`] bytes: append the frame's
    /// head (size, kind, fields, the chunk bytes' length) to `out` and
    /// hand back the chunk bytes, for the sender to write after it as
    /// they are (a copy of every replicated byte into the link's buffer
    /// was the largest user-space cost of a leader, perf). None: nothing
    /// was appended; encode the message whole.
    pub(crate) fn encode_head(&self, out: &mut BytesMut) -> Option<Bytes> {
        let StreamMsg::Chunks {
            stream,
            committed,
            bytes,
        } = self
        else {
            return None;
        };
        if bytes.len() < SPLIT_MIN {
            return None;
        }
        let at = crate::frame::begin_frame(out, kind::CHUNKS);
        put_ref(out, stream);
        put_opt(out, *committed);
        out.put_u32(bytes.len() as u32);
        let size = (out.len() - at - 4 + bytes.len()) as u32;
        out[at..at + 4].copy_from_slice(&size.to_be_bytes());
        Some(bytes.clone())
    }

    pub(crate) fn decode_fields(kind: u8, r: &mut Reader) -> Result<StreamMsg, CodecError> {
        let stream = stream_ref(r)?;
        Ok(match kind {
            kind::FOLLOW => StreamMsg::Follow { stream },
            kind::OVERVIEW => {
                let range = pair(r, "overview range")?;
                let n = r.u32("overview epochs")? as usize;
                // Each takes 16 bytes: a count past what is left is a lie,
                // refused before anything is reserved for it.
                if n > r.remaining() / 16 {
                    return Err(CodecError::Invalid(format!("overview of {n} epochs")));
                }
                let mut epochs = Vec::with_capacity(n);
                for _ in 0..n {
                    epochs.push((r.u64("overview epoch")?, r.u64("overview chunk")?));
                }
                StreamMsg::Overview {
                    stream,
                    range,
                    epochs,
                }
            }
            kind::FROM => StreamMsg::From {
                stream,
                next: r.u64("from next")?,
                last: pair(r, "from last")?,
            },
            kind::CHUNKS => StreamMsg::Chunks {
                stream,
                committed: opt(r, "chunks committed")?,
                bytes: r.blob("chunks bytes")?,
            },
            kind::ACK => StreamMsg::Ack {
                stream,
                last: r.u64("ack last")?,
                next: r.u64("ack next")?,
            },
            kind::REFUSE => StreamMsg::Refuse {
                stream,
                why: r.name("refuse why")?,
            },
            kind::TRACK => StreamMsg::Track {
                stream,
                reference: r.name("track reference")?,
                offset: r.u64("track offset")?,
            },
            kind::STOP => StreamMsg::Stop { stream },
            kind::STOPPED => StreamMsg::Stopped {
                stream,
                tail: pair(r, "stopped tail")?,
            },
            kind::STATUS => StreamMsg::Status {
                stream,
                req: r.u64("status req")?,
            },
            kind::STATUS_IS => StreamMsg::StatusIs {
                stream,
                req: r.u64("status req")?,
                row: r.blob("status row")?,
            },
            kind::WRITE => StreamMsg::Write {
                stream,
                req: r.u64("write req")?,
                reference: r.name("write reference")?,
                publish: r.blob("write publish")?,
            },
            kind::WRITTEN => StreamMsg::Written {
                stream,
                req: r.u64("written req")?,
                code: r.u16("written code")?,
            },
            k => return Err(CodecError::UnknownKind(k)),
        })
    }
}

#[cfg(test)]
pub(crate) fn examples() -> Vec<StreamMsg> {
    let s = StreamRef {
        vhost: "/".into(),
        name: Bytes::from_static(b"s\xff"),
        epoch: 3,
    };
    vec![
        StreamMsg::Follow { stream: s.clone() },
        StreamMsg::Overview {
            stream: s.clone(),
            range: Some((0, 99)),
            epochs: vec![(1, 40), (3, 90)],
        },
        StreamMsg::Overview {
            stream: s.clone(),
            range: None,
            epochs: vec![],
        },
        StreamMsg::From {
            stream: s.clone(),
            next: 100,
            last: Some((3, 90)),
        },
        StreamMsg::From {
            stream: s.clone(),
            next: 0,
            last: None,
        },
        StreamMsg::Chunks {
            stream: s.clone(),
            committed: Some(90),
            bytes: Bytes::from_static(b"\x50\x00chunk"),
        },
        StreamMsg::Chunks {
            stream: s.clone(),
            committed: None,
            bytes: Bytes::new(),
        },
        StreamMsg::Ack {
            stream: s.clone(),
            last: 90,
            next: 100,
        },
        StreamMsg::Refuse {
            stream: s.clone(),
            why: "not the leader".into(),
        },
        StreamMsg::Stop { stream: s.clone() },
        StreamMsg::Write {
            stream: s.clone(),
            req: 3,
            reference: "p".into(),
            publish: Bytes::from_static(b"\x00\x02\x00\x02\x00\x00\x00\x00\x00"),
        },
        StreamMsg::Written {
            stream: s.clone(),
            req: 3,
            code: 1,
        },
        StreamMsg::Status {
            stream: s.clone(),
            req: 7,
        },
        StreamMsg::StatusIs {
            stream: s.clone(),
            req: 7,
            row: Bytes::from_static(b"{}"),
        },
        StreamMsg::Stopped {
            stream: s.clone(),
            tail: Some((3, 90)),
        },
        StreamMsg::Stopped {
            stream: s.clone(),
            tail: None,
        },
        StreamMsg::Track {
            stream: s,
            reference: "consumer-1".into(),
            offset: 77,
        },
    ]
}
