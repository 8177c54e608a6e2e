//! Engine settings.

/// How the engine runs a model.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineConfig {
    /// Kernel threads (defaults to the available cores).
    pub threads: usize,
    /// Context length (defaults to the model's, capped at 4096 to bound KV memory).
    pub max_ctx: Option<usize>,
    /// Tokens per KV block.
    pub block_size: usize,
    /// KV pool size in tokens (defaults to twice the context length, so a
    /// conversation's prefix stays cached while a new request runs).
    pub kv_tokens: Option<usize>,
    /// Maximum prompt tokens computed per forward pass (chunked prefill).
    pub prefill_chunk: usize,
    /// Maximum sequences decoded together.
    pub max_running: usize,
}

/// Default context cap when the model's own context is larger.
pub const DEFAULT_MAX_CTX: usize = 4096;

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            threads: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
            max_ctx: None,
            block_size: 16,
            kv_tokens: None,
            prefill_chunk: 256,
            max_running: 8,
        }
    }
}
