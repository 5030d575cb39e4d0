//! RabbitMQ 4's v2 addresses, built from names (each percent-encoded as
//! one path segment): where publishers send and consumers read.

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

/// What RFC 3986 lets stand unencoded in a segment (unreserved, and the
/// sub-delims and `:` `@` RabbitMQ's clients keep).
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~')
    .remove(b'!')
    .remove(b'$')
    .remove(b'&')
    .remove(b'\'')
    .remove(b'(')
    .remove(b')')
    .remove(b'*')
    .remove(b'+')
    .remove(b',')
    .remove(b';')
    .remove(b'=')
    .remove(b':')
    .remove(b'@');

/// `name` as one path segment.
pub(crate) fn segment(name: &str) -> String {
    utf8_percent_encode(name, SEGMENT).to_string()
}

/// `/queues/:queue`: a queue (to publish to through the default
/// exchange, or to consume from).
pub fn queue(name: &str) -> String {
    format!("/queues/{}", segment(name))
}

/// `/exchanges/:exchange/:key`, or `/exchanges/:exchange` when the
/// routing key is empty.
pub fn exchange(name: &str, routing_key: &str) -> String {
    if routing_key.is_empty() {
        format!("/exchanges/{}", segment(name))
    } else {
        format!("/exchanges/{}/{}", segment(name), segment(routing_key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_percent_encoded_as_segments() {
        assert_eq!(queue("orders"), "/queues/orders");
        assert_eq!(queue("a b/c?"), "/queues/a%20b%2Fc%3F");
        assert_eq!(exchange("amq.topic", ""), "/exchanges/amq.topic");
        assert_eq!(exchange("x", "a.b/c"), "/exchanges/x/a.b%2Fc");
        assert_eq!(queue("ü"), "/queues/%C3%BC");
    }
}
