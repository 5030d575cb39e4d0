//! Per-chunk bloom filters for stream filtering (RabbitMQ 3.13's, after
//! osiris_bloom.erl): each filter value of a chunk's messages sets two bits
//! of a filter of `size` bytes; a message without one sets bit 0, "this
//! chunk holds unfiltered messages". A consumer with filter values gets a
//! chunk when any of its values has both bits set (or, if it asked to match
//! unfiltered messages, when bit 0 is set); filtering a chunk's messages is
//! the client's job. Only this broker reads the filters (they are not sent
//! to clients), so the hash is ours (CRC-32 with two seeds), not Erlang's.

/// Default and bounds of a filter's size in bytes (x-stream-filter-size-bytes).
pub const DEFAULT_SIZE: u8 = 16;
pub const MIN_SIZE: u8 = 16;

fn bits(value: &[u8], nbits: u32) -> (u32, u32) {
    let h1 = crc32fast::hash(value);
    let mut h = crc32fast::Hasher::new_with_initial(0x9e37_79b9);
    h.update(value);
    let h2 = h.finalize();
    // Bit 0 is reserved for "unfiltered".
    (1 + h1 % (nbits - 1), 1 + h2 % (nbits - 1))
}

fn set(f: &mut [u8], bit: u32) {
    f[(bit / 8) as usize] |= 0x80 >> (bit % 8);
}

fn get(f: &[u8], bit: u32) -> bool {
    f[(bit / 8) as usize] & (0x80 >> (bit % 8)) != 0
}

/// Builds one chunk's filter.
#[derive(Debug, Clone)]
pub struct Builder {
    filter: Vec<u8>,
    filtered: bool,
}

impl Builder {
    pub fn new(size: u8) -> Builder {
        Builder {
            filter: vec![0; size.max(MIN_SIZE) as usize],
            filtered: false,
        }
    }

    /// Add a message's filter value (None: the message has none).
    pub fn add(&mut self, value: Option<&[u8]>) {
        match value {
            Some(v) if !v.is_empty() => {
                let (a, b) = bits(v, self.filter.len() as u32 * 8);
                set(&mut self.filter, a);
                set(&mut self.filter, b);
                self.filtered = true;
            }
            _ => set(&mut self.filter, 0),
        }
    }

    /// The filter, or nothing when no message had a value (no filter is
    /// stored then, as in osiris).
    pub fn finish(self) -> Option<Vec<u8>> {
        self.filtered.then_some(self.filter)
    }
}

/// A consumer's filter: its values and whether unfiltered messages match.
#[derive(Debug, Clone, Default)]
pub struct Matcher {
    pub values: Vec<Vec<u8>>,
    pub match_unfiltered: bool,
}

impl Matcher {
    /// Does a chunk with this filter (empty: none) hold messages for us?
    pub fn matches(&self, filter: &[u8]) -> bool {
        if self.values.is_empty() {
            return true;
        }
        if filter.is_empty() {
            return self.match_unfiltered;
        }
        if self.match_unfiltered && get(filter, 0) {
            return true;
        }
        let nbits = filter.len() as u32 * 8;
        self.values.iter().any(|v| {
            let (a, b) = bits(v, nbits);
            get(filter, a) && get(filter, b)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_match_their_chunks_and_unfiltered_is_a_choice() {
        let mut b = Builder::new(16);
        b.add(Some(b"california"));
        b.add(None);
        let f = b.finish().unwrap();
        let m = |vals: &[&[u8]], unf: bool| Matcher {
            values: vals.iter().map(|v| v.to_vec()).collect(),
            match_unfiltered: unf,
        };
        assert!(m(&[b"california"], false).matches(&f));
        assert!(m(&[], false).matches(&f), "no filter: everything");
        assert!(m(&[b"texas", b"nevada"], true).matches(&f), "bit 0 is set");
        assert!(
            !m(&[b"texas"], false).matches(&[]),
            "no filter stored: unfiltered only"
        );
        assert!(m(&[b"texas"], true).matches(&[]));
        let mut only_none = Builder::new(16);
        only_none.add(None);
        assert!(only_none.finish().is_none());
        // Few false positives with a sparse filter.
        let misses = (0..1000)
            .filter(|i| m(&[format!("other-{i}").as_bytes()], false).matches(&f))
            .count();
        assert!(misses < 50, "{misses}");
    }
}
