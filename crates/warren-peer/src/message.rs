//! The messages, one per frame kind, and their encoding.

use bytes::{BufMut, Bytes, BytesMut};

use crate::error::CodecError;
use crate::frame::{begin_frame, end_frame, Frame};
use crate::queue::QueueMsg;
use crate::stream::StreamMsg;
use crate::wire::{put_blob, put_name, Reader};

/// Frame kinds. Handshake kinds are below 0x10; a node accepts only those
/// until the handshake is done, and none of them after.
pub mod kind {
    pub const HELLO: u8 = 0x01;
    pub const CHALLENGE: u8 = 0x02;
    pub const PROOF: u8 = 0x03;
    pub const WELCOME: u8 = 0x04;
    pub const REFUSED: u8 = 0x05;
    pub const PING: u8 = 0x10;
    pub const PONG: u8 = 0x11;
    pub const RAFT: u8 = 0x20;
    pub const REQUEST: u8 = 0x30;
    pub const REPLY: u8 = 0x31;
    pub const GOODBYE: u8 = 0x7f;
}

/// One Raft message for one group. The message is the Raft library's own
/// encoding, carried as is: this layer routes by group and never looks
/// inside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RaftEnvelope {
    pub group: u64,
    pub message: Bytes,
}

/// Bytes a [`RaftEnvelope`] takes on the wire besides its message: a
/// sender cuts batches to fit [`crate::frame::FRAME_MAX`] with it.
pub const RAFT_ENVELOPE_OVERHEAD: usize = 12;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// Dialer: the versions it speaks, who it is, a fresh nonce.
    Hello {
        version_min: u16,
        version_max: u16,
        cluster: String,
        node: String,
        nonce: [u8; 32],
    },
    /// Acceptor: the version chosen, who it is, its nonce, its MAC.
    Challenge {
        version: u16,
        cluster: String,
        node: String,
        nonce: [u8; 32],
        proof: [u8; 32],
    },
    /// Dialer: its MAC.
    Proof {
        proof: [u8; 32],
    },
    /// Acceptor: the dialer is in.
    Welcome,
    /// Either side, during the handshake: why not (then the socket closes).
    Refused {
        reason: String,
    },
    /// The node pair's failure detector: one ping per interval per pair,
    /// never one per Raft group.
    Ping {
        seq: u64,
    },
    Pong {
        seq: u64,
    },
    /// Raft messages for any number of groups, in the order sent.
    Raft {
        batch: Vec<RaftEnvelope>,
    },
    /// A call to the peer (a command for the metadata leader, an operation
    /// on a queue the peer hosts); the body is the caller's encoding.
    Request {
        id: u64,
        body: Bytes,
    },
    /// The answer to `Request { id }`: `ok` false when the body is an error.
    Reply {
        id: u64,
        ok: bool,
        body: Bytes,
    },
    /// The queue protocol ([`crate::queue`]): kinds 0x40 to 0x4f.
    Queue(QueueMsg),
    /// The stream replication protocol ([`crate::stream`]): kinds 0x50
    /// to 0x5c.
    Stream(StreamMsg),
    /// The node is leaving (shutdown or removed); no more frames follow.
    Goodbye {
        reason: String,
    },
}

impl Message {
    /// Is this a handshake message (allowed only before `Welcome`)?
    pub fn is_handshake(&self) -> bool {
        self.kind() < 0x10
    }

    pub fn kind(&self) -> u8 {
        match self {
            Message::Hello { .. } => kind::HELLO,
            Message::Challenge { .. } => kind::CHALLENGE,
            Message::Proof { .. } => kind::PROOF,
            Message::Welcome => kind::WELCOME,
            Message::Refused { .. } => kind::REFUSED,
            Message::Ping { .. } => kind::PING,
            Message::Pong { .. } => kind::PONG,
            Message::Raft { .. } => kind::RAFT,
            Message::Request { .. } => kind::REQUEST,
            Message::Reply { .. } => kind::REPLY,
            Message::Queue(q) => q.kind(),
            Message::Stream(m) => m.kind(),
            Message::Goodbye { .. } => kind::GOODBYE,
        }
    }

    /// Like [`Message::encode`], but a large body that is sent as it is
    /// (replicated chunk bytes) is not copied: the frame's head goes to
    /// `out` and the body is returned, to be written right after it.
    pub fn encode_split(&self, out: &mut BytesMut) -> Option<Bytes> {
        if let Message::Stream(m) = self {
            if let Some(body) = m.encode_head(out) {
                return Some(body);
            }
        }
        self.encode(out);
        None
    }

    /// Append this message as one frame.
    pub fn encode(&self, out: &mut BytesMut) {
        let at = begin_frame(out, self.kind());
        match self {
            Message::Hello {
                version_min,
                version_max,
                cluster,
                node,
                nonce,
            } => {
                out.put_u16(*version_min);
                out.put_u16(*version_max);
                put_name(out, cluster);
                put_name(out, node);
                out.put_slice(nonce);
            }
            Message::Challenge {
                version,
                cluster,
                node,
                nonce,
                proof,
            } => {
                out.put_u16(*version);
                put_name(out, cluster);
                put_name(out, node);
                out.put_slice(nonce);
                out.put_slice(proof);
            }
            Message::Proof { proof } => out.put_slice(proof),
            Message::Welcome => {}
            Message::Refused { reason } | Message::Goodbye { reason } => put_name(out, reason),
            Message::Ping { seq } | Message::Pong { seq } => out.put_u64(*seq),
            Message::Raft { batch } => {
                out.put_u32(batch.len() as u32);
                for e in batch {
                    out.put_u64(e.group);
                    put_blob(out, &e.message);
                }
            }
            Message::Request { id, body } => {
                out.put_u64(*id);
                put_blob(out, body);
            }
            Message::Reply { id, ok, body } => {
                out.put_u64(*id);
                out.put_u8(*ok as u8);
                put_blob(out, body);
            }
            Message::Queue(q) => q.encode_fields(out),
            Message::Stream(m) => m.encode_fields(out),
        }
        end_frame(out, at);
    }

    /// Decode a frame's message: every field present, nothing left over.
    pub fn decode(frame: Frame) -> Result<Message, CodecError> {
        let mut r = Reader::new(frame.body);
        let m = match frame.kind {
            kind::HELLO => Message::Hello {
                version_min: r.u16("hello version_min")?,
                version_max: r.u16("hello version_max")?,
                cluster: r.name("hello cluster")?,
                node: r.name("hello node")?,
                nonce: r.array32("hello nonce")?,
            },
            kind::CHALLENGE => Message::Challenge {
                version: r.u16("challenge version")?,
                cluster: r.name("challenge cluster")?,
                node: r.name("challenge node")?,
                nonce: r.array32("challenge nonce")?,
                proof: r.array32("challenge proof")?,
            },
            kind::PROOF => Message::Proof {
                proof: r.array32("proof")?,
            },
            kind::WELCOME => Message::Welcome,
            kind::REFUSED => Message::Refused {
                reason: r.name("refused reason")?,
            },
            kind::PING => Message::Ping {
                seq: r.u64("ping seq")?,
            },
            kind::PONG => Message::Pong {
                seq: r.u64("pong seq")?,
            },
            kind::RAFT => {
                let n = r.u32("raft batch count")? as usize;
                // Each envelope takes at least its overhead: a count the
                // frame cannot hold is refused before anything is reserved.
                if n > r.remaining() / RAFT_ENVELOPE_OVERHEAD {
                    return Err(CodecError::Invalid(format!(
                        "raft batch of {n} messages in {} bytes",
                        r.remaining()
                    )));
                }
                let mut batch = Vec::with_capacity(n);
                for _ in 0..n {
                    batch.push(RaftEnvelope {
                        group: r.u64("raft group")?,
                        message: r.blob("raft message")?,
                    });
                }
                Message::Raft { batch }
            }
            kind::REQUEST => Message::Request {
                id: r.u64("request id")?,
                body: r.blob("request body")?,
            },
            kind::REPLY => Message::Reply {
                id: r.u64("reply id")?,
                ok: r.bool("reply ok")?,
                body: r.blob("reply body")?,
            },
            kind::GOODBYE => Message::Goodbye {
                reason: r.name("goodbye reason")?,
            },
            k if QueueMsg::is_queue_kind(k) => Message::Queue(QueueMsg::decode_fields(k, &mut r)?),
            k if StreamMsg::is_stream_kind(k) => Message::Stream(StreamMsg::decode_fields(k, &mut r)?),
            k => return Err(CodecError::UnknownKind(k)),
        };
        r.finish()?;
        Ok(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{parse_frame, FRAME_MAX};

    fn every_kind() -> Vec<Message> {
        vec![
            Message::Hello {
                version_min: 1,
                version_max: 3,
                cluster: "warren".into(),
                node: "warren@node-1".into(),
                nonce: [7; 32],
            },
            Message::Challenge {
                version: 1,
                cluster: "warren".into(),
                node: "warren@node-2".into(),
                nonce: [8; 32],
                proof: [9; 32],
            },
            Message::Proof { proof: [3; 32] },
            Message::Welcome,
            Message::Refused {
                reason: "wrong cluster".into(),
            },
            Message::Ping { seq: 42 },
            Message::Pong { seq: 42 },
            Message::Raft {
                batch: vec![
                    RaftEnvelope {
                        group: 0,
                        message: Bytes::from_static(b"vote"),
                    },
                    RaftEnvelope {
                        group: u64::MAX,
                        message: Bytes::new(),
                    },
                ],
            },
            Message::Raft { batch: vec![] },
            Message::Request {
                id: 5,
                body: Bytes::from_static(b"declare"),
            },
            Message::Reply {
                id: 5,
                ok: false,
                body: Bytes::from_static(b"no leader"),
            },
            Message::Goodbye {
                reason: "shutdown".into(),
            },
        ]
        .into_iter()
        .chain(crate::queue::examples().into_iter().map(Message::Queue))
        .chain(crate::stream::examples().into_iter().map(Message::Stream))
        .collect()
    }

    #[test]
    fn every_message_round_trips_through_one_stream() {
        let mut wire = BytesMut::new();
        let all = every_kind();
        for m in &all {
            m.encode(&mut wire);
        }
        for m in &all {
            let f = parse_frame(&mut wire, FRAME_MAX).unwrap().unwrap();
            assert_eq!(&Message::decode(f).unwrap(), m);
        }
        assert!(wire.is_empty());
    }

    #[test]
    fn a_split_frame_is_the_same_bytes_as_a_whole_one() {
        let m = Message::Stream(crate::stream::StreamMsg::Chunks {
            stream: crate::stream::StreamRef {
                vhost: "/".into(),
                name: Bytes::from_static(b"s"),
                epoch: 2,
            },
            committed: Some(5),
            bytes: Bytes::from(vec![7u8; crate::stream::SPLIT_MIN + 3]),
        });
        let mut whole = BytesMut::new();
        m.encode(&mut whole);
        let mut head = BytesMut::new();
        let body = m.encode_split(&mut head).expect("split");
        head.extend_from_slice(&body);
        assert_eq!(head, whole);
        let f = parse_frame(&mut head, FRAME_MAX).unwrap().unwrap();
        assert_eq!(Message::decode(f).unwrap(), m);
        // Small ones are encoded whole.
        let mut out = BytesMut::new();
        assert!(every_kind()[0].encode_split(&mut out).is_none());
        assert!(!out.is_empty());
    }

    #[test]
    fn truncated_or_padded_messages_are_refused() {
        for m in every_kind() {
            let mut wire = BytesMut::new();
            m.encode(&mut wire);
            let f = parse_frame(&mut wire, FRAME_MAX).unwrap().unwrap();
            for cut in 0..f.body.len() {
                let short = Frame {
                    kind: f.kind,
                    body: f.body.slice(..cut),
                };
                assert!(Message::decode(short).is_err(), "{m:?} cut at {cut}");
            }
            let mut long = f.body.to_vec();
            long.push(0);
            let padded = Frame {
                kind: f.kind,
                body: long.into(),
            };
            assert_eq!(Message::decode(padded), Err(CodecError::Trailing(1)));
        }
    }

    #[test]
    fn a_huge_batch_count_is_refused_before_reserving() {
        let f = Frame {
            kind: kind::RAFT,
            body: Bytes::from_static(&[0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]),
        };
        assert!(matches!(Message::decode(f), Err(CodecError::Invalid(_))));
    }

    #[test]
    fn unknown_kinds_and_bad_fields_are_errors() {
        let f = Frame {
            kind: 0x66,
            body: Bytes::new(),
        };
        assert_eq!(Message::decode(f), Err(CodecError::UnknownKind(0x66)));
        let f = Frame {
            kind: kind::REPLY,
            body: Bytes::from_static(&[0, 0, 0, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0]),
        };
        assert!(matches!(Message::decode(f), Err(CodecError::Invalid(_))));
        let f = Frame {
            kind: kind::REFUSED,
            body: Bytes::from_static(&[2, 0xff, 0xfe]),
        };
        assert!(matches!(Message::decode(f), Err(CodecError::Invalid(_))));
    }

    #[test]
    fn only_handshake_kinds_are_handshake_messages() {
        for m in every_kind() {
            let expected = matches!(
                m,
                Message::Hello { .. }
                    | Message::Challenge { .. }
                    | Message::Proof { .. }
                    | Message::Welcome
                    | Message::Refused { .. }
            );
            assert_eq!(m.is_handshake(), expected, "{m:?}");
        }
    }

    #[test]
    fn long_names_are_cut_at_a_character_boundary() {
        let m = Message::Goodbye {
            reason: "é".repeat(200),
        };
        let mut wire = BytesMut::new();
        m.encode(&mut wire);
        let f = parse_frame(&mut wire, FRAME_MAX).unwrap().unwrap();
        let Message::Goodbye { reason } = Message::decode(f).unwrap() else {
            panic!()
        };
        assert_eq!(reason, "é".repeat(127));
    }
}
