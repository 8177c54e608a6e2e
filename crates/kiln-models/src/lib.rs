//! # kiln-models
//!
//! Model files in, logits out. This crate loads GGUF files and Hugging Face
//! safetensors directories into one set of weight types ([`weights::Linear`]
//! hides the format: F32/F16/BF16 and every GGUF quantization), and runs the
//! model families in [`arch`] over the engine-owned paged KV cache
//! ([`KvCache`]): a forward pass takes a [`ForwardBatch`] of sequences at any
//! stage (prefill chunks, decodes) and never copies or concatenates cached
//! K/V.
//!
//! ```no_run
//! # fn main() -> Result<(), kiln_models::ModelError> {
//! use kiln_models::{load, LoadOptions, ForwardBatch, LogitsWant, KvCache};
//! let m = load(std::path::Path::new("model.gguf"), &LoadOptions::default())?;
//! let pool = kiln_kernels::ThreadPool::new(2);
//! let mut kv = KvCache::new(m.model.config(), 64, 16);
//! let mut batch = ForwardBatch::new();
//! batch.push_seq(&[1, 2, 3], 0, &[0], 16, LogitsWant::Last)?;
//! let (mut scratch, mut logits) = (Default::default(), Vec::new());
//! m.model.forward(&pool, &batch, &mut kv, &mut scratch, &mut logits)?;
//! # Ok(()) }
//! ```
#![warn(missing_docs, unreachable_pub)]
#![deny(unused_must_use)]

pub mod arch;
pub mod batch;
pub mod config;
pub mod error;
pub mod kv_cache;
pub mod loader;
#[doc(hidden)]
pub mod testing;
pub mod weights;

use std::path::{Path, PathBuf};

pub use batch::{ForwardBatch, LogitsWant, SeqSpan};
pub use config::{Arch, ModelConfig};
pub use error::{ModelError, Result};
pub use kv_cache::KvCache;
pub use loader::{detect_format, GgufSource, ModelFormat, SafetensorsSource, TensorSource};

use arch::llama::{Llama, Scratch};
use kiln_kernels::ThreadPool;

/// How to load a model.
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
}

/// A loaded model of any supported family.
pub enum Model {
    /// The llama graph (Llama, Mistral, Qwen2, Qwen3).
    Llama(Llama),
}

impl Model {
    /// The configuration.
    pub fn config(&self) -> &ModelConfig {
        match self {
            Self::Llama(m) => m.config(),
        }
    }
    /// Runs one batched forward pass (see [`Llama::forward`]).
    pub fn forward(
        &self,
        pool: &ThreadPool,
        batch: &ForwardBatch,
        kv: &mut KvCache,
        scratch: &mut Scratch,
        logits: &mut Vec<f32>,
    ) -> Result<()> {
        match self {
            Self::Llama(m) => m.forward(pool, batch, kv, scratch, logits),
        }
    }
    /// Weight bytes read per decoded token.
    pub fn weight_bytes_per_token(&self) -> usize {
        match self {
            Self::Llama(m) => m.weight_bytes_per_token(),
        }
    }
}

/// Reusable activation buffers; keep one per engine.
pub type ForwardScratch = Scratch;

/// A model with what the engine needs besides the weights.
pub struct LoadedModel {
    /// The model.
    pub model: Model,
    /// Its file format.
    pub format: ModelFormat,
    /// The file or directory it came from.
    pub path: PathBuf,
    /// The parsed GGUF file (tokenizer and chat template metadata), for GGUF models.
    pub gguf: Option<kiln_gguf::GgufFile>,
    /// The context length the model was loaded for.
    pub max_ctx: usize,
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
        ModelFormat::Safetensors => OpenedModel {
            config: hf_config(path)?,
            source: Box::new(SafetensorsSource::open(path)?),
            gguf: None,
            format,
        },
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

/// Loads a GGUF file or a Hugging Face directory.
pub fn load(path: &Path, opts: &LoadOptions) -> Result<LoadedModel> {
    let OpenedModel { config: cfg, source, gguf, format } = open(path)?;
    let max_ctx = context_length(&cfg, opts.max_ctx);
    let model = match cfg.arch {
        Arch::Llama | Arch::Qwen2 | Arch::Qwen3 => {
            Model::Llama(Llama::load(cfg, source.as_ref(), max_ctx, !opts.exact)?)
        }
    };
    Ok(LoadedModel { model, format, path: path.to_path_buf(), gguf, max_ctx })
}
