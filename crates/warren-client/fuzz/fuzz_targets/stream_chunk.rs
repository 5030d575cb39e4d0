//! Chunks as a stream consumer reads them off the network (entries,
//! sub-entry batches, compressed ones, the messages in them): no panic,
//! no unbounded allocation.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    warren_client::stream::fuzzing::read_chunk(data);
});
