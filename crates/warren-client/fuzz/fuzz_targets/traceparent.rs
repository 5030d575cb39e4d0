//! traceparent headers as they come off the network: no panic, and what
//! parses prints back to a header that parses to the same context.
#![no_main]

use libfuzzer_sys::fuzz_target;
use warren_client::trace::TraceContext;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Some(t) = TraceContext::parse(text) {
            let again = TraceContext::parse(&t.traceparent()).expect("a printed traceparent parses");
            assert_eq!((again.trace_id(), again.parent_id(), again.sampled()), (t.trace_id(), t.parent_id(), t.sampled()));
        }
    }
});
