//! Encoder models: text in, one vector (embeddings) or one score
//! (reranking) out. [`open_encoder`] reads a Hugging Face directory or a
//! GGUF file; an [`Encoder`] holds the model on one device and runs
//! batches of whole inputs, each attending to itself only, with no KV
//! cache and no sampling; pooling ([`PoolingConfig`]) and a reranker's
//! head run on the host.
//!
//! ```no_run
//! # fn main() -> Result<(), kiln_models::ModelError> {
//! use kiln_models::encoder::{open_encoder, Encoder};
//! let opened = open_encoder(std::path::Path::new("all-MiniLM-L6-v2/"))?;
//! let be = kiln_models::cpu_backend(None, true);
//! let mut enc = Encoder::load(be, &opened)?;
//! let vectors = enc.embed(&[&[101, 7592, 102][..]])?;
//! assert_eq!(vectors[0].len(), enc.dim());
//! # Ok(()) }
//! ```

mod config;
mod decoder;
mod pooling;

pub use config::EncoderConfig;
pub use decoder::DecoderEmbedder;
pub use pooling::{normalize, Pooling, PoolingConfig};

use std::path::Path;

use kiln_backend::{Backend, ForwardBatch};

use crate::arch::bert::{Bert, EncoderActivations, RankHead};
use crate::error::{ModelError, Result};
use crate::loader::{detect_format, GgufSource, ModelFormat, SafetensorsSource, TensorSource};
use crate::Arch;

/// An encoder file opened for reading weights.
pub struct OpenedEncoder {
    /// Shape and hyper-parameters.
    pub config: EncoderConfig,
    /// Pooling, normalization, and whether it is a reranker.
    pub pooling: PoolingConfig,
    /// The weights, by canonical (GGUF) name.
    pub source: Box<dyn TensorSource>,
    /// The parsed GGUF file, for GGUF models (its tokenizer).
    pub gguf: Option<kiln_gguf::GgufFile>,
    /// Longest input the model is used with: sentence-transformers'
    /// `max_seq_length` where given (all-MiniLM: 256), else its positions.
    pub max_tokens: usize,
}

/// `max_seq_length` of a directory's `sentence_bert_config.json`.
fn st_max_seq_length(dir: &Path) -> Option<usize> {
    let text = std::fs::read_to_string(dir.join("sentence_bert_config.json")).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    v["max_seq_length"].as_u64().and_then(|n| usize::try_from(n).ok()).filter(|&n| n > 0)
}

/// What kind of embedding model a path holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmbeddingModel {
    /// An encoder ([`open_encoder`], [`Encoder`]).
    Encoder,
    /// A decoder whose file says how to pool it (GGUF `pooling_type`, or a
    /// sentence-transformers pooling module): a [`DecoderEmbedder`].
    Decoder(PoolingConfig),
}

/// Whether `path` holds an embedding model, and which kind; `None` for a
/// text generation model. Errors only when the path cannot be read.
pub fn embedding_model(path: &Path) -> Result<Option<EmbeddingModel>> {
    if is_encoder(path)? {
        return Ok(Some(EmbeddingModel::Encoder));
    }
    Ok(match detect_format(path)? {
        ModelFormat::Gguf => {
            let file = kiln_gguf::GgufFile::open(path)?;
            let meta = file.metadata();
            match meta.opt_arch_u32("pooling_type") {
                Ok(Some(t)) => Some(EmbeddingModel::Decoder(PoolingConfig::from_gguf(Some(t))?)),
                _ => None,
            }
        }
        ModelFormat::Safetensors => {
            let modules = std::fs::read_to_string(path.join("modules.json")).unwrap_or_default();
            if modules.contains("Pooling") {
                Some(EmbeddingModel::Decoder(PoolingConfig::from_hf_dir(path)?))
            } else {
                None
            }
        }
    })
}

/// Whether `path` holds an encoder (its architecture is one); errors only
/// when the path cannot be read as a model at all.
pub fn is_encoder(path: &Path) -> Result<bool> {
    Ok(match detect_format(path)? {
        ModelFormat::Gguf => {
            let file = kiln_gguf::GgufFile::open(path)?;
            let arch = file.metadata().arch().map(str::to_string).unwrap_or_default();
            Arch::parse(&arch).is_ok_and(Arch::is_encoder)
        }
        ModelFormat::Safetensors => {
            let p = path.join("config.json");
            let json = std::fs::read_to_string(&p).map_err(|e| ModelError::Io { path: p, source: e })?;
            let v: serde_json::Value = serde_json::from_str(&json).unwrap_or_default();
            let name = v["architectures"][0].as_str().or(v["model_type"].as_str()).unwrap_or_default();
            Arch::parse(name).is_ok_and(Arch::is_encoder)
        }
    })
}

/// Opens an encoder: a Hugging Face directory (`config.json`, safetensors,
/// sentence-transformers pooling files) or a GGUF file.
pub fn open_encoder(path: &Path) -> Result<OpenedEncoder> {
    if !is_encoder(path)? {
        return Err(ModelError::Config(format!(
            "{} is a text generation model, not an encoder (embeddings need a model such as all-minilm)",
            path.display()
        )));
    }
    match detect_format(path)? {
        ModelFormat::Gguf => {
            let src = GgufSource::open(path)?;
            let meta = src.file().metadata();
            let rows = |name: &str| src.file().tensor(name).and_then(|t| t.dims.get(1).copied()).unwrap_or(0) as usize;
            let config = EncoderConfig::from_gguf(meta, rows("token_embd.weight"), rows("token_types.weight"))?;
            let pooling_type = meta
                .opt_arch_u32("pooling_type")
                .map_err(|e| ModelError::Format { path: path.to_path_buf(), msg: e.to_string() })?;
            let pooling = PoolingConfig::from_gguf(pooling_type)?;
            let gguf = Some(src.file().clone());
            let max_tokens = config.max_position;
            Ok(OpenedEncoder { config, pooling, source: Box::new(src), gguf, max_tokens })
        }
        ModelFormat::Safetensors => {
            let p = path.join("config.json");
            let json = std::fs::read_to_string(&p).map_err(|e| ModelError::Io { path: p.clone(), source: e })?;
            let config = EncoderConfig::from_hf_json(&json)?;
            let mut pooling = PoolingConfig::from_hf_dir(path)?;
            if json.contains("ForSequenceClassification") {
                pooling = PoolingConfig { pooling: Pooling::Cls, normalize: false, rank: true };
            }
            let source = Box::new(SafetensorsSource::open(path, config.arch)?);
            let max_tokens = st_max_seq_length(path).map_or(config.max_position, |m| m.min(config.max_position));
            Ok(OpenedEncoder { config, pooling, source, gguf: None, max_tokens })
        }
    }
}

/// What an embedding thread runs: an [`Encoder`] or a [`DecoderEmbedder`],
/// on any device.
pub trait EmbedModel: Send {
    /// One pooled vector per input.
    fn embed_inputs(&mut self, inputs: &[EncoderInput<'_>]) -> Result<Vec<Vec<f32>>>;
    /// A reranker's score per pair input.
    fn score(&mut self, inputs: &[EncoderInput<'_>]) -> Result<Vec<f32>>;
    /// Called once on the thread that will run it.
    fn enter_thread(&self);
}

impl<B: Backend> EmbedModel for Encoder<B> {
    fn embed_inputs(&mut self, inputs: &[EncoderInput<'_>]) -> Result<Vec<Vec<f32>>> {
        Encoder::embed_inputs(self, inputs)
    }
    fn score(&mut self, inputs: &[EncoderInput<'_>]) -> Result<Vec<f32>> {
        Encoder::score(self, inputs)
    }
    fn enter_thread(&self) {
        self.backend.enter_engine_thread();
    }
}

impl<B: Backend> EmbedModel for DecoderEmbedder<B> {
    fn embed_inputs(&mut self, inputs: &[EncoderInput<'_>]) -> Result<Vec<Vec<f32>>> {
        DecoderEmbedder::embed_inputs(self, inputs)
    }
    fn score(&mut self, _inputs: &[EncoderInput<'_>]) -> Result<Vec<f32>> {
        Err(ModelError::Config("this model is not a reranker (it has no classification head)".into()))
    }
    fn enter_thread(&self) {
        self.runner().backend().enter_engine_thread();
    }
}

/// An encoder on a device, with its activation buffers.
pub struct Encoder<B: Backend> {
    model: Bert<B>,
    backend: B,
    acts: EncoderActivations<B>,
    pooling: PoolingConfig,
    head: Option<RankHead>,
    max_tokens: usize,
    batch: ForwardBatch,
    rows: Vec<f32>,
}

/// One input of a batch: its token ids and, for the second segment of a
/// pair, where that segment starts (BERT's token type 1 from there on).
#[derive(Debug, Clone, Copy)]
pub struct EncoderInput<'a> {
    /// Token ids, special tokens included.
    pub tokens: &'a [u32],
    /// First row of the second segment (token type 1), if any.
    pub second_from: Option<usize>,
}

impl<B: Backend> Encoder<B> {
    /// Places `opened`'s weights on `backend`.
    pub fn load(mut backend: B, opened: &OpenedEncoder) -> Result<Self> {
        let model = Bert::load(&mut backend, opened.config.clone(), opened.source.as_ref())?;
        let acts = model.activations(&mut backend)?;
        let head = if opened.pooling.rank {
            Some(RankHead::load(opened.source.as_ref(), opened.config.hidden_size)?)
        } else {
            None
        };
        Ok(Self {
            model,
            backend,
            acts,
            pooling: opened.pooling,
            head,
            max_tokens: opened.max_tokens,
            batch: ForwardBatch::new(),
            rows: Vec::new(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &EncoderConfig {
        self.model.config()
    }
    /// Pooling and normalization.
    pub fn pooling(&self) -> PoolingConfig {
        self.pooling
    }
    /// Whether the model scores pairs (a reranker) rather than embedding.
    pub fn is_reranker(&self) -> bool {
        self.head.is_some()
    }
    /// Width of the vectors.
    pub fn dim(&self) -> usize {
        self.config().hidden_size
    }
    /// Longest input, in tokens (see [`OpenedEncoder::max_tokens`]).
    pub fn max_tokens(&self) -> usize {
        self.max_tokens
    }
    /// The device.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// The last layer's token rows of every input, `dim` floats per row,
    /// inputs concatenated (one forward pass).
    pub fn hidden(&mut self, inputs: &[EncoderInput<'_>]) -> Result<&[f32]> {
        let cfg = self.model.config();
        let (max, vocab) = (cfg.max_position, cfg.vocab_size);
        let second_type = cfg.type_vocab_size > 1 && cfg.rope_theta.is_none();
        self.batch.clear();
        for inp in inputs {
            let n = inp.tokens.len();
            if n == 0 {
                return Err(ModelError::Batch("an empty input".into()));
            }
            if n > max {
                return Err(ModelError::Batch(format!("an input of {n} tokens is longer than the model's {max}")));
            }
            if let Some(&t) = inp.tokens.iter().find(|&&t| t as usize >= vocab) {
                return Err(ModelError::Batch(format!("token id {t} is outside the vocabulary ({vocab} tokens)")));
            }
            let start = self.batch.tokens.len();
            self.batch.tokens.extend_from_slice(inp.tokens);
            for p in 0..n {
                let ty = usize::from(second_type && inp.second_from.is_some_and(|s| p >= s));
                self.batch.positions.push((ty * max + p) as u32);
                self.batch.slots.push(0);
            }
            self.batch.seqs.push(kiln_backend::SeqSpan {
                start,
                len: n,
                pos0: 0,
                block_table: Vec::new(),
                window_table: Vec::new(),
                logits: kiln_backend::LogitsWant::None,
                lora: None,
            });
        }
        if self.batch.is_empty() {
            return Err(ModelError::Batch("empty batch".into()));
        }
        let Self { model, backend, acts, batch, rows, .. } = self;
        let step = backend.begin_encoder(batch)?;
        backend.run(&step, &mut |be| model.body(be, &step, acts).map_err(crate::runner::into_backend))?;
        backend.read_rows(&step, &mut acts.x, rows)?;
        Ok(rows)
    }

    /// One pooled (and, as the model says, normalized) vector per input.
    pub fn embed(&mut self, inputs: &[&[u32]]) -> Result<Vec<Vec<f32>>> {
        let inputs: Vec<EncoderInput<'_>> =
            inputs.iter().map(|t| EncoderInput { tokens: t, second_from: None }).collect();
        self.embed_inputs(&inputs)
    }

    /// [`Encoder::embed`] over inputs that may be pairs.
    pub fn embed_inputs(&mut self, inputs: &[EncoderInput<'_>]) -> Result<Vec<Vec<f32>>> {
        let (d, pooling) = (self.dim(), self.pooling);
        let rows = self.hidden(inputs)?;
        let mut at = 0;
        Ok(inputs
            .iter()
            .map(|inp| {
                let n = inp.tokens.len();
                let mut v = Vec::with_capacity(d);
                pooling.pool(&rows[at * d..(at + n) * d], d, &mut v);
                at += n;
                v
            })
            .collect())
    }

    /// The relevance score of each (query, document) pair input (a
    /// reranker's head on its first row).
    pub fn score(&mut self, inputs: &[EncoderInput<'_>]) -> Result<Vec<f32>> {
        let Some(head) = self.head.clone() else {
            return Err(ModelError::Config("this model is not a reranker (it has no classification head)".into()));
        };
        let d = self.dim();
        let rows = self.hidden(inputs)?;
        let mut at = 0;
        Ok(inputs
            .iter()
            .map(|inp| {
                let s = head.score(&rows[at * d..(at + 1) * d]);
                at += inp.tokens.len();
                s
            })
            .collect())
    }
}
