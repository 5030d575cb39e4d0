//! A set of sequence numbers kept as sorted, merged, inclusive ranges.
//! Acks arrive mostly in order, so a million acked messages read back from
//! the ack log usually collapse into a handful of ranges.

#[derive(Debug, Default, Clone)]
pub struct RangeSet {
    /// Sorted by start, non-overlapping, non-adjacent once `normalize`d.
    ranges: Vec<(u64, u64)>,
    sorted: bool,
}

impl RangeSet {
    pub fn new() -> RangeSet {
        RangeSet {
            ranges: Vec::new(),
            sorted: true,
        }
    }

    /// Add `first..=last` (cheap; call [`RangeSet::normalize`] before queries).
    pub fn insert(&mut self, first: u64, last: u64) {
        if let Some(l) = self.ranges.last_mut() {
            if first >= l.0 && first <= l.1.saturating_add(1) {
                l.1 = l.1.max(last);
                return;
            }
            if first < l.0 {
                self.sorted = false;
            }
        }
        self.ranges.push((first, last));
    }

    pub fn normalize(&mut self) {
        if !self.sorted {
            self.ranges.sort_unstable();
            self.sorted = true;
        }
        let mut out: Vec<(u64, u64)> = Vec::with_capacity(self.ranges.len());
        for &(a, b) in &self.ranges {
            match out.last_mut() {
                Some(l) if a <= l.1.saturating_add(1) => l.1 = l.1.max(b),
                _ => out.push((a, b)),
            }
        }
        self.ranges = out;
    }

    pub fn contains(&self, x: u64) -> bool {
        debug_assert!(self.sorted);
        let i = self.ranges.partition_point(|r| r.1 < x);
        self.ranges.get(i).is_some_and(|r| r.0 <= x)
    }

    pub fn len_ranges(&self) -> usize {
        self.ranges.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_and_answers() {
        let mut s = RangeSet::new();
        s.insert(5, 5);
        s.insert(6, 9);
        s.insert(1, 2);
        s.insert(20, 20);
        s.insert(3, 3);
        s.normalize();
        assert_eq!(s.len_ranges(), 3); // 1..=3, 5..=9, 20
        for x in (1..=3).chain(5..=9) {
            assert!(s.contains(x), "{x}");
        }
        for x in [0, 4, 10, 19, 21] {
            assert!(!s.contains(x), "{x}");
        }
        assert!(s.contains(20));
    }
}
