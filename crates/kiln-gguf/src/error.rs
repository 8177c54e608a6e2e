//! The one error type of this crate.

use std::path::{Path, PathBuf};

/// Everything that can go wrong reading, validating or writing a GGUF file.
///
/// Messages name the file (when the bytes came from one) and the offending
/// key or tensor, e.g. `model.gguf: tensor 'blk.0.attn_q.weight': data range
/// 1234..5678 is past the end of the file (4000 bytes)`.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    /// The file could not be opened, mapped or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// The bytes are not a well-formed GGUF file (truncated, corrupt, hostile).
    #[error("{}{message}", prefix(path.as_deref()))]
    Malformed {
        /// The file, when the bytes came from one.
        path: Option<PathBuf>,
        /// What is wrong, in words.
        message: String,
    },
    /// A well-formed file this crate does not read (GGUF v1, big-endian, future versions).
    #[error("{}{message}", prefix(path.as_deref()))]
    Unsupported {
        /// The file, when the bytes came from one.
        path: Option<PathBuf>,
        /// What is unsupported, in words.
        message: String,
    },
    /// A metadata key that the caller needs is absent.
    #[error("metadata key '{key}' is missing")]
    MissingKey {
        /// The key.
        key: String,
    },
    /// A metadata value has the wrong type or does not fit the requested type.
    #[error("metadata key '{key}': {message}")]
    WrongType {
        /// The key.
        key: String,
        /// Expected versus found, in words.
        message: String,
    },
    /// The writer was given inconsistent input (size mismatch, duplicate name, ...).
    #[error("GGUF writer: {message}")]
    Writer {
        /// What is wrong, in words.
        message: String,
    },
}

fn prefix(path: Option<&Path>) -> String {
    match path {
        Some(p) => format!("{}: ", p.display()),
        None => String::new(),
    }
}

impl GgufError {
    pub(crate) fn malformed(message: impl Into<String>) -> Self {
        Self::Malformed { path: None, message: message.into() }
    }

    pub(crate) fn unsupported(message: impl Into<String>) -> Self {
        Self::Unsupported { path: None, message: message.into() }
    }

    pub(crate) fn writer(message: impl Into<String>) -> Self {
        Self::Writer { message: message.into() }
    }

    /// Attaches the file path to errors that came from parsing its bytes.
    pub(crate) fn with_path(mut self, file: &Path) -> Self {
        match &mut self {
            Self::Malformed { path, .. } | Self::Unsupported { path, .. } => {
                *path = Some(file.to_path_buf());
            }
            _ => {}
        }
        self
    }
}

/// Shorthand for results of this crate.
pub type Result<T, E = GgufError> = std::result::Result<T, E>;
