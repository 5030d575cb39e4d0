//! Names in RabbitMQ's paths (the management API's locations, a binding's
//! address on the AMQP 1.0 management node): percent-encoded but for RFC
//! 3986's unreserved characters, as RabbitMQ encodes them.

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

/// What is encoded: every byte but ALPHA, DIGIT and `-._~`.
const NOT_UNRESERVED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// `s` as a path segment or a query value.
pub fn percent_encode(s: &str) -> String {
    utf8_percent_encode(s, NOT_UNRESERVED).to_string()
}

#[cfg(test)]
mod tests {
    use super::percent_encode;

    #[test]
    fn only_unreserved_characters_stay() {
        assert_eq!(percent_encode("a-b.c_d~e"), "a-b.c_d~e");
        assert_eq!(percent_encode("a b/c%"), "a%20b%2Fc%25");
        assert_eq!(percent_encode("é"), "%C3%A9");
    }
}
