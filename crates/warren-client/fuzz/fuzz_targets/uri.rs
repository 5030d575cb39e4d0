//! URIs (amqp:// and amqps://, their query parameters, percent-escapes):
//! no panic on any text, and what parses has a port to connect to.
#![no_main]

use libfuzzer_sys::fuzz_target;
use warren_client::uri::AmqpUri;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(uri) = AmqpUri::parse(text) {
            assert_ne!(uri.port, 0, "{text:?}");
        }
    }
});
