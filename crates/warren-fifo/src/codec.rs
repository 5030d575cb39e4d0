//! Commands and the whole state as bytes: commands are what a quorum
//! queue's Raft entries carry, the state is what its snapshots carry.
//! Little-endian integers; every count is checked against the bytes that
//! remain before anything is allocated, so a bad entry or snapshot is an
//! error, never a panic or a large allocation.
//!
//! ```text
//! command = kind u8, then by kind:
//!   1 enqueue  now u64, expires_at u64 (0: none), size u32, the message (the rest)
//!   2 tick     now u64
//!   3 consume  consumer u64, prefetch u32, auto_settle u8, priority i32
//!   4 credit   consumer u64, credit u32
//!   5 settle   consumer u64, n u32, n ids u64
//!   6 return   consumer u64, failed u8, n u32, n ids u64
//!   7 discard  consumer u64, n u32, n ids u64
//!   8 cancel   consumer u64
//!   9 purge
//!  10 dequeue  consumer u64, id u64, settled u8
//!  11 enqueue  as 1, then priority u8, then the message (a priority above 0)
//!  12 enqueue  as 11, then key_len u16, the key, then the message (a deduplication key)
//!  13 settle_dlx n u32, n ids u64 (at-least-once dead letters every target has)
//!  14 set_config  config (as in a version 4 state), dlx_at_least_once u8
//!  15 dequeue_next consumer u64, settled u8 (the next message to serve)
//!  16 return_as consumer u64, failed u8, id u64, then the message's new
//!     properties (the rest; a modified outcome's annotations merged in):
//!     a return of one message, which every member stores anew
//!  17 return    consumer u64, failed u8, now u64, until u64, n u32, n ids
//!     u64 (kind 6 with the proposer's time, which a delayed retry waits
//!     from, and a time before which the message is not served, 0: none)
//!  18 return_as consumer u64, failed u8, now u64, until u64, id u64, then
//!     the properties (kind 16 with both times)
//!  19 discard_as consumer u64, id u64, then the message's new properties
//!     (the rest): a discard of one message, dead-lettered with them
//! set_config, since delayed retries: then retry u8 (0 none, 1 all,
//!     2 failed, 3 returned), min u64, max u64 (absent: none)
//! header = id u64, size u32, expires_at u64 (0: none), delivery_count u32, acquired_count u32,
//!          priority u8 (version 3)
//! state  = version u8 (3), delivery_limit u32 (0: none, else limit + 1),
//!          max_length u64, max_bytes u64 (u64::MAX: none), reject_publish u8,
//!          single_active u8, max_priority u8, dedup_window u32, dedup_ttl u64
//!          (u64::MAX: none) (these three version 3), now u64,
//!          n u8 levels (version 3; version 2 has one), lowest first, each:
//!            n u32 returns headers, n u32 waiting headers,
//!          n u32 consumers (id u64, credit u32, prefetch u32, auto_settle u8, priority i32,
//!          n u32 headers),
//!          n u32 service order ids,
//!          n u32 deduplication keys (key_len u16, the key, at u64) (version 3),
//!          dlx_at_least_once u8, n u32 discards (header, reason u8) (version 4),
//!          the delayed retry as set_config ends, n u32 delayed returns
//!          (ready_at u64, header) (version 5)
//! ```
//!
//! Version 2 states and kind 1 enqueues (written before priorities) are
//! still read: one level, priority 0; version 3 states (before
//! at-least-once dead-lettering) have no discards.
//!
//! An enqueue's id is not in it: it is the Raft index of its entry, which
//! the proposer cannot know, so [`decode`] takes it.

use std::collections::{BTreeMap, VecDeque};

use crate::fifo::{
    Command, Config, Consumer, DeadLetterReason, DelayedRetry, Fifo, Header, Keys, Level, MsgId, RetryKind,
};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    #[error("a quorum queue command or state ends early")]
    Short,
    #[error("unknown quorum queue command kind {0}")]
    Kind(u8),
    #[error("unknown quorum queue state version {0}")]
    Version(u8),
    #[error("a quorum queue state that does not add up: {0}")]
    Inconsistent(&'static str),
}

/// A header's bytes in a version 2 state; a version 3 one adds its
/// priority.
const HEADER_LEN: usize = 28;
const STATE_VERSION: u8 = 5;

/// Append `c` (an enqueue's message goes after it: see [`encode_enqueue`]).
pub fn encode(c: &Command, out: &mut Vec<u8>) {
    match c {
        Command::Enqueue {
            now,
            expires_at,
            size,
            priority,
            key,
            ..
        } => encode_enqueue(*now, *expires_at, *size, *priority, key.as_deref(), out),
        Command::Tick { now } => {
            out.push(2);
            out.extend_from_slice(&now.to_le_bytes());
        }
        Command::Consume {
            consumer,
            prefetch,
            auto_settle,
            priority,
        } => {
            out.push(3);
            out.extend_from_slice(&consumer.to_le_bytes());
            out.extend_from_slice(&prefetch.to_le_bytes());
            out.push(*auto_settle as u8);
            out.extend_from_slice(&priority.to_le_bytes());
        }
        Command::Credit { consumer, credit } => {
            out.push(4);
            out.extend_from_slice(&consumer.to_le_bytes());
            out.extend_from_slice(&credit.to_le_bytes());
        }
        Command::Settle { consumer, ids } => ids_command(5, *consumer, None, ids, out),
        Command::Return {
            consumer,
            ids,
            failed,
            now,
            until,
        } => {
            out.push(17);
            out.extend_from_slice(&consumer.to_le_bytes());
            out.push(*failed as u8);
            out.extend_from_slice(&now.to_le_bytes());
            out.extend_from_slice(&until.to_le_bytes());
            out.extend_from_slice(&(ids.len() as u32).to_le_bytes());
            for id in ids {
                out.extend_from_slice(&id.to_le_bytes());
            }
        }
        Command::Discard { consumer, ids } => ids_command(7, *consumer, None, ids, out),
        Command::Cancel { consumer } => {
            out.push(8);
            out.extend_from_slice(&consumer.to_le_bytes());
        }
        Command::Purge => out.push(9),
        Command::Dequeue {
            consumer,
            id,
            settled,
        } => {
            out.push(10);
            out.extend_from_slice(&consumer.to_le_bytes());
            out.extend_from_slice(&id.to_le_bytes());
            out.push(*settled as u8);
        }
        Command::DequeueNext { consumer, settled } => {
            out.push(15);
            out.extend_from_slice(&consumer.to_le_bytes());
            out.push(*settled as u8);
        }
        Command::SetConfig(c) => {
            out.push(14);
            config(c, out);
            out.push(c.dlx_at_least_once as u8);
            delayed_retry(c, out);
        }
        Command::SettleDlx { ids } => {
            out.push(13);
            out.extend_from_slice(&(ids.len() as u32).to_le_bytes());
            for id in ids {
                out.extend_from_slice(&id.to_le_bytes());
            }
        }
    }
}

/// Deduplication keys longer than this are not kept (the message is not
/// deduplicated).
pub const MAX_KEY: usize = 1024;

/// An enqueue's fixed part; the caller appends the message. A key longer
/// than [`MAX_KEY`] is left out.
pub fn encode_enqueue(
    now: u64,
    expires_at: Option<u64>,
    size: u32,
    priority: u8,
    key: Option<&[u8]>,
    out: &mut Vec<u8>,
) {
    let key = key.filter(|k| k.len() <= MAX_KEY);
    out.push(match (priority, key) {
        (_, Some(_)) => 12,
        (0, None) => 1,
        _ => 11,
    });
    out.extend_from_slice(&now.to_le_bytes());
    out.extend_from_slice(&expires_at.unwrap_or(0).to_le_bytes());
    out.extend_from_slice(&size.to_le_bytes());
    if priority != 0 || key.is_some() {
        out.push(priority);
    }
    if let Some(k) = key {
        out.extend_from_slice(&(k.len() as u16).to_le_bytes());
        out.extend_from_slice(k);
    }
}

/// The fields of a return with new properties.
#[derive(Debug, Clone, Copy)]
pub struct ReturnAs {
    pub consumer: u64,
    pub id: MsgId,
    pub failed: bool,
    /// The proposer's time.
    pub now: u64,
    /// Not before then (`x-opt-delivery-time`); 0: as the queue says.
    pub until: u64,
}

/// A return of message `id` whose properties become `properties` (an
/// AMQP 1.0 modified outcome's annotations merged in): decoded as a
/// [`Command::Return`] with the properties as what follows it.
pub fn encode_return_as(r: ReturnAs, properties: &[u8], out: &mut Vec<u8>) {
    let ReturnAs {
        consumer,
        id,
        failed,
        now,
        until,
    } = r;
    out.push(18);
    out.extend_from_slice(&consumer.to_le_bytes());
    out.push(failed as u8);
    out.extend_from_slice(&now.to_le_bytes());
    out.extend_from_slice(&until.to_le_bytes());
    out.extend_from_slice(&id.to_le_bytes());
    out.extend_from_slice(properties);
}

/// A discard of message `id` that dead-letters it with new properties
/// (a modified outcome's annotations merged in; kind 19).
pub fn encode_discard_as(consumer: u64, id: MsgId, properties: &[u8], out: &mut Vec<u8>) {
    out.push(19);
    out.extend_from_slice(&consumer.to_le_bytes());
    out.extend_from_slice(&id.to_le_bytes());
    out.extend_from_slice(properties);
}

fn ids_command(kind: u8, consumer: u64, failed: Option<bool>, ids: &[MsgId], out: &mut Vec<u8>) {
    out.push(kind);
    out.extend_from_slice(&consumer.to_le_bytes());
    if let Some(f) = failed {
        out.push(f as u8);
    }
    out.extend_from_slice(&(ids.len() as u32).to_le_bytes());
    for id in ids {
        out.extend_from_slice(&id.to_le_bytes());
    }
}

/// A command from an entry at Raft index `index`, and what follows it (an
/// enqueue's message; empty otherwise).
/// Is `b` (an encoded command) one of a consumer's: consume, credit,
/// settle, return (with new properties too), discard or cancel? No
/// enqueue waits for these, so a leader may propose them ahead of
/// enqueues waiting for their turn.
pub fn is_consumer_command(b: &[u8]) -> bool {
    b.first()
        .is_some_and(|k| (3..=8).contains(k) || (16..=19).contains(k))
}

pub fn decode(index: u64, b: &[u8]) -> Result<(Command, &[u8]), CodecError> {
    let mut r = Reader::new(b);
    let c = match r.u8()? {
        kind @ (1 | 11 | 12) => {
            let now = r.u64()?;
            let expires_at = r.u64()?;
            let size = r.u32()?;
            let priority = if kind == 1 { 0 } else { r.u8()? };
            let key = if kind == 12 { Some(r.key()?) } else { None };
            Command::Enqueue {
                id: index,
                size,
                now,
                expires_at: (expires_at != 0).then_some(expires_at),
                priority,
                key,
            }
        }
        2 => Command::Tick { now: r.u64()? },
        3 => Command::Consume {
            consumer: r.u64()?,
            prefetch: r.u32()?,
            auto_settle: r.u8()? != 0,
            priority: r.u32()? as i32,
        },
        4 => Command::Credit {
            consumer: r.u64()?,
            credit: r.u32()?,
        },
        5 => Command::Settle {
            consumer: r.u64()?,
            ids: r.ids()?,
        },
        6 => {
            let consumer = r.u64()?;
            let failed = r.u8()? != 0;
            Command::Return {
                consumer,
                failed,
                ids: r.ids()?,
                now: 0,
                until: 0,
            }
        }
        17 => Command::Return {
            consumer: r.u64()?,
            failed: r.u8()? != 0,
            now: r.u64()?,
            until: r.u64()?,
            ids: r.ids()?,
        },
        18 => Command::Return {
            consumer: r.u64()?,
            failed: r.u8()? != 0,
            now: r.u64()?,
            until: r.u64()?,
            ids: vec![r.u64()?],
        },
        7 => Command::Discard {
            consumer: r.u64()?,
            ids: r.ids()?,
        },
        19 => Command::Discard {
            consumer: r.u64()?,
            ids: vec![r.u64()?],
        },
        8 => Command::Cancel { consumer: r.u64()? },
        9 => Command::Purge,
        10 => Command::Dequeue {
            consumer: r.u64()?,
            id: r.u64()?,
            settled: r.u8()? != 0,
        },
        13 => Command::SettleDlx { ids: r.ids()? },
        16 => Command::Return {
            consumer: r.u64()?,
            failed: r.u8()? != 0,
            ids: vec![r.u64()?],
            now: 0,
            until: 0,
        },
        15 => Command::DequeueNext {
            consumer: r.u64()?,
            settled: r.u8()? != 0,
        },
        14 => {
            r.v3 = true;
            let mut c = r.config()?;
            c.dlx_at_least_once = r.u8()? != 0;
            if !r.b.is_empty() {
                c.delayed_retry = r.delayed_retry()?;
            }
            Command::SetConfig(c)
        }
        k => return Err(CodecError::Kind(k)),
    };
    Ok((c, r.b))
}

/// The whole state, for a snapshot.
pub fn encode_state(f: &Fifo, out: &mut Vec<u8>) {
    out.push(STATE_VERSION);
    let c = f.config();
    config(c, out);
    out.extend_from_slice(&f.now().to_le_bytes());
    out.push(f.levels().len() as u8);
    for level in f.levels() {
        for line in [&level.returns, &level.waiting] {
            out.extend_from_slice(&(line.len() as u32).to_le_bytes());
            for h in line {
                header(h, out);
            }
        }
    }
    out.extend_from_slice(&(f.consumers().len() as u32).to_le_bytes());
    for (id, c) in f.consumers() {
        out.extend_from_slice(&id.to_le_bytes());
        out.extend_from_slice(&c.credit.to_le_bytes());
        out.extend_from_slice(&c.prefetch.to_le_bytes());
        out.push(c.auto_settle as u8);
        out.extend_from_slice(&c.priority.to_le_bytes());
        out.extend_from_slice(&(c.checked_out.len() as u32).to_le_bytes());
        for h in c.checked_out.values() {
            header(h, out);
        }
    }
    let service = f.service();
    out.extend_from_slice(&(service.len() as u32).to_le_bytes());
    for id in service {
        out.extend_from_slice(&id.to_le_bytes());
    }
    let keys = f.keys().order();
    out.extend_from_slice(&(keys.len() as u32).to_le_bytes());
    for (k, at) in keys {
        out.extend_from_slice(&(k.len() as u16).to_le_bytes());
        out.extend_from_slice(k);
        out.extend_from_slice(&at.to_le_bytes());
    }
    out.push(c.dlx_at_least_once as u8);
    out.extend_from_slice(&(f.discards().len() as u32).to_le_bytes());
    for (h, why) in f.discards() {
        header(h, out);
        out.push(reason_code(*why));
    }
    delayed_retry(c, out);
    out.extend_from_slice(&(f.delayed().len() as u32).to_le_bytes());
    for ((at, _), h) in f.delayed() {
        out.extend_from_slice(&at.to_le_bytes());
        header(h, out);
    }
}

/// A config's delayed retry (see the format above).
fn delayed_retry(c: &Config, out: &mut Vec<u8>) {
    let (kind, min, max) = match c.delayed_retry {
        None => (0, 0, 0),
        Some(d) => (
            match d.kind {
                RetryKind::All => 1,
                RetryKind::Failed => 2,
                RetryKind::Returned => 3,
            },
            d.min_ms,
            d.max_ms,
        ),
    };
    out.push(kind);
    out.extend_from_slice(&min.to_le_bytes());
    out.extend_from_slice(&max.to_le_bytes());
}

/// A config as a state carries it (but for dlx_at_least_once, which a
/// version 4 state carries after its keys).
fn config(c: &Config, out: &mut Vec<u8>) {
    let limit = c.delivery_limit.map_or(0, |l| l as u64 + 1);
    out.extend_from_slice(&(limit.min(u32::MAX as u64) as u32).to_le_bytes());
    out.extend_from_slice(&c.max_length.unwrap_or(u64::MAX).to_le_bytes());
    out.extend_from_slice(&c.max_bytes.unwrap_or(u64::MAX).to_le_bytes());
    out.push(c.reject_publish as u8);
    out.push(c.single_active as u8);
    out.push(c.max_priority);
    out.extend_from_slice(&c.dedup_window.to_le_bytes());
    out.extend_from_slice(&c.dedup_ttl.unwrap_or(u64::MAX).to_le_bytes());
}

fn reason_code(r: DeadLetterReason) -> u8 {
    match r {
        DeadLetterReason::Rejected => 0,
        DeadLetterReason::DeliveryLimit => 1,
        DeadLetterReason::Expired => 2,
        DeadLetterReason::MaxLen => 3,
    }
}

fn header(h: &Header, out: &mut Vec<u8>) {
    out.extend_from_slice(&h.id.to_le_bytes());
    out.extend_from_slice(&h.size.to_le_bytes());
    out.extend_from_slice(&h.expires_at.unwrap_or(0).to_le_bytes());
    out.extend_from_slice(&h.delivery_count.to_le_bytes());
    out.extend_from_slice(&h.acquired_count.to_le_bytes());
    out.push(h.priority);
}

/// A state [`encode_state`] wrote; and what follows it.
pub fn decode_state(b: &[u8]) -> Result<(Fifo, &[u8]), CodecError> {
    let mut r = Reader::new(b);
    let v = r.u8()?;
    if !(2..=STATE_VERSION).contains(&v) {
        return Err(CodecError::Version(v));
    }
    r.v3 = v >= 3;
    let config = r.config()?;
    let now = r.u64()?;
    let n = if r.v3 { r.u8()? as usize } else { 1 };
    if n == 0 || n > crate::fifo::MAX_PRIORITY as usize + 1 {
        return Err(CodecError::Inconsistent(
            "a number of priority levels out of range",
        ));
    }
    let mut levels = Vec::with_capacity(n);
    for p in 0..n {
        let level = Level {
            returns: r.headers()?.into(),
            waiting: r.headers()?.into(),
        };
        if level
            .returns
            .iter()
            .chain(level.waiting.iter())
            .any(|h| h.priority as usize != p)
        {
            return Err(CodecError::Inconsistent("a message in another priority's level"));
        }
        levels.push(level);
    }
    let n = r.count(8 + 4 + 4 + 1 + 4 + 4)?;
    let mut consumers = BTreeMap::new();
    for _ in 0..n {
        let id = r.u64()?;
        let credit = r.u32()?;
        let prefetch = r.u32()?;
        let auto_settle = r.u8()? != 0;
        let priority = r.u32()? as i32;
        let checked_out = r.headers()?.into_iter().map(|h| (h.id, h)).collect();
        consumers.insert(
            id,
            Consumer {
                credit,
                checked_out,
                prefetch,
                auto_settle,
                priority,
            },
        );
    }
    let n = r.count(8)?;
    let mut service = VecDeque::with_capacity(n);
    for _ in 0..n {
        let id = r.u64()?;
        if !consumers.contains_key(&id) {
            return Err(CodecError::Inconsistent("a served consumer that does not exist"));
        }
        service.push_back(id);
    }
    let distinct: std::collections::BTreeSet<&u64> = service.iter().collect();
    if distinct.len() != service.len() {
        return Err(CodecError::Inconsistent("a consumer served twice"));
    }
    let mut keys = VecDeque::new();
    if r.v3 {
        let n = r.count(2 + 8)?;
        for _ in 0..n {
            let k = r.key()?;
            keys.push_back((k, r.u64()?));
        }
        let distinct: std::collections::HashSet<&Vec<u8>> = keys.iter().map(|(k, _)| k).collect();
        if distinct.len() != keys.len() {
            return Err(CodecError::Inconsistent("a deduplication key held twice"));
        }
    }
    let keys = Keys::from_order(keys);
    let mut config = config;
    let mut discards = VecDeque::new();
    if v >= 4 {
        config.dlx_at_least_once = r.u8()? != 0;
        let n = r.count(HEADER_LEN + 1 + 1)?;
        for _ in 0..n {
            let h = r.header()?;
            let why = match r.u8()? {
                0 => DeadLetterReason::Rejected,
                1 => DeadLetterReason::DeliveryLimit,
                2 => DeadLetterReason::Expired,
                3 => DeadLetterReason::MaxLen,
                _ => return Err(CodecError::Inconsistent("an unknown dead-letter reason")),
            };
            discards.push_back((h, why));
        }
    }
    let mut delayed = Vec::new();
    if v >= 5 {
        config.delayed_retry = r.delayed_retry()?;
        let n = r.count(8 + HEADER_LEN + 1)?;
        for _ in 0..n {
            let at = r.u64()?;
            delayed.push((at, r.header()?));
        }
    }
    Ok((
        Fifo::from_parts(config, now, levels, consumers, service, keys)
            .with_discards(discards)
            .with_delayed(delayed),
        r.b,
    ))
}

struct Reader<'a> {
    b: &'a [u8],
    /// A version 3 state (headers carry their priority).
    v3: bool,
}

impl<'a> Reader<'a> {
    fn new(b: &'a [u8]) -> Reader<'a> {
        Reader { b, v3: false }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], CodecError> {
        if self.b.len() < n {
            return Err(CodecError::Short);
        }
        let (a, b) = self.b.split_at(n);
        self.b = b;
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, CodecError> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, CodecError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }
    fn u64(&mut self) -> Result<u64, CodecError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
    /// A count of items at least `each` bytes long, no more than the
    /// bytes left could hold.
    fn count(&mut self, each: usize) -> Result<usize, CodecError> {
        let n = self.u32()? as usize;
        if n.saturating_mul(each) > self.b.len() {
            return Err(CodecError::Short);
        }
        Ok(n)
    }
    fn key(&mut self) -> Result<Vec<u8>, CodecError> {
        let n = self.u16()? as usize;
        if n > MAX_KEY {
            return Err(CodecError::Inconsistent("a deduplication key too long"));
        }
        Ok(self.take(n)?.to_vec())
    }
    fn u16(&mut self) -> Result<u16, CodecError> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().expect("2 bytes")))
    }
    fn ids(&mut self) -> Result<Vec<MsgId>, CodecError> {
        let n = self.count(8)?;
        (0..n).map(|_| self.u64()).collect()
    }
    /// A delayed retry as [`delayed_retry`] wrote it.
    fn delayed_retry(&mut self) -> Result<Option<DelayedRetry>, CodecError> {
        let kind = match self.u8()? {
            0 => None,
            1 => Some(RetryKind::All),
            2 => Some(RetryKind::Failed),
            3 => Some(RetryKind::Returned),
            _ => return Err(CodecError::Inconsistent("an unknown delayed retry")),
        };
        let (min_ms, max_ms) = (self.u64()?, self.u64()?);
        Ok(kind.map(|kind| DelayedRetry { kind, min_ms, max_ms }))
    }

    /// A config as [`config`] wrote it (a version 2 state's lacks the
    /// version 3 fields).
    fn config(&mut self) -> Result<Config, CodecError> {
        let limit = self.u32()?;
        let some = |n: u64| (n != u64::MAX).then_some(n);
        Ok(Config {
            delivery_limit: (limit != 0).then(|| limit - 1),
            max_length: some(self.u64()?),
            max_bytes: some(self.u64()?),
            reject_publish: self.u8()? != 0,
            single_active: self.u8()? != 0,
            max_priority: if self.v3 { self.u8()? } else { 0 },
            dedup_window: if self.v3 { self.u32()? } else { 0 },
            dedup_ttl: if self.v3 { some(self.u64()?) } else { None },
            dlx_at_least_once: false,
            delayed_retry: None,
        })
    }

    fn headers(&mut self) -> Result<Vec<Header>, CodecError> {
        let n = self.count(HEADER_LEN + self.v3 as usize)?;
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            v.push(self.header()?);
        }
        Ok(v)
    }

    fn header(&mut self) -> Result<Header, CodecError> {
        let id = self.u64()?;
        let size = self.u32()?;
        let expires_at = self.u64()?;
        Ok(Header {
            id,
            size,
            expires_at: (expires_at != 0).then_some(expires_at),
            delivery_count: self.u32()?,
            acquired_count: self.u32()?,
            priority: if self.v3 { self.u8()? } else { 0 },
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn consumers_commands_are_told_apart_from_the_rest() {
        let mut consumer = Vec::new();
        encode(&Command::Cancel { consumer: 7 }, &mut consumer);
        assert!(is_consumer_command(&consumer));
        let mut other = Vec::new();
        encode(&Command::Purge, &mut other);
        assert!(!is_consumer_command(&other));
        assert!(!is_consumer_command(&[]));
    }

    #[test]
    fn a_return_with_new_properties_reads_as_a_return_and_what_follows() {
        let mut b = Vec::new();
        encode_return_as(
            ReturnAs {
                consumer: 7,
                id: 42,
                failed: true,
                now: 5,
                until: 0,
            },
            b"props",
            &mut b,
        );
        assert!(is_consumer_command(&b));
        let (c, rest) = decode(1, &b).unwrap();
        assert_eq!(
            c,
            Command::Return {
                consumer: 7,
                ids: vec![42],
                failed: true,
                now: 5,
                until: 0,
            }
        );
        assert_eq!(rest, b"props");
        // Cut short: an error, never a panic.
        for n in 0..b.len() - 5 {
            assert!(decode(1, &b[..n]).is_err(), "{n}");
        }
    }

    #[test]
    fn a_discard_with_new_properties_reads_as_a_discard_and_what_follows() {
        let mut b = Vec::new();
        encode_discard_as(7, 42, b"props", &mut b);
        assert!(is_consumer_command(&b));
        let (c, rest) = decode(1, &b).unwrap();
        assert_eq!(
            c,
            Command::Discard {
                consumer: 7,
                ids: vec![42],
            }
        );
        assert_eq!(rest, b"props");
        for n in 0..b.len() - 5 {
            assert!(decode(1, &b[..n]).is_err(), "{n}");
        }
    }

    use super::*;

    #[test]
    fn commands_round_trip_and_short_input_is_an_error() {
        let cs = [
            Command::Tick { now: 7 },
            Command::Consume {
                consumer: 3,
                prefetch: 10,
                auto_settle: true,
                priority: -2,
            },
            Command::Credit {
                consumer: 3,
                credit: 5,
            },
            Command::Settle {
                consumer: 1,
                ids: vec![4, 5],
            },
            Command::Return {
                consumer: 1,
                ids: vec![6],
                failed: true,
                now: 9,
                until: 0,
            },
            Command::Discard {
                consumer: 2,
                ids: vec![],
            },
            Command::Cancel { consumer: 9 },
            Command::Purge,
            Command::SettleDlx { ids: vec![3, 8] },
            Command::SetConfig(Config {
                delivery_limit: Some(4),
                max_length: Some(10),
                max_bytes: None,
                reject_publish: true,
                single_active: false,
                max_priority: 3,
                dedup_window: 0,
                dedup_ttl: Some(9),
                dlx_at_least_once: true,
                delayed_retry: Some(DelayedRetry {
                    kind: RetryKind::Failed,
                    min_ms: 100,
                    max_ms: 900,
                }),
            }),
            Command::Dequeue {
                consumer: 4,
                id: 17,
                settled: true,
            },
            Command::DequeueNext {
                consumer: 4,
                settled: false,
            },
        ];
        for c in cs {
            let mut b = Vec::new();
            encode(&c, &mut b);
            assert_eq!(decode(1, &b).unwrap(), (c.clone(), &[][..]));
            // A set_config without its delayed retry is one written before
            // it: read as none.
            let old = matches!(c, Command::SetConfig(_)).then(|| b.len() - 17);
            for cut in (0..b.len()).filter(|cut| Some(*cut) != old) {
                assert!(decode(1, &b[..cut]).is_err(), "{c:?} cut at {cut}");
            }
        }
        // Without a priority or a key an enqueue is written as before
        // them (kind 1); a priority makes it 11, a key 12.
        let cases: [(u8, Option<&[u8]>, u8); 4] = [
            (0, None, 1),
            (4, None, 11),
            (0, Some(b"id-1"), 12),
            (2, Some(b""), 12),
        ];
        for (priority, key, kind) in cases {
            let mut b = Vec::new();
            encode_enqueue(5, Some(9), 3, priority, key, &mut b);
            assert_eq!(b[0], kind);
            b.extend_from_slice(b"abc");
            let (c, rest) = decode(42, &b).unwrap();
            assert_eq!(
                c,
                Command::Enqueue {
                    id: 42,
                    size: 3,
                    now: 5,
                    expires_at: Some(9),
                    priority,
                    key: key.map(<[u8]>::to_vec),
                }
            );
            assert_eq!(rest, b"abc");
            for cut in 0..b.len() - 3 {
                assert!(decode(1, &b[..cut]).is_err(), "kind {kind} cut at {cut}");
            }
        }
        // A count larger than the bytes is refused before allocating.
        let mut b = vec![5];
        b.extend_from_slice(&1u64.to_le_bytes());
        b.extend_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(decode(1, &b), Err(CodecError::Short));
    }

    #[test]
    fn a_version_2_state_reads_as_one_level() {
        let mut b = vec![2];
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&u64::MAX.to_le_bytes());
        b.extend_from_slice(&u64::MAX.to_le_bytes());
        b.extend_from_slice(&[0, 0]);
        b.extend_from_slice(&77u64.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&1u32.to_le_bytes());
        // One waiting header, 28 bytes, no priority.
        b.extend_from_slice(&5u64.to_le_bytes());
        b.extend_from_slice(&10u32.to_le_bytes());
        b.extend_from_slice(&0u64.to_le_bytes());
        b.extend_from_slice(&1u32.to_le_bytes());
        b.extend_from_slice(&2u32.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        let (f, rest) = decode_state(&b).unwrap();
        assert!(rest.is_empty());
        assert_eq!((f.ready(), f.ready_bytes(), f.now()), (1, 10, 77));
        assert_eq!(f.levels().len(), 1);
        let h = f.served().next().unwrap();
        assert_eq!(
            (h.id, h.delivery_count, h.acquired_count, h.priority),
            (5, 1, 2, 0)
        );
        // Written again, it is the current version and reads back the same.
        let mut again = Vec::new();
        encode_state(&f, &mut again);
        assert_eq!(again[0], STATE_VERSION);
        assert_eq!(decode_state(&again).unwrap().0, f);
        // A version 4 state (the current one without its delayed retry)
        // reads with none; a version 3 one (without its discards too) too.
        let mut v4 = again.clone();
        v4[0] = 4;
        v4.truncate(v4.len() - 21);
        assert_eq!(decode_state(&v4).unwrap(), (f.clone(), &[][..]));
        let mut v3 = v4.clone();
        v3[0] = 3;
        v3.truncate(v3.len() - 5);
        let (g, rest) = decode_state(&v3).unwrap();
        assert!(rest.is_empty());
        assert_eq!(g, f);
    }

    #[test]
    fn delayed_returns_and_the_retry_survive_a_snapshot_and_a_set_config() {
        let retry = Some(crate::fifo::DelayedRetry {
            kind: RetryKind::Returned,
            min_ms: 500,
            max_ms: 2_000,
        });
        let mut f = Fifo::new(Config {
            delayed_retry: retry,
            ..Config::default()
        });
        f.apply(Command::Enqueue {
            id: 3,
            size: 4,
            now: 10,
            expires_at: None,
            priority: 0,
            key: None,
        });
        f.apply(Command::DequeueNext {
            consumer: 1,
            settled: false,
        });
        f.apply(Command::Return {
            consumer: 1,
            ids: vec![3],
            failed: false,
            now: 1_000,
            until: 0,
        });
        assert_eq!(f.delayed().len(), 1);
        let mut b = Vec::new();
        encode_state(&f, &mut b);
        let (g, rest) = decode_state(&b).unwrap();
        assert!(rest.is_empty());
        assert_eq!(g, f);
        assert_eq!(g.next_expiry(), Some(1_500));
        let c = Command::SetConfig(f.config().clone());
        let mut b = Vec::new();
        encode(&c, &mut b);
        assert_eq!(decode(1, &b).unwrap().0, c);
    }
}
