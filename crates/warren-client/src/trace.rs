//! W3C Trace Context (<https://www.w3.org/TR/trace-context/>) carried in
//! messages, so a trace continues from publisher to consumer.
//!
//! A [`TraceContext`] made current with [`TraceContext::scope`] is
//! written, as a child, into the `traceparent` (and `tracestate`) header
//! of every message published inside the scope that has none yet.
//! A consumer reads it back with `Delivery::trace_context`, and
//! `Consumer::run` runs each handler in the scope of its delivery's
//! context, so what the handler publishes joins the same trace. With no
//! context current nothing is added.
//!
//! ```
//! use warren_client::trace::TraceContext;
//!
//! let parent = TraceContext::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").unwrap();
//! let child = parent.child();
//! assert_eq!(child.trace_id(), parent.trace_id());
//! assert_ne!(child.parent_id(), parent.parent_id());
//! assert!(child.traceparent().starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-"));
//! ```

use std::future::Future;

use rand::RngCore;

/// The header names, as the specification spells them.
pub const TRACEPARENT: &str = "traceparent";
/// See [`TRACEPARENT`].
pub const TRACESTATE: &str = "tracestate";

tokio::task_local! {
    static CURRENT: TraceContext;
}

/// One position in a distributed trace: the trace's id, the id of the
/// span that is the parent of what comes next, the trace flags and the
/// vendors' `tracestate`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    trace_id: [u8; 16],
    parent_id: [u8; 8],
    flags: u8,
    tracestate: Option<String>,
}

impl TraceContext {
    /// A new trace, sampled, with random ids.
    pub fn new_root() -> TraceContext {
        let mut rng = rand::thread_rng();
        let mut trace_id = [0u8; 16];
        while trace_id == [0; 16] {
            rng.fill_bytes(&mut trace_id);
        }
        TraceContext {
            trace_id,
            parent_id: random_span_id(),
            flags: 1,
            tracestate: None,
        }
    }

    /// The same trace one step on: a new parent id (the span of the
    /// publish), the flags and tracestate kept.
    pub fn child(&self) -> TraceContext {
        TraceContext {
            parent_id: random_span_id(),
            ..self.clone()
        }
    }

    /// Read a `traceparent` header; None if it is not one (all-zero ids,
    /// version `ff`, wrong lengths or characters).
    pub fn parse(traceparent: &str) -> Option<TraceContext> {
        let t = traceparent.trim();
        let mut parts = t.split('-');
        let version = hex_byte(parts.next()?)?;
        let trace = parts.next()?;
        let parent = parts.next()?;
        let flags = parts.next()?;
        // Version 00 has exactly four fields; later versions may add some.
        if version == 0xff || (version == 0 && parts.next().is_some()) {
            return None;
        }
        let mut trace_id = [0u8; 16];
        hex_into(trace, &mut trace_id)?;
        let mut parent_id = [0u8; 8];
        hex_into(parent, &mut parent_id)?;
        if trace_id == [0; 16] || parent_id == [0; 8] {
            return None;
        }
        Some(TraceContext {
            trace_id,
            parent_id,
            flags: hex_byte(flags)?,
            tracestate: None,
        })
    }

    /// With this `tracestate` (vendors' entries, passed on as they are).
    pub fn with_tracestate(mut self, tracestate: impl Into<String>) -> TraceContext {
        self.tracestate = Some(tracestate.into());
        self
    }

    /// The `traceparent` header's value.
    pub fn traceparent(&self) -> String {
        format!("00-{}-{}-{:02x}", self.trace_id(), self.parent_id(), self.flags)
    }

    /// The trace id, 32 lowercase hex digits.
    pub fn trace_id(&self) -> String {
        hex(&self.trace_id)
    }

    /// The parent (span) id, 16 lowercase hex digits.
    pub fn parent_id(&self) -> String {
        hex(&self.parent_id)
    }

    /// Whether the trace is sampled (flag 01).
    pub fn sampled(&self) -> bool {
        self.flags & 1 == 1
    }

    /// The `tracestate`, if any.
    pub fn tracestate(&self) -> Option<&str> {
        self.tracestate.as_deref()
    }

    /// The context current in this task, if any.
    pub fn current() -> Option<TraceContext> {
        CURRENT.try_with(|c| c.clone()).ok()
    }

    /// Run `f` with this context current: messages it publishes carry a
    /// child of it.
    pub async fn scope<F: Future>(self, f: F) -> F::Output {
        CURRENT.scope(self, f).await
    }
}

fn random_span_id() -> [u8; 8] {
    let mut rng = rand::thread_rng();
    let mut id = [0u8; 8];
    while id == [0; 8] {
        rng.fill_bytes(&mut id);
    }
    id
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// Two lowercase hex digits (the specification allows no uppercase).
fn hex_byte(s: &str) -> Option<u8> {
    let mut b = [0u8; 1];
    hex_into(s, &mut b)?;
    Some(b[0])
}

fn hex_into(s: &str, out: &mut [u8]) -> Option<()> {
    let s = s.as_bytes();
    if s.len() != out.len() * 2 {
        return None;
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    for (i, o) in out.iter_mut().enumerate() {
        *o = (digit(s[2 * i])? << 4) | digit(s[2 * i + 1])?;
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_specifications_examples_parse_and_print_back() {
        let v = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let t = TraceContext::parse(v).unwrap();
        assert_eq!(t.traceparent(), v);
        assert!(t.sampled());
        let t = TraceContext::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00").unwrap();
        assert!(!t.sampled());
        // A later version may carry more fields; its first four are read.
        assert!(
            TraceContext::parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra").is_some()
        );
    }

    #[test]
    fn what_is_no_traceparent_is_refused() {
        for bad in [
            "",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "zz-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba9é2b7-01",
        ] {
            assert_eq!(TraceContext::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn roots_are_new_traces_and_children_keep_theirs() {
        let a = TraceContext::new_root();
        let b = TraceContext::new_root();
        assert_ne!(a.trace_id(), b.trace_id());
        let c = a.clone().with_tracestate("vendor=1").child();
        assert_eq!((c.trace_id(), c.tracestate()), (a.trace_id(), Some("vendor=1")));
        assert_ne!(c.parent_id(), a.parent_id());
        assert_eq!(
            TraceContext::parse(&c.traceparent()).unwrap().parent_id(),
            c.parent_id()
        );
    }

    #[tokio::test]
    async fn a_scope_makes_a_context_current_in_its_task_only() {
        assert_eq!(TraceContext::current(), None);
        let t = TraceContext::new_root();
        let seen = t.clone().scope(async { TraceContext::current() }).await;
        assert_eq!(seen, Some(t));
        assert_eq!(TraceContext::current(), None);
    }
}
