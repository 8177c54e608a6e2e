//! Engine errors.

/// Everything a caller of the engine can be told went wrong.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// Loading or running the model failed.
    #[error(transparent)]
    Model(#[from] kiln_models::ModelError),
    /// Building the tokenizer or chat template failed, or a prompt could not be encoded.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// Invalid sampling parameters.
    #[error(transparent)]
    Sampling(#[from] kiln_core::sample::SamplingError),
    /// The prompt does not fit the context window.
    #[error("the prompt has {prompt_tokens} tokens but the context holds {max_ctx} (and at least one token must be generated)")]
    PromptTooLong {
        /// Tokens in the prompt.
        prompt_tokens: usize,
        /// The context length.
        max_ctx: usize,
    },
    /// A response format or grammar that cannot be compiled or enforced.
    #[error("{0}")]
    Grammar(#[from] kiln_grammar::GrammarError),
    /// The request is invalid in some other way.
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// The KV cache cannot hold the request even when empty.
    #[error("the KV cache ({capacity} tokens) cannot hold a request of {needed} tokens")]
    KvCapacity {
        /// Tokens needed.
        needed: usize,
        /// Tokens the cache holds.
        capacity: usize,
    },
    /// The context asked for needs more KV memory than is left after the
    /// weights.
    #[error(
        "a {ctx}-token context needs {:.2} GiB of KV cache ({type_k}/{type_v}) but {:.2} GiB are available after the weights; lower --ctx-size, use a quantized cache (--cache-type-k q8_0 --cache-type-v q8_0, or q4_0), or free memory",
        gib(*needed), gib(*available)
    )]
    ContextTooLarge {
        /// Tokens of context asked for.
        ctx: usize,
        /// Bytes of KV cache one such context needs.
        needed: u64,
        /// Bytes available for the KV cache.
        available: u64,
        /// How K is stored.
        type_k: kiln_models::KvType,
        /// How V is stored.
        type_v: kiln_models::KvType,
    },
    /// The model would need more memory than the machine has available.
    #[error(
        "not enough memory for this model: it needs about {:.2} GiB (weights {:.2} GiB, KV cache {:.2} GiB when full, host KV tier {:.2} GiB) but {:.2} GiB are available; lower --ctx-size, --kv-cache-tokens or --kv-tier-mib, or free memory",
        gib(estimate.total()), gib(estimate.weights), gib(estimate.kv_cache), gib(estimate.kv_tier), gib(*available)
    )]
    InsufficientMemory {
        /// What the model would need.
        estimate: crate::memory::MemoryEstimate,
        /// Bytes available.
        available: u64,
    },
    /// The device failed or refused (no GPU, out of device memory, a build
    /// without CUDA).
    #[error(transparent)]
    Device(#[from] kiln_backend::BackendError),
    /// The CPU cannot run the instruction-set level asked for.
    #[error(transparent)]
    CpuIsa(#[from] kiln_kernels::isa::IsaError),
    /// A request or an unload names an adapter that is not registered.
    #[error("unknown LoRA adapter '{0}'")]
    UnknownLora(String),
    /// A load names an adapter that is already registered.
    #[error("a LoRA adapter named '{0}' is already loaded (unload it first)")]
    LoraExists(String),
    /// An unload names an adapter that requests still use.
    #[error("LoRA adapter '{name}' is in use by {requests} request(s); unload it when they end")]
    LoraInUse {
        /// The adapter.
        name: String,
        /// Requests queued or running with it.
        requests: usize,
    },
    /// A LoRA adapter's factors do not fit in the device's free memory.
    #[error(
        "not enough {device} memory for LoRA adapter '{name}' ({mib} MiB of factors as read): unload an adapter, or leave room at start (--cuda reserve-mib=N)"
    )]
    LoraOutOfMemory {
        /// The adapter.
        name: String,
        /// The backend's name.
        device: &'static str,
        /// Its factors' bytes as read (f32), in MiB.
        mib: usize,
    },
    /// The engine thread has stopped.
    #[error("the engine has shut down")]
    Shutdown,
}

fn gib(b: u64) -> f64 {
    b as f64 / (1u64 << 30) as f64
}

/// Result alias of this crate.
pub type Result<T, E = EngineError> = std::result::Result<T, E>;
