//! The engine of encoder models: embeddings and reranking scores.
//!
//! An [`Embedder`] owns one encoder on one device and a thread that serves
//! it. Requests queue on a channel; the thread takes every request waiting
//! (up to [`BATCH_TOKENS`] tokens) into one forward pass, so concurrent
//! callers share batches the way generation requests share steps. There is
//! no KV cache and nothing to sample: a step is the whole of each input.
//! A failed batch is retried one request at a time, so one request's
//! failure never fails another's.

use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};

use kiln_models::encoder::{
    embedding_model, open_encoder, DecoderEmbedder, EmbedModel, EmbeddingModel, Encoder, EncoderInput, PoolingConfig,
};
use kiln_models::{Arch, ModelFormat, RunOptions, Runner};
use kiln_tokenize::Tokenizer;
use tokio::sync::oneshot;

use crate::config::{Device, EngineConfig};
use crate::error::{EngineError, Result};

/// Tokens one forward pass takes at most (inputs are never split).
pub const BATCH_TOKENS: usize = 8192;

/// Static facts about a loaded encoder.
#[derive(Debug, Clone)]
pub struct EmbedderInfo {
    /// Where it was loaded from.
    pub path: PathBuf,
    /// File format.
    pub format: ModelFormat,
    /// Family (an encoder's, or the decoder's of a decoder embedder).
    pub arch: Arch,
    /// Width of the vectors.
    pub dim: usize,
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Pairs are written RoBERTa's way (`<s> q </s></s> d </s>`).
    pub roberta_pairs: bool,
    /// Pooling and normalization (and whether it ranks pairs).
    pub pooling: PoolingConfig,
    /// Longest input in tokens.
    pub max_tokens: usize,
    /// Where it runs.
    pub device: Device,
}

impl EmbedderInfo {
    /// Whether the model scores (query, document) pairs rather than embedding.
    pub fn is_reranker(&self) -> bool {
        self.pooling.rank
    }
    /// Width of its vectors.
    pub fn dim(&self) -> usize {
        self.dim
    }
}

/// One input: tokens, and the first row of a pair's second segment.
type Input = (Vec<u32>, Option<usize>);

enum Job {
    Embed { inputs: Vec<Input>, reply: oneshot::Sender<Result<Vec<Vec<f32>>>> },
    Score { inputs: Vec<Input>, reply: oneshot::Sender<Result<Vec<f32>>> },
}

impl Job {
    fn tokens(&self) -> usize {
        let (Job::Embed { inputs, .. } | Job::Score { inputs, .. }) = self;
        inputs.iter().map(|i| i.0.len()).sum()
    }
}

struct Inner {
    tx: Mutex<Option<Sender<Job>>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    tokenizer: Arc<Tokenizer>,
    info: EmbedderInfo,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Ok(mut tx) = self.tx.lock() {
            tx.take();
        }
        if let Some(t) = self.thread.lock().ok().and_then(|mut t| t.take()) {
            let _ = t.join();
        }
    }
}

/// A running encoder. Cheap to clone; its thread stops with the last clone.
#[derive(Clone)]
pub struct Embedder {
    inner: Arc<Inner>,
}

/// Whether `path` holds an embedding model (an encoder, or a decoder whose
/// file says how to pool it) rather than a text generation model.
pub fn is_embedding_model(path: &Path) -> bool {
    embedding_model(path).ok().flatten().is_some()
}

/// Context a decoder embedder is built for (inputs longer are refused or cut).
const DECODER_MAX_TOKENS: usize = 8192;

impl Embedder {
    /// Loads an embedding model (GGUF file or Hugging Face directory) and
    /// starts its thread.
    pub fn start(path: &Path, cfg: &EngineConfig) -> Result<Self> {
        let kind = embedding_model(path)?.ok_or_else(|| {
            EngineError::InvalidRequest(format!(
                "{} is a text generation model, not an embedding model (such as all-minilm)",
                path.display()
            ))
        })?;
        if cfg.device == Device::Cpu && cfg.cpu_isa.is_some() {
            kiln_kernels::isa::set_cap(cfg.cpu_isa)?;
        }
        match kind {
            EmbeddingModel::Encoder => Self::start_encoder(path, cfg),
            EmbeddingModel::Decoder(pooling) => Self::start_decoder(path, cfg, pooling),
        }
    }

    fn start_encoder(path: &Path, cfg: &EngineConfig) -> Result<Self> {
        let opened = open_encoder(path)?;
        let tokenizer = tokenizer(path, opened.gguf.as_ref())?;
        let c = &opened.config;
        let info = EmbedderInfo {
            path: path.to_path_buf(),
            format: if opened.gguf.is_some() { ModelFormat::Gguf } else { ModelFormat::Safetensors },
            arch: c.arch,
            dim: c.hidden_size,
            vocab_size: c.vocab_size,
            roberta_pairs: c.roberta_pairs,
            pooling: opened.pooling,
            max_tokens: opened.max_tokens,
            device: cfg.device,
        };
        let net: Box<dyn EmbedModel> = match cfg.device {
            Device::Cpu => Box::new(Encoder::load(kiln_models::cpu_backend(Some(cfg.threads.max(1)), true), &opened)?),
            Device::Cuda(ordinal) => {
                let bf16 = opened.source.get("blk.0.attn_q.weight")?.is_some_and(|t| t.ty == kiln_gguf::GgmlType::BF16);
                let hints = kiln_backend::ModelHints { head_dim: c.head_dim(), bf16_weights: bf16, encoder: true };
                let opts = kiln_cuda::CudaOptions { ordinal, max_batch_tokens: BATCH_TOKENS, ..cfg.cuda.clone() };
                Box::new(Encoder::load(kiln_cuda::CudaBackend::open(&opts, &hints)?, &opened)?)
            }
            Device::Wgpu(_) => {
                return Err(EngineError::InvalidRequest(
                    "encoder embedding models do not run on wgpu yet (use --device cpu or cuda)".into(),
                ))
            }
        };
        Self::spawn(net, tokenizer, info)
    }

    fn start_decoder(path: &Path, cfg: &EngineConfig, pooling: PoolingConfig) -> Result<Self> {
        let opened = kiln_models::open(path)?;
        let tokenizer = tokenizer(path, opened.gguf.as_ref())?;
        let max_ctx = kiln_models::context_length(&opened.config, Some(DECODER_MAX_TOKENS));
        let block_size = 16;
        let run = RunOptions {
            max_ctx,
            block_size,
            // One batch's inputs, each rounded up to whole blocks.
            kv_blocks: Some(BATCH_TOKENS / block_size + 256),
            tier_slots: 0,
            fast_kv: false,
            ..RunOptions::default()
        };
        let net: Box<dyn EmbedModel> = match cfg.device {
            Device::Cpu => {
                let be = kiln_models::cpu_backend(Some(cfg.threads.max(1)), true);
                Box::new(DecoderEmbedder::new(Runner::load(be, &opened, &run)?, &opened, pooling)?)
            }
            Device::Cuda(ordinal) => {
                let opts = kiln_cuda::CudaOptions { ordinal, max_batch_tokens: BATCH_TOKENS, ..cfg.cuda.clone() };
                let be = kiln_cuda::CudaBackend::open(&opts, &opened.device_hints()?)?;
                Box::new(DecoderEmbedder::new(Runner::load(be, &opened, &run)?, &opened, pooling)?)
            }
            Device::Wgpu(ordinal) => {
                let opts = crate::handle::wgpu_options(ordinal, BATCH_TOKENS);
                let be = kiln_wgpu::WgpuBackend::open(&opts, &opened.device_hints()?)?;
                Box::new(DecoderEmbedder::new(Runner::load(be, &opened, &run)?, &opened, pooling)?)
            }
        };
        let c = &opened.config;
        let info = EmbedderInfo {
            path: path.to_path_buf(),
            format: opened.format,
            arch: c.arch,
            dim: c.hidden_size,
            vocab_size: c.vocab_size,
            roberta_pairs: false,
            pooling,
            max_tokens: max_ctx,
            device: cfg.device,
        };
        Self::spawn(net, tokenizer, info)
    }

    fn spawn(net: Box<dyn EmbedModel>, tokenizer: Tokenizer, info: EmbedderInfo) -> Result<Self> {
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("kiln-embed".into())
            .spawn(move || serve(net, rx))
            .map_err(|e| EngineError::InvalidRequest(format!("cannot start the embedding thread: {e}")))?;
        Ok(Self {
            inner: Arc::new(Inner {
                tx: Mutex::new(Some(tx)),
                thread: Mutex::new(Some(thread)),
                tokenizer: Arc::new(tokenizer),
                info,
            }),
        })
    }

    /// Facts about the model.
    pub fn info(&self) -> &EmbedderInfo {
        &self.inner.info
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.inner.tokenizer
    }

    /// `text` as the model's input (its special tokens around it). Longer
    /// than [`EmbedderInfo::max_tokens`]: cut to fit when `truncate`, keeping
    /// the closing special token, else an error that names the limit.
    pub fn tokenize(&self, text: &str, truncate: bool) -> Result<Vec<u32>> {
        let ids = self.inner.tokenizer.encode(text, true).map_err(|e| EngineError::Tokenizer(e.to_string()))?;
        self.fit(ids, truncate)
    }

    /// Checks token ids given by the caller (in the vocabulary, not empty,
    /// within the limit or truncated).
    pub fn check_tokens(&self, ids: Vec<u32>, truncate: bool) -> Result<Vec<u32>> {
        let vocab = self.inner.info.vocab_size;
        if let Some(bad) = ids.iter().find(|&&t| t as usize >= vocab) {
            return Err(EngineError::InvalidRequest(format!(
                "token id {bad} is outside the vocabulary ({vocab} tokens)"
            )));
        }
        self.fit(ids, truncate)
    }

    fn fit(&self, mut ids: Vec<u32>, truncate: bool) -> Result<Vec<u32>> {
        let max = self.inner.info.max_tokens;
        if ids.is_empty() {
            return Err(EngineError::InvalidRequest("an input is empty".into()));
        }
        if ids.len() > max {
            if !truncate {
                return Err(EngineError::PromptTooLong { prompt_tokens: ids.len(), max_ctx: max });
            }
            let last = ids[ids.len() - 1];
            ids.truncate(max);
            if self.inner.tokenizer.is_special(last) {
                ids[max - 1] = last;
            }
        }
        Ok(ids)
    }

    /// A (query, document) pair as a cross-encoder reads it: BERT's
    /// `[CLS] q [SEP] d [SEP]` (the document as token type 1) or RoBERTa's
    /// `<s> q </s></s> d </s>`. Too long: the document is cut when
    /// `truncate`, else an error. Returns the tokens and where the second
    /// segment starts.
    pub fn pair_tokens(&self, query: &str, doc: &str, truncate: bool) -> Result<Input> {
        let tok = &self.inner.tokenizer;
        let err = |e: kiln_tokenize::TokenizeError| EngineError::Tokenizer(e.to_string());
        let q = tok.encode(query, true).map_err(err)?;
        let d = tok.encode(doc, true).map_err(err)?;
        // Both come wrapped as `open … close`: the second segment drops its
        // opening (BERT) or keeps it as the second separator (RoBERTa).
        let roberta = self.inner.info.roberta_pairs;
        let d_body = d.get(1..).unwrap_or_default();
        let mut ids = q;
        let second = ids.len();
        if roberta {
            // `</s></s>`: the query's closing, then the document's own.
            if let Some(&close) = ids.last() {
                ids.push(close);
            }
        }
        ids.extend_from_slice(d_body);
        let max = self.inner.info.max_tokens;
        if ids.len() > max {
            if !truncate || second + 2 > max {
                return Err(EngineError::PromptTooLong { prompt_tokens: ids.len(), max_ctx: max });
            }
            let last = ids[ids.len() - 1];
            ids.truncate(max);
            ids[max - 1] = last;
        }
        Ok((ids, Some(second)))
    }

    /// Keeps the first `dims` values of each vector, renormalized when the
    /// model's vectors are unit length (Matryoshka-style truncation); a
    /// width of 0 or above the model's is an error that names the range.
    pub fn cut_dimensions(&self, vectors: &mut [Vec<f32>], dims: usize) -> Result<()> {
        let dim = self.inner.info.dim;
        if dims == 0 || dims > dim {
            return Err(EngineError::InvalidRequest(format!("`dimensions` must be between 1 and {dim}, got {dims}")));
        }
        for v in vectors {
            v.truncate(dims);
            if self.inner.info.pooling.normalize {
                kiln_models::encoder::normalize(v);
            }
        }
        Ok(())
    }

    fn send(&self, job: Job) -> Result<()> {
        let tx = self.inner.tx.lock().map_err(|_| EngineError::Shutdown)?;
        tx.as_ref().ok_or(EngineError::Shutdown)?.send(job).map_err(|_| EngineError::Shutdown)
    }

    /// One vector per input (tokens from [`Embedder::tokenize`]), computed
    /// in a batch with whatever other requests are waiting.
    pub async fn embed(&self, inputs: Vec<Vec<u32>>) -> Result<Vec<Vec<f32>>> {
        let (reply, rx) = oneshot::channel();
        self.send(Job::Embed { inputs: inputs.into_iter().map(|t| (t, None)).collect(), reply })?;
        rx.await.map_err(|_| EngineError::Shutdown)?
    }

    /// [`Embedder::embed`] for callers outside an async runtime.
    pub fn embed_blocking(&self, inputs: Vec<Vec<u32>>) -> Result<Vec<Vec<f32>>> {
        let (reply, rx) = oneshot::channel();
        self.send(Job::Embed { inputs: inputs.into_iter().map(|t| (t, None)).collect(), reply })?;
        rx.blocking_recv().map_err(|_| EngineError::Shutdown)?
    }

    /// The relevance score of each pair (from [`Embedder::pair_tokens`]).
    pub async fn score(&self, pairs: Vec<Input>) -> Result<Vec<f32>> {
        if !self.inner.info.is_reranker() {
            return Err(EngineError::InvalidRequest(
                "this model is not a reranker (it has no classification head)".into(),
            ));
        }
        let (reply, rx) = oneshot::channel();
        self.send(Job::Score { inputs: pairs, reply })?;
        rx.await.map_err(|_| EngineError::Shutdown)?
    }

    /// [`Embedder::score`] for callers outside an async runtime.
    pub fn score_blocking(&self, pairs: Vec<Input>) -> Result<Vec<f32>> {
        if !self.inner.info.is_reranker() {
            return Err(EngineError::InvalidRequest(
                "this model is not a reranker (it has no classification head)".into(),
            ));
        }
        let (reply, rx) = oneshot::channel();
        self.send(Job::Score { inputs: pairs, reply })?;
        rx.blocking_recv().map_err(|_| EngineError::Shutdown)?
    }
}

fn tokenizer(path: &Path, gguf: Option<&kiln_gguf::GgufFile>) -> Result<Tokenizer> {
    match gguf {
        Some(g) => Tokenizer::from_gguf_metadata(g.metadata()),
        None => Tokenizer::from_hf_dir(path),
    }
    .map_err(|e| EngineError::Tokenizer(e.to_string()))
}

/// The embedding thread: batches whatever waits, runs it, replies.
fn serve(mut enc: Box<dyn EmbedModel>, rx: Receiver<Job>) {
    enc.enter_thread();
    while let Ok(first) = rx.recv() {
        let mut tokens = first.tokens();
        let mut jobs = vec![first];
        while tokens < BATCH_TOKENS {
            match rx.try_recv() {
                Ok(j) => {
                    tokens += j.tokens();
                    jobs.push(j);
                }
                Err(_) => break,
            }
        }
        let (embeds, scores): (Vec<Job>, Vec<Job>) = jobs.into_iter().partition(|j| matches!(j, Job::Embed { .. }));
        run_batch(enc.as_mut(), embeds);
        run_batch(enc.as_mut(), scores);
    }
}

/// Runs `jobs` (all of one kind) in passes of at most [`BATCH_TOKENS`]
/// tokens; if a pass fails, its jobs run alone so the failure stays with
/// the job that caused it.
fn run_batch(enc: &mut dyn EmbedModel, jobs: Vec<Job>) {
    if jobs.is_empty() {
        return;
    }
    let all: Vec<&Input> = jobs
        .iter()
        .flat_map(|j| match j {
            Job::Embed { inputs, .. } | Job::Score { inputs, .. } => inputs.iter(),
        })
        .collect();
    let outs = match compute(enc, &all, matches!(jobs[0], Job::Score { .. })) {
        Ok(o) => o,
        Err(_) if jobs.len() > 1 => {
            for j in jobs {
                run_batch(enc, vec![j]);
            }
            return;
        }
        Err(e) => {
            // One job: its own error, as it is.
            match jobs.into_iter().next() {
                Some(Job::Embed { reply, .. }) => drop(reply.send(Err(e))),
                Some(Job::Score { reply, .. }) => drop(reply.send(Err(e))),
                None => {}
            }
            return;
        }
    };
    let mut outs = outs.into_iter();
    for j in jobs {
        match j {
            Job::Embed { inputs, reply } => {
                let _ = reply.send(Ok(outs.by_ref().take(inputs.len()).map(Out::vector).collect()));
            }
            Job::Score { inputs, reply } => {
                let _ = reply.send(Ok(outs.by_ref().take(inputs.len()).map(Out::score).collect()));
            }
        }
    }
}

enum Out {
    Vector(Vec<f32>),
    Score(f32),
}

impl Out {
    fn vector(self) -> Vec<f32> {
        match self {
            Out::Vector(v) => v,
            Out::Score(s) => vec![s],
        }
    }
    fn score(self) -> f32 {
        match self {
            Out::Score(s) => s,
            Out::Vector(v) => v.first().copied().unwrap_or(f32::NAN),
        }
    }
}

fn compute(enc: &mut dyn EmbedModel, all: &[&Input], score: bool) -> Result<Vec<Out>> {
    let mut out = Vec::with_capacity(all.len());
    let mut start = 0;
    while start < all.len() {
        let mut end = start;
        let mut tokens = 0;
        while end < all.len() && (end == start || tokens + all[end].0.len() <= BATCH_TOKENS) {
            tokens += all[end].0.len();
            end += 1;
        }
        let inputs: Vec<EncoderInput<'_>> =
            all[start..end].iter().map(|(t, s)| EncoderInput { tokens: t, second_from: *s }).collect();
        if score {
            out.extend(enc.score(&inputs)?.into_iter().map(Out::Score));
        } else {
            out.extend(enc.embed_inputs(&inputs)?.into_iter().map(Out::Vector));
        }
        start = end;
    }
    Ok(out)
}
