//! What can go wrong decoding stream protocol bytes.

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    #[error("truncated input: {0}")]
    Truncated(&'static str),
    #[error("invalid: {0}")]
    Invalid(String),
    #[error("frame of {size} bytes exceeds the maximum of {max}")]
    FrameTooLarge { size: u32, max: u32 },
    #[error("unknown command key 0x{0:04x}")]
    UnknownKey(u16),
}
