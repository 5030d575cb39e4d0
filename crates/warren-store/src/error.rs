//! The store's one error type: every failure is an I/O error on a named
//! file, or a file that is not a Warren store file.

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("message store I/O on {path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("message store file {path} is not a Warren store file")]
    BadMagic { path: String },
}

impl StoreError {
    pub(crate) fn io(path: &std::path::Path, source: std::io::Error) -> StoreError {
        StoreError::Io {
            path: path.display().to_string(),
            source,
        }
    }
}

pub type Result<T> = std::result::Result<T, StoreError>;
