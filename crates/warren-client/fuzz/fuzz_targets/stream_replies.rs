//! The replies a stream client reads by hand (lists of streams,
//! statistics, command versions, consumer updates, metadata): no panic,
//! no unbounded allocation.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    warren_client::stream::fuzzing::read_replies(data);
});
