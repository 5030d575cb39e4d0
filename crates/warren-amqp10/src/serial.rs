//! Serial-number arithmetic (RFC 1982, 32-bit) for delivery-count,
//! delivery-id and transfer-id, which wrap (AMQP 1.0 §2.8.9-2.8.10 define
//! them as sequence-no). Comparisons hold while the two numbers are less
//! than 2^31 apart; beyond that the order is undefined, and `lt` says no.

/// `a + n`, wrapping.
pub fn add(a: u32, n: u32) -> u32 {
    a.wrapping_add(n)
}

/// Is `a` before `b`?
pub fn lt(a: u32, b: u32) -> bool {
    a != b && b.wrapping_sub(a) < (1 << 31)
}

/// Is `a` at or before `b`?
pub fn le(a: u32, b: u32) -> bool {
    a == b || lt(a, b)
}

/// `b - a` when `a` is at or before `b` (how far `b` is ahead).
pub fn diff(a: u32, b: u32) -> Option<u32> {
    le(a, b).then(|| b.wrapping_sub(a))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinary_order() {
        assert!(lt(1, 2) && !lt(2, 1) && !lt(5, 5) && le(5, 5));
        assert_eq!(diff(10, 15), Some(5));
        assert_eq!(diff(15, 10), None);
    }

    #[test]
    fn across_the_wrap() {
        let near = u32::MAX - 2;
        assert!(lt(near, add(near, 5)));
        assert_eq!(add(near, 5), 2);
        assert_eq!(diff(near, 2), Some(5));
        assert!(!lt(2, near));
        // Credit arithmetic at the wrap: delivery-count + credit - sent.
        let delivery_count = u32::MAX;
        let credit = 10u32;
        let limit = add(delivery_count, credit);
        assert_eq!(diff(add(delivery_count, 3), limit), Some(7));
    }

    #[test]
    fn half_the_space_apart_is_undefined_and_not_before() {
        assert!(!lt(0, 1 << 31));
        assert!(!lt(1 << 31, 0));
        assert!(lt(0, (1 << 31) - 1));
    }
}
