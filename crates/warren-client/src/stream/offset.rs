//! Offset specifications: where a consumer starts reading, and where a
//! single active consumer carries on when it becomes active.

use warren_stream::command::OffsetSpec;

/// Where a consumer starts reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum OffsetSpecification {
    /// The first message the stream holds.
    First,
    /// The last chunk written.
    Last,
    /// What is written from now on.
    Next,
    /// This offset (or the first held, if it is gone).
    Offset(u64),
    /// The first chunk written at or after this time (ms since the epoch).
    Timestamp(i64),
}

impl OffsetSpecification {
    pub(crate) fn spec(self) -> OffsetSpec {
        match self {
            OffsetSpecification::First => OffsetSpec::First,
            OffsetSpecification::Last => OffsetSpec::Last,
            OffsetSpecification::Next => OffsetSpec::Next,
            OffsetSpecification::Offset(o) => OffsetSpec::Offset(o),
            OffsetSpecification::Timestamp(t) => OffsetSpec::Timestamp(t),
        }
    }
}
