//! The one error type of this crate.

/// What a binding reports to its caller: [`BindError::Invalid`] is the
/// caller's mistake (a Python `ValueError`, a JavaScript `TypeError`), the
/// others come from loading or running the model.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    /// A bad argument, named as the caller wrote it.
    #[error("{0}")]
    Invalid(String),
    /// The model could not be named, found or fetched.
    #[error(transparent)]
    Hub(#[from] kiln_hub::HubError),
    /// The engine refused or failed.
    #[error(transparent)]
    Engine(#[from] kiln_engine::EngineError),
    /// A request failed while it ran (the engine's message).
    #[error("generation failed: {0}")]
    Failed(String),
}

impl BindError {
    /// Whether the caller's arguments are at fault.
    pub fn is_invalid(&self) -> bool {
        match self {
            Self::Invalid(_) => true,
            Self::Hub(e) => {
                matches!(e, kiln_hub::HubError::InvalidName { .. } | kiln_hub::HubError::UnknownModel(_))
            }
            Self::Engine(e) => matches!(
                e,
                kiln_engine::EngineError::InvalidRequest(_)
                    | kiln_engine::EngineError::Sampling(_)
                    | kiln_engine::EngineError::PromptTooLong { .. }
                    | kiln_engine::EngineError::Grammar(_)
                    | kiln_engine::EngineError::KvCapacity { .. }
            ),
            Self::Failed(_) => false,
        }
    }
}
