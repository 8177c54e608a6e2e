//! A model with everything one device needs to run it: the backend, the KV
//! memory and the activation buffers. The engine owns one per loaded model;
//! tests and tools use it directly.

use kiln_backend::{Backend, Draw, ForwardBatch, KvMemory, KvSpec, KvType};

use crate::arch::gemma3::Gemma3;
use crate::arch::gpt_oss::GptOss;
use crate::arch::llama::Llama;
use crate::arch::{Activations, Decoder};
use crate::error::{ModelError, Result};
use crate::{Arch, ModelConfig, OpenedModel};

/// How to place a model and its KV memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunOptions {
    /// Longest context (capped at the model's trained length).
    pub max_ctx: usize,
    /// Tokens per KV block.
    pub block_size: usize,
    /// KV blocks per layer; `None`: what the backend's memory allows (the
    /// CPU: four contexts, committed only as used).
    pub kv_blocks: Option<usize>,
    /// Block slots of the host KV tier (0: none).
    pub tier_slots: usize,
    /// Store K/V in the format of the backend's fastest prompt attention
    /// (the CPU's bf16 pairs where it has AVX-512 BF16).
    pub fast_kv: bool,
    /// How K is stored in the KV cache.
    pub type_k: KvType,
    /// How V is stored in the KV cache.
    pub type_v: KvType,
    /// Blocks of the sliding-window layers' own pool, where the model has
    /// such layers with a window shorter than its context and the backend
    /// attends within windows (those layers then keep about a window per
    /// sequence: [`crate::window_layers`], `kiln_core::kv::KvManager::with_window`).
    /// `None`: every layer keeps the whole context.
    pub window_blocks: Option<usize>,
}

impl Default for RunOptions {
    fn default() -> Self {
        Self {
            max_ctx: 4096,
            block_size: 16,
            kv_blocks: None,
            tier_slots: 0,
            fast_kv: true,
            type_k: KvType::F16,
            type_v: KvType::F16,
            window_blocks: None,
        }
    }
}

/// A loaded model of any supported family, on backend `B`.
pub enum Model<B: Backend> {
    /// The llama graph (Llama, Mistral, Qwen2, Qwen3, and with experts
    /// Mixtral and Qwen3-MoE).
    Llama(Llama<B>),
    /// Gemma 3.
    Gemma3(Gemma3<B>),
    /// gpt-oss.
    GptOss(GptOss<B>),
}

/// `$e` with `$m` bound to whichever family `$model` holds.
macro_rules! each {
    ($model:expr, $m:ident => $e:expr) => {
        match $model {
            Model::Llama($m) => $e,
            Model::Gemma3($m) => $e,
            Model::GptOss($m) => $e,
        }
    };
}

/// A model on a device, with its KV memory and activations.
pub struct Runner<B: Backend> {
    model: Model<B>,
    backend: B,
    kv: B::Kv,
    acts: Activations<B>,
    /// The window and the window pool, where the KV memory has one.
    window: Option<(usize, kiln_backend::WindowKv)>,
}

impl<B: Backend> Runner<B> {
    /// Places `opened`'s weights on `backend` and allocates the KV memory.
    pub fn load(mut backend: B, opened: &OpenedModel, opts: &RunOptions) -> Result<Self> {
        let cfg = opened.config.clone();
        let max_ctx = crate::context_length(&cfg, Some(opts.max_ctx));
        let model = match cfg.arch {
            Arch::Llama | Arch::Qwen2 | Arch::Qwen3 | Arch::Qwen3Moe => {
                Model::Llama(Llama::load(&mut backend, cfg.clone(), opened.source.as_ref(), max_ctx)?)
            }
            Arch::Gemma3 => Model::Gemma3(Gemma3::load(&mut backend, cfg.clone(), opened.source.as_ref(), max_ctx)?),
            Arch::GptOss => Model::GptOss(GptOss::load(&mut backend, cfg.clone(), opened.source.as_ref(), max_ctx)?),
            Arch::Bert | Arch::NomicBert => {
                return Err(ModelError::Config(format!(
                    "{:?} is an encoder (embeddings and reranking), not a text generation model: use `kiln embed`, /v1/embeddings or /v1/rerank",
                    cfg.arch
                )))
            }
        };
        let acts = each!(&model, m => m.activations(&mut backend)?);
        let model_ctx = each!(&model, m => m.max_ctx());
        let window = opts.window_blocks.filter(|_| backend.supports(kiln_backend::Feature::SlidingWindow)).and_then(
            |num_blocks| {
                let (_, layers) = crate::window_layers(&cfg, model_ctx)?;
                Some(kiln_backend::WindowKv { layers, num_blocks })
            },
        );
        let spec = KvSpec {
            layers: cfg.num_layers,
            kv_heads: cfg.num_kv_heads,
            head_dim: cfg.head_dim,
            block_size: opts.block_size.max(1),
            num_blocks: opts.kv_blocks,
            max_ctx,
            tier_slots: opts.tier_slots,
            fast_format: opts.fast_kv,
            type_k: opts.type_k,
            type_v: opts.type_v,
            window,
        };
        let kv = backend.kv(&spec)?;
        let window = window.and_then(|w| Some((crate::window_layers(&cfg, model_ctx)?.0, w)));
        Ok(Self { model, backend, kv, acts, window })
    }

    /// The configuration.
    pub fn config(&self) -> &ModelConfig {
        each!(&self.model, m => m.config())
    }
    /// Positions `0..max_ctx` can be run.
    pub fn max_ctx(&self) -> usize {
        each!(&self.model, m => m.max_ctx())
    }
    /// The window (in positions) and blocks of the sliding-window layers'
    /// own pool, where the KV memory has one ([`RunOptions::window_blocks`]).
    pub fn kv_window(&self) -> Option<(usize, usize)> {
        let w = self.window.as_ref()?;
        Some((w.0, w.1.num_blocks))
    }
    /// The model.
    pub fn model(&self) -> &Model<B> {
        &self.model
    }
    /// The device.
    pub fn backend(&self) -> &B {
        &self.backend
    }
    /// The KV memory.
    pub fn kv(&self) -> &B::Kv {
        &self.kv
    }
    /// The KV memory, mutably (host tier copies).
    pub fn kv_mut(&mut self) -> &mut B::Kv {
        &mut self.kv
    }
    /// Attaches LoRA adapter `id` (what a sequence names in
    /// [`kiln_backend::SeqSpan::lora`]); on error nothing stays attached.
    pub fn lora_attach(&mut self, id: u32, ad: &crate::lora::LoraAdapter) -> Result<()> {
        if !self.backend.supports(kiln_backend::Feature::Lora) {
            return Err(ModelError::Config(format!("LoRA adapters are not supported on {} yet", self.backend.name())));
        }
        let res = each!(&self.model, m => m.lora_attach(&mut self.backend, id, ad));
        if res.is_err() {
            let _ = self.backend.lora_detach(id);
        }
        res
    }

    /// Drops LoRA adapter `id` (no later step may name it).
    pub fn lora_detach(&mut self, id: u32) -> Result<()> {
        Ok(self.backend.lora_detach(id)?)
    }

    /// Bytes of device memory adapter `id` takes.
    pub fn lora_bytes(&self, id: u32) -> usize {
        self.backend.lora_bytes(id)
    }

    /// Bytes of weights one decode step reads.
    pub fn weight_bytes_per_token(&self) -> usize {
        each!(&self.model, m => m.weight_bytes_per_token(&self.backend))
    }

    /// Copies cached K/V between slots in every layer, each key rotated
    /// by its `shift` (the segment cache places a segment computed alone
    /// at position 0 anywhere: docs/segment-cache.md). An error when the
    /// backend or the cache format cannot (see [`Runner::can_shift_kv`]).
    pub fn kv_shift(&mut self, copies: &[kiln_backend::KvShift]) -> Result<()> {
        if copies.is_empty() {
            return Ok(());
        }
        let cap = (self.kv.num_blocks() * self.kv.block_size()) as u32;
        if copies.iter().any(|c| c.src >= cap || c.dst >= cap || c.shift.unsigned_abs() as usize >= self.max_ctx()) {
            return Err(ModelError::Batch(
                "a KV copy names a slot outside the cache or a shift past the context".into(),
            ));
        }
        let Self { model, backend, kv, .. } = self;
        each!(model, m => m.kv_shift(backend, kv, copies))
    }

    /// Whether [`Runner::kv_shift`] works here (the segment cache and
    /// context shift need it): the backend has it and K and V are 16-bit (quantized blocks are Hadamard-rotated and scaled
    /// per 32 values; moving them would need a requantization, refused).
    pub fn can_shift_kv(&self, type_k: KvType, type_v: KvType) -> std::result::Result<(), String> {
        if !self.backend.supports(kiln_backend::Feature::KvShift) {
            return Err(format!("re-rotated KV copies are not supported on {} yet", self.backend.name()));
        }
        if type_k != KvType::F16 || type_v != KvType::F16 {
            return Err(format!(
                "re-rotated KV copies need a 16-bit KV cache (this one is {type_k}/{type_v}: quantized keys cannot be re-rotated in place)"
            ));
        }
        Ok(())
    }

    /// One batched forward pass: writes every token's K/V, then for the
    /// logit rows ([`ForwardBatch::logit_rows`]):
    /// - `draws` empty: every row's logits go to `logits` (`vocab_size`
    ///   floats per row) and `tokens` is left empty;
    /// - otherwise one entry per row: a row with a draw is sampled on the
    ///   device into `tokens[row]`; the logits of a row without one go to
    ///   `logits[row]`.
    pub fn forward(
        &mut self,
        batch: &ForwardBatch,
        draws: &[Option<Draw>],
        tokens: &mut Vec<u32>,
        logits: &mut Vec<f32>,
    ) -> Result<()> {
        self.check(batch)?;
        let Self { model, backend, kv, acts, .. } = self;
        let step = backend.begin(batch, kv, draws)?;
        each!(model, m => backend.run(&step, &mut |be| m.body(be, &step, kv, acts).map_err(into_backend))?);
        backend.finish(&step, &mut acts.logits, tokens, logits)?;
        Ok(())
    }

    /// One forward pass without the final norm and head: every row's
    /// last-layer residual (`hidden_size` floats per row) into `rows`
    /// (decoder embedders pool these; K/V are written as in any step).
    pub fn hidden(&mut self, batch: &ForwardBatch, rows: &mut Vec<f32>) -> Result<()> {
        self.check(batch)?;
        let Self { model, backend, kv, acts, .. } = self;
        let step = backend.begin(batch, kv, &[])?;
        each!(model, m => backend.run(&step, &mut |be| m.layers(be, &step, kv, acts).map_err(into_backend))?);
        backend.read_rows(&step, &mut acts.x, rows)?;
        Ok(())
    }

    /// [`Runner::forward`] with every logit row computed on the host.
    pub fn logits(&mut self, batch: &ForwardBatch, logits: &mut Vec<f32>) -> Result<()> {
        self.forward(batch, &[], &mut Vec::new(), logits)
    }

    /// Checks a batch against the model (the backend checks it against
    /// the KV memory and its own limits).
    fn check(&self, batch: &ForwardBatch) -> Result<()> {
        let bad = |m: String| Err(ModelError::Batch(m));
        let cfg = self.config();
        if batch.is_empty() {
            return bad("empty batch".into());
        }
        if let Some(&t) = batch.tokens.iter().find(|&&t| t as usize >= cfg.vocab_size) {
            return bad(format!("token id {t} is outside the vocabulary ({} tokens)", cfg.vocab_size));
        }
        if let Some(&p) = batch.positions.iter().find(|&&p| p as usize >= self.max_ctx()) {
            return bad(format!("position {p} is past the context length {}", self.max_ctx()));
        }
        let cap = self.kv.num_blocks() * self.kv.block_size();
        if batch.slots.iter().any(|&s| s as usize >= cap) {
            return bad("a KV slot is outside the cache".into());
        }
        Ok(())
    }
}

/// A model error inside a backend's step body (the body's errors are
/// carried through [`Backend::run`]).
pub(crate) fn into_backend(e: ModelError) -> kiln_backend::BackendError {
    match e {
        ModelError::Backend(b) => b,
        other => kiln_backend::BackendError::Batch(other.to_string()),
    }
}
