//! What an AMQP 1.0 client reads from the broker: a message, and frames
//! applied to a session with links attached (flow, transfers in pieces,
//! dispositions, detaches): no panic, no unbounded allocation.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    warren_client::amqp::fuzzing::read(data);
});
