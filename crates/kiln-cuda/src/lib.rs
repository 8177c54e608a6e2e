//! # kiln-cuda
//!
//! The llama graph on an NVIDIA GPU: weights in device memory as f16 or
//! bf16 (GGUF quantized types are dequantized to f16 at load), cuBLAS for
//! the projections of prompt chunks (16-bit inputs, f32 accumulation and
//! output), and our own kernels (`kernels/*.cu`) for the rest: decode
//! products with RMSNorm, bias, SwiGLU and the residual add fused in,
//! embedding, Q/K norm + RoPE + the paged-KV write in one pass, split-K
//! paged attention that reads K/V blocks in place, a tensor-core prefill
//! attention, and the sampler ([`sample`]), so that a decode step sends
//! only token ids to the host.
//!
//! The KV pool lives in device memory, laid out `[block][kv head][slot][hd]`
//! per layer, with the same block ids the engine's `KvManager` hands out, so
//! prefix caching, chunked prefill and continuous batching work unchanged.
//!
//! Without the `cuda` feature the crate builds everywhere (CI has no CUDA
//! toolkit) and [`CudaModel::load`] returns [`CudaError::NotBuilt`]; the
//! host-side planning in [`plan`] is tested either way. See docs/cuda.md.
#![warn(missing_docs, unreachable_pub)]

pub mod convert;
pub mod plan;
pub mod sample;

#[cfg(feature = "cuda")]
mod gpu;
#[cfg(feature = "cuda")]
mod llama;

use kiln_models::ModelError;

/// Errors of the CUDA backend.
#[derive(Debug, thiserror::Error)]
pub enum CudaError {
    /// This binary has no CUDA backend.
    #[error(
        "this kiln was built without CUDA support: rebuild with `cargo build --release -p kiln --features cuda` (docs/cuda.md)"
    )]
    NotBuilt,
    /// The driver or runtime failed (no GPU, bad ordinal, launch error).
    #[error("CUDA: {0}")]
    Driver(String),
    /// A cuBLAS call failed.
    #[error("cuBLAS: {0}")]
    Blas(String),
    /// The model uses something this backend does not run yet.
    #[error("not supported on CUDA: {0}")]
    Unsupported(String),
    /// The model does not fit in device memory.
    #[error("not enough GPU memory: {0}")]
    OutOfMemory(String),
    /// Reading the model failed, or a batch was malformed.
    #[error(transparent)]
    Model(#[from] ModelError),
}

/// Result of the CUDA backend.
pub type Result<T> = std::result::Result<T, CudaError>;

/// How to place a model on the GPU.
#[derive(Debug, Clone)]
pub struct CudaOptions {
    /// Device ordinal (`cuda:N`).
    pub ordinal: usize,
    /// Context length to support.
    pub max_ctx: usize,
    /// Tokens per KV block.
    pub block_size: usize,
    /// Cap on the KV pool in tokens; `None` sizes it from free device memory.
    pub kv_tokens: Option<usize>,
    /// Most tokens one forward pass may hold (the scheduler's step budget).
    pub max_batch_tokens: usize,
    /// Device memory kept free for cuBLAS and the driver, in bytes.
    pub reserve_bytes: usize,
    /// Block slots of a host KV tier, in page-locked host memory (0: none;
    /// with a tier, a staging buffer of at most 64 MiB is taken from device
    /// memory before the KV pool is sized).
    pub tier_slots: usize,
}

impl Default for CudaOptions {
    fn default() -> Self {
        Self {
            ordinal: 0,
            max_ctx: 4096,
            block_size: 16,
            kv_tokens: None,
            max_batch_tokens: 2048,
            reserve_bytes: 1 << 30,
            tier_slots: 0,
        }
    }
}

#[cfg(feature = "cuda")]
pub use llama::CudaModel;

/// A model on the GPU (this build has no CUDA backend: it cannot be made).
#[cfg(not(feature = "cuda"))]
pub struct CudaModel {
    never: std::convert::Infallible,
}

#[cfg(not(feature = "cuda"))]
impl CudaModel {
    /// Always fails: this build has no CUDA backend.
    pub fn load(_opened: &kiln_models::OpenedModel, _opts: &CudaOptions) -> Result<Self> {
        Err(CudaError::NotBuilt)
    }
    /// The configuration.
    pub fn config(&self) -> &kiln_models::ModelConfig {
        match self.never {}
    }
    /// KV blocks in the device pool.
    pub fn num_blocks(&self) -> usize {
        match self.never {}
    }
    /// Weight bytes read per decoded token.
    pub fn weight_bytes_per_token(&self) -> usize {
        match self.never {}
    }
    /// The device's name.
    pub fn device_name(&self) -> String {
        match self.never {}
    }
    /// Values of one KV block across every layer.
    pub fn block_elems(&self) -> usize {
        match self.never {}
    }
    /// Most blocks one tier copy moves at once.
    pub fn tier_batch(&self) -> usize {
        match self.never {}
    }
    /// Block slots of the host KV tier.
    pub fn tier_slots(&self) -> usize {
        match self.never {}
    }
    /// Copies KV blocks into tier slots.
    pub fn tier_save(&mut self, _blocks: &[u32], _slots: &[u32]) -> Result<()> {
        match self.never {}
    }
    /// The values in a tier slot.
    pub fn tier_slot(&mut self, _i: usize) -> Result<Vec<u16>> {
        match self.never {}
    }
    /// Copies tier slots into KV blocks.
    pub fn tier_load(&mut self, _slots: &[u32], _blocks: &[u32]) -> Result<()> {
        match self.never {}
    }
    /// Runs one batched forward pass and samples on the device.
    pub fn forward(
        &mut self,
        _batch: &kiln_models::ForwardBatch,
        _draws: &[Option<kiln_core::sample::DeviceDraw>],
        _tokens: &mut Vec<u32>,
        _logits: &mut Vec<f32>,
    ) -> Result<()> {
        match self.never {}
    }
}

/// Whether this build has the CUDA backend.
pub const AVAILABLE: bool = cfg!(feature = "cuda");
