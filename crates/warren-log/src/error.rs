//! The log's errors: I/O with the file it concerns, and files that are not
//! a stream log's.

#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("stream log I/O on {path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("stream log file {path} is not a segment or index file")]
    BadMagic { path: String },
    #[error("stream log {path}: {why}")]
    Corrupt { path: String, why: String },
}

impl LogError {
    pub(crate) fn io(path: &std::path::Path, source: std::io::Error) -> LogError {
        LogError::Io {
            path: path.display().to_string(),
            source,
        }
    }
}

pub type Result<T> = std::result::Result<T, LogError>;
