//! The stream protocol as RabbitMQ's own stream clients' suites expect
//! it (issue 32, items 12-14), in raw frames: a Publish frame of many
//! messages is cut into chunks as osiris cuts them (so StreamStats after
//! 1,000 messages in one frame reads first 0, last and committed above
//! 0), credit counts chunks (a subscription given 1 credit gets one
//! small chunk, then no more until it gives more), and deleting a stream
//! tells every connection with a publisher or subscription on it, idle
//! or not (MetadataUpdate, stream not available). Publishers sharing a
//! connection keep its order in the stream.

use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use warren_stream::chunk::ChunkHeader;
use warren_stream::command::{key, parse_frame, Command, OffsetSpec};

use crate::common::*;

const STREAM_STATS: u16 = 0x001c;

/// A stream connection driven frame by frame.
struct Raw {
    s: TcpStream,
    buf: BytesMut,
    next_id: u32,
}

impl Raw {
    /// Connect, log in as guest and open vhost `/`.
    async fn open(port: u16) -> Raw {
        let s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let mut r = Raw {
            s,
            buf: BytesMut::new(),
            next_id: 10,
        };
        let mut out = BytesMut::new();
        Command::PeerProperties {
            correlation_id: 1,
            properties: vec![],
        }
        .encode(&mut out);
        Command::SaslHandshake { correlation_id: 2 }.encode(&mut out);
        Command::SaslAuthenticate {
            correlation_id: 3,
            mechanism: "PLAIN".into(),
            data: Bytes::from_static(b"\0guest\0guest"),
        }
        .encode(&mut out);
        Command::Tune {
            frame_max: 1 << 20,
            heartbeat: 0,
        }
        .encode(&mut out);
        Command::Open {
            correlation_id: 4,
            vhost: "/".into(),
        }
        .encode(&mut out);
        r.s.write_all(&out).await.unwrap();
        r.answer(4).await;
        r
    }

    async fn send(&mut self, c: Command) {
        let mut out = BytesMut::new();
        c.encode(&mut out);
        self.s.write_all(&out).await.unwrap();
    }

    fn id(&mut self) -> u32 {
        self.next_id += 1;
        self.next_id
    }

    /// The next frame (its content after the size), or None after `wait`.
    async fn frame(&mut self, wait: Duration) -> Option<Bytes> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if let Some(f) = parse_frame(&mut self.buf, 0).unwrap() {
                return Some(f);
            }
            match tokio::time::timeout_at(deadline, self.s.read_buf(&mut self.buf)).await {
                Ok(Ok(n)) if n > 0 => {}
                _ => return None,
            }
        }
    }

    /// Frames until the response with `correlation_id`: its code and
    /// what follows it; other frames are dropped.
    async fn answer(&mut self, correlation_id: u32) -> (u16, Bytes) {
        loop {
            let f = self.frame(Duration::from_secs(10)).await.expect("an answer");
            let mut b = f.clone();
            let k = b.get_u16();
            b.get_u16();
            if k & key::RESPONSE != 0 && b.len() >= 6 && b.get_u32() == correlation_id {
                return (b.get_u16(), b);
            }
        }
    }

    async fn create(&mut self, stream: &str) {
        let id = self.id();
        self.send(Command::Create {
            correlation_id: id,
            stream: stream.into(),
            arguments: vec![],
        })
        .await;
        assert_eq!(self.answer(id).await.0, 1);
    }

    async fn declare_publisher(&mut self, publisher_id: u8, stream: &str) {
        let id = self.id();
        self.send(Command::DeclarePublisher {
            correlation_id: id,
            publisher_id,
            reference: None,
            stream: stream.into(),
        })
        .await;
        assert_eq!(self.answer(id).await.0, 1);
    }

    /// `n` messages in one Publish frame, then wait for all confirms.
    async fn publish_one_frame(&mut self, publisher_id: u8, n: u64) {
        let messages = (0..n).map(|i| (i, Bytes::from(format!("m{i}")))).collect();
        self.send(Command::Publish {
            publisher_id,
            messages,
        })
        .await;
        let mut confirmed = 0;
        while confirmed < n {
            let f = self.frame(Duration::from_secs(10)).await.expect("confirms");
            if let Ok(Command::PublishConfirm { ids, .. }) = Command::decode(f) {
                confirmed += ids.len() as u64;
            }
        }
    }

    async fn subscribe(&mut self, subscription_id: u8, stream: &str, credit: u16) {
        let id = self.id();
        self.send(Command::Subscribe {
            correlation_id: id,
            subscription_id,
            stream: stream.into(),
            offset: OffsetSpec::First,
            credit,
            properties: vec![],
        })
        .await;
        assert_eq!(self.answer(id).await.0, 1);
    }

    /// Deliver frames within `wait`: each chunk's (first offset, records).
    async fn chunks(&mut self, wait: Duration) -> Vec<(u64, u32)> {
        let mut got = Vec::new();
        while let Some(f) = self.frame(wait).await {
            if let Ok(Command::Deliver { chunk, .. }) = Command::decode(f) {
                let h = ChunkHeader::parse(&chunk).unwrap();
                got.push((h.first_offset, h.num_records));
            }
        }
        got
    }

    /// StreamStats: the answer's (key, value) pairs.
    async fn stats(&mut self, stream: &str) -> Vec<(String, i64)> {
        let id = self.id();
        let mut out = BytesMut::new();
        out.put_u32(0);
        out.put_u16(STREAM_STATS);
        out.put_u16(1);
        out.put_u32(id);
        out.put_i16(stream.len() as i16);
        out.put_slice(stream.as_bytes());
        let size = (out.len() - 4) as u32;
        out[..4].copy_from_slice(&size.to_be_bytes());
        self.s.write_all(&out).await.unwrap();
        let (code, mut rest) = self.answer(id).await;
        assert_eq!(code, 1);
        let n = rest.get_i32();
        (0..n)
            .map(|_| {
                let len = rest.get_i16() as usize;
                let k = String::from_utf8(rest.split_to(len).to_vec()).unwrap();
                (k, rest.get_i64())
            })
            .collect()
    }
}

#[tokio::test]
async fn a_publish_frame_of_1000_is_cut_into_chunks_and_stream_stats_reads_them() {
    let b = Broker::start().await;
    let mut c = Raw::open(b.stream_port()).await;
    c.create("stats").await;
    let empty = c.stats("stats").await;
    for k in ["first_chunk_id", "committed_chunk_id", "last_chunk_id"] {
        assert!(empty.contains(&(k.to_string(), -1)), "{k} in {empty:?}");
    }
    c.declare_publisher(1, "stats").await;
    c.publish_one_frame(1, 1000).await;
    let stats = c.stats("stats").await;
    let get = |k: &str| stats.iter().find(|(x, _)| x == k).map(|(_, v)| *v);
    assert_eq!(get("first_chunk_id"), Some(0), "{stats:?}");
    let last = get("last_chunk_id").unwrap();
    assert!(last > 0, "{stats:?}");
    assert_eq!(get("committed_chunk_id"), Some(last));
    // As osiris cuts a burst: 32, 64, 128, 256, 512 and the rest.
    let mut r = Raw::open(b.stream_port()).await;
    r.subscribe(1, "stats", 100).await;
    let chunks = r.chunks(Duration::from_millis(500)).await;
    let sizes: Vec<u32> = chunks.iter().map(|c| c.1).collect();
    assert_eq!(sizes, vec![32, 64, 128, 256, 512, 8]);
    assert_eq!(chunks.last().unwrap().0 as i64, last);
}

#[tokio::test]
async fn credit_counts_chunks() {
    let b = Broker::start().await;
    let mut c = Raw::open(b.stream_port()).await;
    c.create("credit").await;
    c.declare_publisher(1, "credit").await;
    c.publish_one_frame(1, 500).await;
    // One credit: one small chunk, then nothing until more is given.
    let mut r = Raw::open(b.stream_port()).await;
    r.subscribe(1, "credit", 1).await;
    let first = r.chunks(Duration::from_millis(500)).await;
    assert_eq!(first.len(), 1, "{first:?}");
    assert!(first[0].1 < 100, "{first:?}");
    r.send(Command::Credit {
        subscription_id: 1,
        credit: 20,
    })
    .await;
    let rest = r.chunks(Duration::from_millis(500)).await;
    let total: u32 = first.iter().chain(&rest).map(|c| c.1).sum();
    assert_eq!(total, 500, "{rest:?}");
    // Two credits and a consumer that asks for no more: exactly two.
    c.publish_one_frame(1, 10_000).await;
    let mut r = Raw::open(b.stream_port()).await;
    r.subscribe(2, "credit", 2).await;
    let got = r.chunks(Duration::from_millis(800)).await;
    assert_eq!(got.len(), 2, "{got:?}");
}

/// MetadataUpdate for `stream` (code 6) among the frames within 300 ms
/// (the Go client's suite gives its clients 200 ms to be told)?
async fn told_of(r: &mut Raw, stream: &str) -> bool {
    while let Some(mut f) = r.frame(Duration::from_millis(300)).await {
        if f.get_u16() == key::METADATA_UPDATE {
            f.get_u16();
            let code = f.get_u16();
            let len = f.get_i16() as usize;
            if code == 6 && &f[..len] == stream.as_bytes() {
                return true;
            }
        }
    }
    false
}

#[tokio::test]
async fn deleting_a_stream_tells_its_idle_publishers_and_subscribers() {
    let b = Broker::start().await;
    let mut admin = Raw::open(b.stream_port()).await;
    admin.create("doomed").await;
    admin.declare_publisher(1, "doomed").await;
    admin.publish_one_frame(1, 10).await;
    // A connection with only a publisher, idle.
    let mut p = Raw::open(b.stream_port()).await;
    p.declare_publisher(3, "doomed").await;
    // One with a subscription that has no credit left mid-stream.
    let mut s = Raw::open(b.stream_port()).await;
    s.subscribe(4, "doomed", 0).await;
    // And one at the end of the stream.
    let mut e = Raw::open(b.stream_port()).await;
    e.subscribe(5, "doomed", 10).await;
    assert_eq!(e.chunks(Duration::from_millis(300)).await.len(), 1);
    let id = admin.id();
    admin
        .send(Command::Delete {
            correlation_id: id,
            stream: "doomed".into(),
        })
        .await;
    assert_eq!(admin.answer(id).await.0, 1);
    assert!(told_of(&mut admin, "doomed").await, "the deleting connection");
    assert!(told_of(&mut p, "doomed").await, "an idle publisher's connection");
    assert!(told_of(&mut s, "doomed").await, "a subscription without credit");
    assert!(told_of(&mut e, "doomed").await, "a subscription at the end");
}

/// On three nodes: a replicated stream deleted through node 1 tells a
/// publisher's connection on node 2 and a subscription's on node 3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_replicated_stream_tells_connections_on_every_node() {
    let (_, nodes) = crate::cluster::three_linked().await;
    let mut admin = Raw::open(nodes[0].stream_port()).await;
    admin.create("gone").await;
    crate::cluster::in_step(&nodes).await;
    let mut p = Raw::open(nodes[1].stream_port()).await;
    // The replica's member may take a moment to be made.
    let mut declared = false;
    for _ in 0..50 {
        let id = p.id();
        p.send(Command::DeclarePublisher {
            correlation_id: id,
            publisher_id: 1,
            reference: None,
            stream: "gone".into(),
        })
        .await;
        if p.answer(id).await.0 == 1 {
            declared = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(declared, "a publisher on node 2");
    let mut s = Raw::open(nodes[2].stream_port()).await;
    s.subscribe(1, "gone", 10).await;
    let id = admin.id();
    admin
        .send(Command::Delete {
            correlation_id: id,
            stream: "gone".into(),
        })
        .await;
    assert_eq!(admin.answer(id).await.0, 1);
    assert!(
        told_of(&mut p, "gone").await,
        "the publisher's connection on node 2"
    );
    assert!(
        told_of(&mut s, "gone").await,
        "the subscription's connection on node 3"
    );
}

/// Publishers sharing a connection and a stream: the stream holds their
/// messages in the order the connection sent them, as RabbitMQ's (whose
/// reader hands each Publish frame to the stream's writer as it comes).
/// Frames of two publishers are sent interleaved without waiting, so one
/// publisher's next frames arrive while its chunk is being written.
#[tokio::test]
async fn publishers_on_one_connection_keep_its_order_in_the_stream() {
    use warren_stream::chunk::{Chunk, Entry};
    let b = Broker::start().await;
    let mut c = Raw::open(b.stream_port()).await;
    c.create("shared-order").await;
    c.declare_publisher(1, "shared-order").await;
    c.declare_publisher(2, "shared-order").await;
    const FRAMES: u64 = 3_000;
    const PER_FRAME: u64 = 20;
    let mut sent = Vec::new();
    let mut next_id = [0u64; 3];
    let mut out = BytesMut::new();
    for k in 0..FRAMES {
        // Runs of one publisher of varying length.
        let publisher_id: u8 = if (k * 7919) % 5 < 3 { 1 } else { 2 };
        let messages = (0..PER_FRAME)
            .map(|i| {
                let id = next_id[publisher_id as usize];
                next_id[publisher_id as usize] += 1;
                let body = format!("{k}:{i}");
                sent.push(body.clone());
                (id, Bytes::from(body))
            })
            .collect();
        Command::Publish {
            publisher_id,
            messages,
        }
        .encode(&mut out);
        if out.len() > 16 * 1024 {
            c.s.write_all(&out).await.unwrap();
            out.clear();
        }
    }
    c.s.write_all(&out).await.unwrap();
    let mut confirmed = 0;
    while confirmed < FRAMES * PER_FRAME {
        let f = c.frame(Duration::from_secs(20)).await.expect("confirms");
        if let Ok(Command::PublishConfirm { ids, .. }) = Command::decode(f) {
            confirmed += ids.len() as u64;
        }
    }
    c.subscribe(1, "shared-order", u16::MAX).await;
    let mut stored = Vec::new();
    while (stored.len() as u64) < FRAMES * PER_FRAME {
        let f = c.frame(Duration::from_secs(20)).await.expect("deliveries");
        if let Ok(Command::Deliver { chunk, .. }) = Command::decode(f) {
            for e in Chunk::parse(&chunk, true).unwrap().entries {
                match e {
                    Entry::Simple(b) => stored.push(String::from_utf8(b.to_vec()).unwrap()),
                    other => panic!("a sub-batch was never sent: {other:?}"),
                }
            }
        }
    }
    let first_moved = sent.iter().zip(&stored).position(|(a, b)| a != b);
    assert_eq!(first_moved, None, "the stream's order is not the connection's");
    assert_eq!(stored.len(), sent.len());
}

/// Named publishers taking turns on one connection share chunks; each
/// is still deduplicated against what it stored: frames sent again are
/// confirmed and not stored twice, and each name's sequence is its last id.
#[tokio::test]
async fn named_publishers_taking_turns_are_deduplicated_each() {
    use warren_stream::chunk::{Chunk, Entry};
    let b = Broker::start().await;
    let mut c = Raw::open(b.stream_port()).await;
    c.create("named-turns").await;
    for (publisher_id, name) in [(1u8, "a"), (2, "b")] {
        let id = c.id();
        c.send(Command::DeclarePublisher {
            correlation_id: id,
            publisher_id,
            reference: Some(name.into()),
            stream: "named-turns".into(),
        })
        .await;
        assert_eq!(c.answer(id).await.0, 1);
    }
    // Frames k of each publisher carry ids 10k..10k+9; every frame goes
    // twice, the second time after the other publisher's next frame.
    let mut out = BytesMut::new();
    let frame = |publisher_id: u8, k: u64, out: &mut BytesMut| {
        let messages = (0..10)
            .map(|i| (k * 10 + i, Bytes::from(format!("{publisher_id}:{}", k * 10 + i))))
            .collect();
        Command::Publish {
            publisher_id,
            messages,
        }
        .encode(out);
    };
    const FRAMES: u64 = 400;
    for k in 0..FRAMES {
        frame(1, k, &mut out);
        frame(2, k, &mut out);
        if k > 0 {
            frame(1, k - 1, &mut out);
        }
        if out.len() > 8 * 1024 {
            c.s.write_all(&out).await.unwrap();
            out.clear();
        }
    }
    c.s.write_all(&out).await.unwrap();
    let expected_confirms = FRAMES * 10 * 2 + (FRAMES - 1) * 10;
    let mut confirmed = 0;
    while confirmed < expected_confirms {
        let f = c.frame(Duration::from_secs(20)).await.expect("confirms");
        if let Ok(Command::PublishConfirm { ids, .. }) = Command::decode(f) {
            confirmed += ids.len() as u64;
        }
    }
    c.subscribe(1, "named-turns", u16::MAX).await;
    let mut stored = Vec::new();
    while (stored.len() as u64) < FRAMES * 20 {
        let f = c.frame(Duration::from_secs(20)).await.expect("deliveries");
        if let Ok(Command::Deliver { chunk, .. }) = Command::decode(f) {
            for e in Chunk::parse(&chunk, true).unwrap().entries {
                if let Entry::Simple(b) = e {
                    stored.push(String::from_utf8(b.to_vec()).unwrap());
                }
            }
        }
    }
    assert!(
        c.frame(Duration::from_millis(300)).await.is_none(),
        "nothing stored twice"
    );
    for name in ["1", "2"] {
        let mine: Vec<&String> = stored
            .iter()
            .filter(|m| m.starts_with(&format!("{name}:")))
            .collect();
        let want: Vec<String> = (0..FRAMES * 10).map(|i| format!("{name}:{i}")).collect();
        assert_eq!(mine.len(), want.len(), "publisher {name}");
        assert!(
            mine.iter().zip(&want).all(|(a, b)| *a == b),
            "publisher {name} in order"
        );
    }
}
