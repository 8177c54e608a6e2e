//! # kiln-models
//!
//! Model files in, logits out, on any device. This crate loads GGUF files
//! and Hugging Face safetensors directories ([`loader`]: one canonical
//! naming, every checkpoint quirk in one place) and runs the model
//! families in [`arch`], each written once over [`kiln_backend::Backend`].
//! A [`Runner`] holds a model on one device with its KV memory; a forward
//! pass takes a [`ForwardBatch`] of sequences at any stage (prefill
//! chunks, decodes) and never copies or concatenates cached K/V.
//!
//! ```no_run
//! # fn main() -> Result<(), kiln_models::ModelError> {
//! use kiln_models::{load, LoadOptions, ForwardBatch, LogitsWant};
//! let mut m = load(std::path::Path::new("model.gguf"), &LoadOptions::default())?;
//! let mut batch = ForwardBatch::new();
//! batch.push_seq(&[1, 2, 3], 0, &[0], 16, LogitsWant::Last)?;
//! let mut logits = Vec::new();
//! m.logits(&batch, &mut logits)?;
//! # Ok(()) }
//! ```
#![warn(missing_docs, unreachable_pub)]
#![deny(unused_must_use)]

pub mod arch;
pub mod config;
pub mod encoder;
pub mod error;
pub mod loader;
pub mod lora;
pub mod rope_scaling;
mod runner;
#[doc(hidden)]
pub mod testing;
pub mod weights;

use std::path::Path;

pub use config::{Arch, ModelConfig};
pub use error::{ModelError, Result};
pub use kiln_backend::{Backend, Draw, ForwardBatch, KvType, LogitsWant, LoraUse, SeqSpan};
pub use loader::{detect_format, GgufSource, ModelFormat, SafetensorsSource, TensorSource};
pub use lora::{LoraAdapter, Proj};
pub use runner::{Model, RunOptions, Runner};

use kiln_kernels::{CpuBackend, CpuOptions, ThreadPool};

/// How to load a model on the CPU ([`load`]).
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// Context length to support (defaults to the model's trained length).
    pub max_ctx: Option<usize>,
    /// Keep weights in their file's form (no repacking): the K-quant
    /// formats are then computed in f32 from the file's bytes instead of by
    /// the integer kernels, whose 8-bit inputs round the activations (the
    /// 32-value formats Q4_0 to Q8_0 take 8-bit inputs either way, as in
    /// llama.cpp). Slower; for reference runs such as the GPU checks.
    pub exact: bool,
    /// KV blocks (default: four contexts).
    pub kv_blocks: Option<usize>,
    /// Tokens per KV block (default 16).
    pub block_size: Option<usize>,
    /// Kernel threads (default: the available cores).
    pub threads: Option<usize>,
    /// Keep K/V in bf16 pairs for the bf16 prompt attention where the CPU
    /// has AVX-512 BF16 (default: f16, read by the f32 kernels).
    pub bf16_kv: bool,
    /// How K is stored in the KV cache (default `f16`).
    pub type_k: KvType,
    /// How V is stored in the KV cache (default `f16`).
    pub type_v: KvType,
}

/// Bytes one token of context costs in a 16-bit KV cache.
pub fn kv_bytes_per_token(cfg: &ModelConfig) -> usize {
    kv_cache_bytes_per_token(cfg, KvType::F16, KvType::F16)
}

/// The sliding-window layers of `cfg` that can keep only their window in
/// the KV memory, and the window (in positions): `None` unless the window
/// is shorter than `max_ctx` and some layer is local.
pub fn window_layers(cfg: &ModelConfig, max_ctx: usize) -> Option<(usize, kiln_backend::LayerSet)> {
    let w = cfg.sliding_window.filter(|&w| w > 0 && w < max_ctx)?;
    let layers = kiln_backend::LayerSet::from_fn(cfg.num_layers, |l| cfg.is_local_layer(l))?;
    (!layers.is_empty()).then_some((w, layers))
}

/// Blocks of `block_size` a window pool needs for `seqs` sequences at once
/// (each holds its window and the block its next token opens) while a step
/// computes at most `step_tokens` tokens, twice over: the other half keeps
/// the windows of finished sequences for prefix hits. Never more than
/// `pool_tokens` (the other layers' pool: a window layer needs no more), and
/// at least what one sequence and one step need.
pub fn window_pool_blocks(
    window: usize,
    block_size: usize,
    seqs: usize,
    step_tokens: usize,
    pool_tokens: usize,
) -> usize {
    let bs = block_size.max(1);
    let one = window.div_ceil(bs) + 2 + step_tokens.div_ceil(bs);
    let running = seqs.max(1) * (window.div_ceil(bs) + 2) + step_tokens.div_ceil(bs);
    (2 * running).min(pool_tokens.div_ceil(bs)).max(one)
}

/// Bytes one token of context costs in a KV cache of these K and V types.
pub fn kv_cache_bytes_per_token(cfg: &ModelConfig, type_k: KvType, type_v: KvType) -> usize {
    kiln_backend::kv_bytes_per_token(cfg.num_layers, cfg.kv_dim(), type_k, type_v)
}

/// A model file opened for reading weights, before any backend builds from it.
pub struct OpenedModel {
    /// Shape and hyper-parameters.
    pub config: ModelConfig,
    /// The weights, by canonical (GGUF) name.
    pub source: Box<dyn TensorSource>,
    /// The parsed GGUF file, for GGUF models.
    pub gguf: Option<kiln_gguf::GgufFile>,
    /// File format.
    pub format: ModelFormat,
}

impl OpenedModel {
    /// The model with `adapter` merged into its weights at load
    /// (`--lora-merge`; see [`lora::merge`]).
    pub fn with_merged_lora(self, adapter: LoraAdapter) -> Self {
        let OpenedModel { config, source, gguf, format } = self;
        OpenedModel { config, source: Box::new(lora::merge::MergedSource::new(source, adapter)), gguf, format }
    }

    /// What a device must know before the weights arrive.
    pub fn device_hints(&self) -> Result<kiln_backend::ModelHints> {
        let bf16 = self.source.get("blk.0.attn_q.weight")?.is_some_and(|t| t.ty == kiln_gguf::GgmlType::BF16);
        Ok(kiln_backend::ModelHints { head_dim: self.config.head_dim, bf16_weights: bf16, encoder: false })
    }
}

/// Opens a GGUF file or a Hugging Face directory and reads its configuration
/// (a device backend builds its own weights from `source`).
pub fn open(path: &Path) -> Result<OpenedModel> {
    let format = detect_format(path)?;
    Ok(match format {
        ModelFormat::Gguf => {
            let src = GgufSource::open(path)?;
            let config = src.config()?;
            let gguf = Some(src.file().clone());
            OpenedModel { config, source: Box::new(src), gguf, format }
        }
        ModelFormat::Safetensors => {
            let config = hf_config(path)?;
            let source = Box::new(SafetensorsSource::open(path, config.arch)?);
            OpenedModel { config, source, gguf: None, format }
        }
    })
}

/// The configuration of a Hugging Face directory (its `config.json`).
pub fn hf_config(dir: &Path) -> Result<ModelConfig> {
    let p = dir.join("config.json");
    let json = std::fs::read_to_string(&p).map_err(|e| ModelError::Io { path: p.clone(), source: e })?;
    ModelConfig::from_hf_json(&json)
}

/// The context length a model is run with: the wanted one, capped at the
/// model's trained length.
pub fn context_length(cfg: &ModelConfig, wanted: Option<usize>) -> usize {
    wanted.unwrap_or(cfg.max_position).min(cfg.max_position).max(1)
}

/// A CPU backend on `threads` kernel threads (default: the available
/// cores); `pack` repacks weights for the integer kernels.
pub fn cpu_backend(threads: Option<usize>, pack: bool) -> CpuBackend {
    let threads = threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    CpuBackend::new(ThreadPool::new(threads), CpuOptions { pack })
}

/// Loads a GGUF file or a Hugging Face directory on the CPU.
pub fn load(path: &Path, opts: &LoadOptions) -> Result<Runner<CpuBackend>> {
    let opened = open(path)?;
    let threads = opts.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let be = CpuBackend::new(ThreadPool::new(threads), CpuOptions { pack: !opts.exact });
    let max_ctx = context_length(&opened.config, opts.max_ctx);
    let run = RunOptions {
        max_ctx,
        block_size: opts.block_size.unwrap_or(16),
        kv_blocks: opts.kv_blocks,
        tier_slots: 0,
        fast_kv: opts.bf16_kv,
        type_k: opts.type_k,
        type_v: opts.type_v,
        window_blocks: None,
    };
    Runner::load(be, &opened, &run)
}
