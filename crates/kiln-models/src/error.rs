//! Errors of the model layer.

use std::path::PathBuf;

/// Everything that can go wrong loading or running a model.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The GGUF file is malformed.
    #[error(transparent)]
    Gguf(#[from] kiln_gguf::GgufError),
    /// An I/O error on a model file.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A malformed safetensors file or config.json.
    #[error("{path}: {msg}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        msg: String,
    },
    /// The architecture is not one kiln implements.
    #[error("unsupported architecture '{0}' (kiln supports: llama, mistral, qwen2, qwen3, gemma3; mixtures of experts: qwen3moe, and llama files with experts (Mixtral))")]
    UnsupportedArch(String),
    /// A required tensor is missing.
    #[error("{path}: missing tensor '{name}'")]
    MissingTensor {
        /// The file.
        path: PathBuf,
        /// The tensor's (canonical) name.
        name: String,
    },
    /// A tensor has the wrong shape or type for the configuration.
    #[error("{path}: tensor '{name}': {msg}")]
    BadTensor {
        /// The file.
        path: PathBuf,
        /// The tensor's name.
        name: String,
        /// What is wrong.
        msg: String,
    },
    /// The configuration is inconsistent.
    #[error("invalid model configuration: {0}")]
    Config(String),
    /// The device refused or failed (see [`kiln_backend::BackendError`]).
    #[error(transparent)]
    Backend(#[from] kiln_backend::BackendError),
    /// A LoRA adapter cannot be read or does not fit the model.
    #[error("LoRA adapter {path}: {msg}")]
    Lora {
        /// The adapter's file or directory.
        path: PathBuf,
        /// What is wrong.
        msg: String,
    },
    /// A forward pass was given invalid input.
    #[error("invalid batch: {0}")]
    Batch(String),
}

/// Result alias of this crate.
pub type Result<T, E = ModelError> = std::result::Result<T, E>;
