//! What a stream remembers besides messages, kept in the log itself as
//! osiris keeps it (osiris_tracking.erl): producers' last publishing ids
//! (deduplication) and consumers' stored offsets.
//!
//! Entries are `type u8 | id length u8 | id | value`: type 0 a producer's
//! sequence (u64), 1 a consumer's offset (u64), 2 a timestamp (i64). In a
//! user chunk's trailer and in a tracking delta chunk a sequence belongs to
//! the chunk that carries it; in a snapshot (the first chunk of every
//! segment) a sequence entry also carries its chunk id (u64 before the
//! value), so the state survives the deletion of older segments.

use std::collections::HashMap;

use bytes::{BufMut, BytesMut};

/// At most this many producers are remembered (the newest by chunk id),
/// as in osiris.
pub const MAX_SEQUENCES: usize = 255;

const SEQUENCE: u8 = 0;
const OFFSET: u8 = 1;
const TIMESTAMP: u8 = 2;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tracking {
    /// Producer reference -> (chunk id, last publishing id).
    pub sequences: HashMap<String, (u64, u64)>,
    /// Consumer reference -> stored offset.
    pub offsets: HashMap<String, u64>,
    pub timestamps: HashMap<String, i64>,
}

fn put_id(out: &mut BytesMut, kind: u8, id: &str) {
    // Ids are at most 255 bytes (the protocol's references are shorter).
    let id = &id.as_bytes()[..id.len().min(255)];
    out.put_u8(kind);
    out.put_u8(id.len() as u8);
    out.put_slice(id);
}

/// A delta: producers' sequences and consumers' offsets written since the
/// last chunk.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Delta {
    pub sequences: Vec<(String, u64)>,
    pub offsets: Vec<(String, u64)>,
}

impl Delta {
    pub fn is_empty(&self) -> bool {
        self.sequences.is_empty() && self.offsets.is_empty()
    }

    /// Encode as a trailer or a delta chunk's body.
    pub fn encode(&self) -> BytesMut {
        let mut out = BytesMut::new();
        for (id, seq) in &self.sequences {
            put_id(&mut out, SEQUENCE, id);
            out.put_u64(*seq);
        }
        for (id, off) in &self.offsets {
            put_id(&mut out, OFFSET, id);
            out.put_u64(*off);
        }
        out
    }
}

/// Read `type, id, value` entries; `with_chunk` for a snapshot's sequence
/// entries. None if the bytes are malformed.
fn entries(mut b: &[u8], with_chunk: bool) -> Option<Vec<(u8, String, u64, u64)>> {
    let mut out = Vec::new();
    while !b.is_empty() {
        let (&kind, rest) = b.split_first()?;
        let (&n, rest) = rest.split_first()?;
        let id = std::str::from_utf8(rest.get(..n as usize)?).ok()?.to_string();
        let mut rest = &rest[n as usize..];
        let mut chunk = 0;
        if kind == SEQUENCE && with_chunk {
            chunk = u64::from_be_bytes(rest.get(..8)?.try_into().ok()?);
            rest = &rest[8..];
        }
        let v = u64::from_be_bytes(rest.get(..8)?.try_into().ok()?);
        b = &rest[8..];
        out.push((kind, id, chunk, v));
    }
    Some(out)
}

impl Tracking {
    /// Apply a trailer or a delta chunk carried by chunk `chunk_id`.
    pub fn apply_delta(&mut self, chunk_id: u64, body: &[u8]) -> bool {
        let Some(es) = entries(body, false) else {
            return false;
        };
        self.insert(es.into_iter().map(|(k, id, _, v)| (k, id, chunk_id, v)));
        true
    }

    pub fn apply(&mut self, chunk_id: u64, d: &Delta) {
        for (id, seq) in &d.sequences {
            self.sequences.insert(id.clone(), (chunk_id, *seq));
        }
        for (id, off) in &d.offsets {
            self.offsets.insert(id.clone(), *off);
        }
    }

    /// Replace the state with a snapshot's.
    pub fn load_snapshot(&mut self, body: &[u8]) -> bool {
        let Some(es) = entries(body, true) else {
            return false;
        };
        *self = Tracking::default();
        self.insert(es.into_iter());
        true
    }

    /// Record `(type, id, chunk id, value)` entries.
    fn insert(&mut self, es: impl Iterator<Item = (u8, String, u64, u64)>) {
        for (kind, id, chunk, v) in es {
            match kind {
                SEQUENCE => {
                    self.sequences.insert(id, (chunk, v));
                }
                OFFSET => {
                    self.offsets.insert(id, v);
                }
                TIMESTAMP => {
                    self.timestamps.insert(id, v as i64);
                }
                _ => {}
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.sequences.is_empty() && self.offsets.is_empty() && self.timestamps.is_empty()
    }

    /// A snapshot for the start of a new segment: offsets below the
    /// stream's first offset are dropped, and all but the newest
    /// [`MAX_SEQUENCES`] producers.
    pub fn snapshot(&mut self, first_offset: u64) -> BytesMut {
        self.offsets.retain(|_, o| *o >= first_offset);
        if self.sequences.len() > MAX_SEQUENCES {
            let mut by_chunk: Vec<(u64, String)> =
                self.sequences.iter().map(|(k, v)| (v.0, k.clone())).collect();
            by_chunk.sort_unstable_by(|a, b| b.cmp(a));
            for (_, k) in by_chunk.into_iter().skip(MAX_SEQUENCES) {
                self.sequences.remove(&k);
            }
        }
        let mut out = BytesMut::new();
        let mut seqs: Vec<_> = self.sequences.iter().collect();
        seqs.sort();
        for (id, (chunk, seq)) in seqs {
            put_id(&mut out, SEQUENCE, id);
            out.put_u64(*chunk);
            out.put_u64(*seq);
        }
        let mut offs: Vec<_> = self.offsets.iter().collect();
        offs.sort();
        for (id, off) in offs {
            put_id(&mut out, OFFSET, id);
            out.put_u64(*off);
        }
        let mut tss: Vec<_> = self.timestamps.iter().collect();
        tss.sort();
        for (id, ts) in tss {
            put_id(&mut out, TIMESTAMP, id);
            out.put_i64(*ts);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deltas_and_snapshots_roundtrip_with_exact_bytes() {
        let d = Delta {
            sequences: vec![("p".into(), 7)],
            offsets: vec![("c".into(), 42)],
        };
        let b = d.encode();
        assert_eq!(
            &b[..],
            &[0, 1, b'p', 0, 0, 0, 0, 0, 0, 0, 7, 1, 1, b'c', 0, 0, 0, 0, 0, 0, 0, 42][..]
        );
        let mut t = Tracking::default();
        assert!(t.apply_delta(100, &b));
        assert_eq!(t.sequences["p"], (100, 7));
        assert_eq!(t.offsets["c"], 42);
        let snap = t.clone().snapshot(0);
        let mut u = Tracking::default();
        assert!(u.load_snapshot(&snap));
        assert_eq!(u, t);
        // Offsets below the first offset go; malformed bytes are refused.
        assert!(t.clone().snapshot(43).len() < snap.len());
        assert!(!u.apply_delta(0, &[0, 5, b'a']));
    }

    #[test]
    fn only_the_newest_producers_are_kept() {
        let mut t = Tracking::default();
        for i in 0..300u64 {
            t.sequences.insert(format!("p{i}"), (i, i));
        }
        t.snapshot(0);
        assert_eq!(t.sequences.len(), MAX_SEQUENCES);
        assert!(t.sequences.contains_key("p299") && !t.sequences.contains_key("p0"));
    }
}
