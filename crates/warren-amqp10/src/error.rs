//! What can go wrong decoding AMQP 1.0 bytes.

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    #[error("truncated input: {0}")]
    Truncated(&'static str),
    #[error("unknown format code 0x{0:02x}")]
    UnknownFormat(u8),
    #[error("invalid {what}: {why}")]
    Invalid { what: &'static str, why: String },
    #[error("values nested deeper than {0}")]
    TooDeep(usize),
    #[error("frame of {size} bytes exceeds the maximum of {max}")]
    FrameTooLarge { size: u32, max: u32 },
    #[error("unknown performative descriptor {0}")]
    UnknownPerformative(String),
}

impl CodecError {
    pub fn invalid(what: &'static str, why: impl Into<String>) -> CodecError {
        CodecError::Invalid {
            what,
            why: why.into(),
        }
    }
}
