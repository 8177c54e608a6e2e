//! The crate's error type.

use thiserror::Error;

/// Everything that can go wrong while building or using a tokenizer or a chat template.
#[derive(Debug, Error)]
pub enum TokenizeError {
    /// The tokenizer description (GGUF metadata or `tokenizer.json`) is unusable.
    #[error("invalid tokenizer: {0}")]
    Invalid(String),
    /// The tokenizer type or pre-tokenizer family is not implemented.
    #[error("unsupported tokenizer: {0}")]
    Unsupported(String),
    /// A file could not be read.
    #[error("reading {path}: {source}")]
    Io {
        /// The file that failed.
        path: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// JSON that did not parse.
    #[error("parsing {what}: {source}")]
    Json {
        /// What was being parsed.
        what: String,
        /// The underlying error.
        source: serde_json::Error,
    },
    /// An error reported by the Hugging Face `tokenizers` crate.
    #[error("tokenizers: {0}")]
    Hf(String),
    /// Text could not be encoded (e.g. a byte that has no token and no fallback).
    #[error("cannot encode: {0}")]
    Encode(String),
    /// The chat template failed to compile or render (including limits hit by hostile templates).
    #[error("chat template: {0}")]
    Template(String),
}

/// Shorthand for results of this crate.
pub type Result<T> = std::result::Result<T, TokenizeError>;
