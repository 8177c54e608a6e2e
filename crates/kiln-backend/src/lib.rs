//! # kiln-backend
//!
//! The interface every model family is written against and every device
//! implements ([`Backend`]). A model file says *what* a step computes, as a
//! few fused operations over typed, opaque device buffers; a backend says
//! *how*: the CPU's SIMD kernels (`kiln-kernels`), CUDA's fused kernels,
//! cuBLAS and graphs (`kiln-cuda`), a portable GPU backend later. Neither
//! side knows the other: a model never sees a device address or a kernel,
//! a backend never sees a tensor name or a family.
//!
//! One step, as a model drives it:
//!
//! ```text
//! step = be.begin(batch, kv, draws)            // validate, upload metadata
//! be.run(&step, |be| {                        // a GPU may capture and replay this
//!     be.embed(x)
//!     per layer: be.attn_in(x → qkv, K/V into kv)   norm · QKV (+bias) · q/k-norm · RoPE · KV write
//!                be.attention(qkv → attn)            paged attention, in place over the blocks
//!                (or be.attention_masked: a sliding window, attention sinks)
//!                be.linear_add(attn · O → x)         the residual add fused in
//!                be.norm_glu(x → act)                norm · gate/up · SiLU⊙
//!                be.linear_add(act · down → x)
//!                (or be.moe(x): norm · router · top-k experts · x += Σ w·expert)
//!     be.head(x → logits)                     final norm and the head, sampled rows only
//! })
//! be.finish(&step, logits → tokens and/or host logits)   device sampling where the draws allow
//! ```
//!
//! Buffers are allocated once, when the model is loaded and the engine
//! starts, so a device may record a step and replay it (CUDA graphs).
#![warn(missing_docs, unreachable_pub)]
#![deny(unused_must_use)]

pub mod absent;
pub mod batch;
pub mod bytes;
pub mod draw;
pub mod encoder;
pub mod host;
pub mod kv;
pub mod lora;

pub use batch::{ForwardBatch, LogitsWant, SeqSpan};
pub use bytes::SharedBytes;
pub use draw::Draw;
pub use encoder::{Act, LayerNorm};
pub use host::{HostWeight, MatrixDesc, MatrixUse, RopeDesc, RopeStyle};
pub use kv::{
    check_window_batch, kv_bytes_per_token, kv_pair_name, KvMemory, KvShift, KvSpec, KvType, LayerSet, WindowKv,
};
pub use lora::{lora_groups, LoraFactors, LoraGroup, LoraUse};

/// Errors of a backend.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// A step's input is malformed (the engine built a bad batch).
    #[error("bad batch: {0}")]
    Batch(String),
    /// A weight does not fit its description.
    #[error("bad weight: {0}")]
    Weight(String),
    /// The device cannot run this (a shape, a format, a missing kernel).
    #[error("not supported on {device}: {what}")]
    Unsupported {
        /// The backend's name.
        device: &'static str,
        /// What it cannot run.
        what: String,
    },
    /// Not enough device memory.
    #[error("not enough {device} memory: {what}")]
    OutOfMemory {
        /// The backend's name.
        device: &'static str,
        /// What did not fit, with sizes.
        what: String,
    },
    /// The device failed (a driver or library error).
    #[error("{device}: {what}")]
    Device {
        /// The backend's name.
        device: &'static str,
        /// The device's message.
        what: String,
    },
}

/// Result of a backend operation.
pub type Result<T> = std::result::Result<T, BackendError>;

/// Checks that a product reading `want` values per row (`what`) may read a
/// buffer of `have`: a mismatch is a model bug, refused before any kernel runs.
pub fn check_width(have: usize, want: usize, what: &str) -> Result<()> {
    if have == want {
        Ok(())
    } else {
        Err(BackendError::Batch(format!("{what} reads {want} values per row from a buffer of {have}")))
    }
}

/// What a device needs to know about a model before its weights arrive
/// (a GPU compiles or picks kernels for them when it opens).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelHints {
    /// Dimension of one attention head.
    pub head_dim: usize,
    /// The checkpoint's 16-bit weights are bf16 (then a GPU computes in
    /// bf16; f16 otherwise).
    pub bf16_weights: bool,
    /// An encoder ([`Feature::Encoder`]): no paged attention, so no
    /// attention kernels need to exist for `head_dim`.
    pub encoder: bool,
}

/// What an activation buffer holds; a backend picks its element type and
/// how many rows it reserves.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum BufferKind {
    /// The residual stream (kept in f32 by every backend so far).
    Residual,
    /// The attention input: Q, K and V of each row, as
    /// [`Backend::attn_in`] writes them and [`Backend::attention`] reads Q,
    /// for attention layers of this shape.
    Qkv(AttnShape),
    /// An input of a product (attention output, gated unit output).
    Hidden,
    /// Logits of the sampled rows.
    Logits,
}

/// The heads of an attention layer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttnShape {
    /// Query heads.
    pub num_heads: usize,
    /// Key/value heads (grouped-query attention when fewer).
    pub num_kv_heads: usize,
    /// Dimension of one head.
    pub head_dim: usize,
    /// Score scale (1/√head_dim for every family so far).
    pub scale: f32,
}

impl AttnShape {
    /// Width of Q.
    pub fn q_dim(&self) -> usize {
        self.num_heads * self.head_dim
    }
    /// Width of K (and V).
    pub fn kv_dim(&self) -> usize {
        self.num_kv_heads * self.head_dim
    }
}

/// The attention input of one layer ([`Backend::attn_in`]).
pub struct AttnIn<'a, B: Backend> {
    /// RMSNorm weight applied to the residual first.
    pub norm: &'a B::Vector,
    /// RMSNorm epsilon (of every norm of the layer).
    pub eps: f32,
    /// Q, K and V stacked ([`MatrixUse::Qkv`]), with their bias if any.
    pub qkv: &'a B::Matrix,
    /// Per-head RMSNorm weights of Q and K, applied before RoPE (Qwen3).
    pub qk_norm: Option<(&'a B::Vector, &'a B::Vector)>,
    /// The rotary table.
    pub rope: &'a B::Rope,
    /// The heads.
    pub shape: AttnShape,
}

/// The gated unit of a feed-forward block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Glu {
    /// `silu(gate) ⊙ up` (Llama, Qwen, Mistral).
    Swiglu,
    /// `gelu(gate) ⊙ up` with the tanh approximation of GELU (Gemma).
    GeluTanh,
    /// gpt-oss's clamped SwiGLU: with `g = min(gate, 7)` and
    /// `u = clamp(up, -7, 7)`, `g·σ(1.702·g) ⊙ (u + 1)` (needs
    /// [`Feature::SwigluOai`]).
    SwigluOai,
}

impl Glu {
    /// gpt-oss's `alpha` (the sigmoid's slope) of [`Glu::SwigluOai`].
    pub const OAI_ALPHA: f32 = 1.702;
    /// gpt-oss's `limit` (the clamp) of [`Glu::SwigluOai`].
    pub const OAI_LIMIT: f32 = 7.0;
}

/// What a family may need beyond the llama graph; a model checks
/// [`Backend::supports`] at load so that a device without it is a clear
/// load error, not a failed step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Feature {
    /// [`Backend::embed`] with a scale other than 1.
    EmbedScale,
    /// [`Backend::linear_add`] with a norm of the product before the add.
    PostNorm,
    /// [`Glu::GeluTanh`].
    GeluTanh,
    /// The encoder operations ([`Backend::begin_encoder`] to
    /// [`Backend::read_rows`], see [`encoder`]).
    Encoder,
    /// [`Backend::moe`]: mixture-of-experts feed-forward blocks.
    Moe,
    /// LoRA adapters applied unmerged ([`Backend::lora_attach`], see [`lora`]).
    Lora,
    /// [`Backend::kv_shift`]: cached K/V copied between slots with the
    /// keys re-rotated (the segment cache).
    KvShift,
    /// [`Backend::attention_masked`] with [`AttnMask::window`]: layers
    /// that attend to their last positions only (Gemma 3, gpt-oss).
    SlidingWindow,
    /// [`Backend::attention_masked`] with [`AttnMask::sinks`]: a learned
    /// logit per head in the softmax's denominator (gpt-oss).
    AttentionSinks,
    /// [`Glu::SwigluOai`], in [`Backend::norm_glu`] and [`Backend::moe`].
    SwigluOai,
    /// Biases on [`MatrixUse::Experts`] matrices, added to each expert's
    /// products in [`Backend::moe`].
    ExpertBias,
}

/// What [`Backend::attention_masked`] adds to causal attention.
pub struct AttnMask<'a, B: Backend> {
    /// Each query attends to the last `window` positions only (itself
    /// included): keys at `p > q - window` (`None`: the whole context).
    pub window: Option<usize>,
    /// One learned logit per query head, in the softmax's denominator only
    /// (a key whose value is zero): `softmax([s, scores])` without the
    /// first output (gpt-oss's "attention sinks"). `None`: no sink.
    pub sinks: Option<&'a B::Vector>,
}

/// How a mixture-of-experts block weighs the experts it picks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Routing {
    /// Softmax over every expert's logit, the `top_k` largest kept; with
    /// `renormalize` their weights are scaled to sum to 1 (Mixtral, and
    /// Qwen3-MoE with `norm_topk_prob`), which equals a softmax over the
    /// kept logits alone.
    SoftmaxTopK {
        /// Scale the kept weights to sum to 1.
        renormalize: bool,
    },
}

impl Routing {
    /// Each row's `top_k` experts and weights from its router logits
    /// (`experts` per row), into `picks` (`top_k` per row, best first;
    /// ties go to the lower expert index). The reference every backend
    /// routes by.
    pub fn pick(self, logits: &[f32], experts: usize, top_k: usize, picks: &mut Vec<(u32, f32)>) {
        picks.clear();
        if experts == 0 || top_k == 0 {
            return;
        }
        for row in logits.chunks_exact(experts) {
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let z: f32 = row.iter().map(|&l| (l - max).exp()).sum();
            // The k best so far, best first, by insertion (one pass).
            let (start, k) = (picks.len(), top_k.min(experts));
            for (e, &l) in row.iter().enumerate() {
                let full = picks.len() - start == k;
                if full && !picks.last().is_some_and(|&(w, _)| l > row[w as usize]) {
                    continue;
                }
                let mut at = picks.len();
                while at > start && l > row[picks[at - 1].0 as usize] {
                    at -= 1;
                }
                if full {
                    picks.pop();
                }
                picks.insert(at, (e as u32, 0.0));
            }
            for p in &mut picks[start..] {
                p.1 = (row[p.0 as usize] - max).exp() / z;
            }
            let Routing::SoftmaxTopK { renormalize } = self;
            if renormalize {
                // As llama.cpp: the sum is kept above the smallest normal f16.
                let sum = picks[start..].iter().map(|p| p.1).sum::<f32>().max(6.103_515_6e-5);
                picks[start..].iter_mut().for_each(|p| p.1 /= sum);
            }
        }
    }
}

/// The mixture-of-experts feed-forward block of one layer
/// ([`Backend::moe`]): `x += Σₑ wₑ · downₑ(act(gateₑ·h) ⊙ upₑ·h)` over the
/// `top_k` experts the router picks for each row, `h = rmsnorm(x)`.
pub struct Moe<'a, B: Backend> {
    /// RMSNorm weight applied to the residual first.
    pub norm: &'a B::Vector,
    /// RMSNorm epsilon.
    pub eps: f32,
    /// The router: one logit per expert ([`MatrixUse::Linear`], one row
    /// per expert, with its bias if any: gpt-oss).
    pub router: &'a B::Matrix,
    /// Every expert's gate and up ([`MatrixUse::Experts`], parts [gate, up]).
    pub gate_up: &'a B::Matrix,
    /// Every expert's down projection ([`MatrixUse::Experts`], one part).
    pub down: &'a B::Matrix,
    /// Experts of the layer.
    pub experts: usize,
    /// Experts each row uses (1 ≤ `top_k` ≤ `experts`).
    pub top_k: usize,
    /// How the picked experts are weighed.
    pub routing: Routing,
    /// The experts' gated unit.
    pub act: Glu,
}

/// A device kiln runs models on: typed buffers and the fused operations of
/// a transformer step. See the crate documentation for a step's shape.
///
/// Every operation takes the step from [`Backend::begin`]; the rows it
/// works on are the step's. Buffers and matrices passed to one backend
/// must come from that backend.
pub trait Backend: Send + Sized {
    /// A weight matrix (any format the device reads), with its bias.
    type Matrix: Send + Sync;
    /// A vector of `f32` parameters (norm weights).
    type Vector: Send + Sync;
    /// A rotary table.
    type Rope: Send + Sync;
    /// An activation buffer.
    type Buffer: Send;
    /// The KV memory of a model (every layer), owned by the engine.
    type Kv: KvMemory;
    /// One step's metadata, on the device where it runs.
    type Step;

    /// A short name of the device for messages (`cpu`, `cuda:0`).
    fn name(&self) -> String;
    /// Whether [`Backend::finish`] can sample rows itself (then the engine
    /// passes a [`Draw`] for each row it may sample there).
    fn samples_on_device(&self) -> bool;
    /// Called on the engine thread before its first step (the CPU keeps the
    /// thread on its pool's first core).
    fn enter_engine_thread(&self) {}
    /// Whether the backend implements `f`.
    fn supports(&self, f: Feature) -> bool;

    /// Places a matrix on the device.
    fn matrix(&mut self, desc: MatrixDesc) -> Result<Self::Matrix>;
    /// Bytes of the matrix a product reads (bandwidth accounting).
    fn matrix_bytes(&self, m: &Self::Matrix) -> usize;
    /// Places a vector on the device.
    fn vector(&mut self, v: &[f32]) -> Result<Self::Vector>;
    /// Builds a rotary table on the device.
    fn rope(&mut self, desc: &RopeDesc) -> Result<Self::Rope>;
    /// An activation buffer of `cols` per row, for steps of up to the
    /// backend's row limit.
    fn buffer(&mut self, kind: BufferKind, cols: usize) -> Result<Self::Buffer>;
    /// Allocates the KV memory.
    fn kv(&mut self, spec: &KvSpec) -> Result<Self::Kv>;

    /// Starts a step: checks `batch` against `kv` and the backend's limits
    /// and prepares its metadata. `draws` is empty, or has one entry per
    /// logit row (`None`: the host samples that row from its logits).
    fn begin(&mut self, batch: &ForwardBatch, kv: &Self::Kv, draws: &[Option<Draw>]) -> Result<Self::Step>;
    /// Runs the step's device work, `body` (every operation from
    /// [`Backend::embed`] to [`Backend::head`]). A backend may record it
    /// and, for a later step of the same shape, replay the recording
    /// without calling `body`: the body must depend on the step's shape
    /// only, never on its values.
    fn run(&mut self, step: &Self::Step, body: &mut dyn FnMut(&mut Self) -> Result<()>) -> Result<()>;
    /// Ends a step: samples the rows that have a draw into `tokens[row]`
    /// (left empty when `draws` was) and puts the logits of the others (all
    /// of them without draws) in `logits`, `vocab` floats per row.
    fn finish(
        &mut self,
        step: &Self::Step,
        logits_buf: &mut Self::Buffer,
        tokens: &mut Vec<u32>,
        logits: &mut Vec<f32>,
    ) -> Result<()>;

    /// `x[t] = scale · table[token[t]]` for every row (`scale` ≠ 1 needs
    /// [`Feature::EmbedScale`]).
    fn embed(&mut self, step: &Self::Step, table: &Self::Matrix, scale: f32, x: &mut Self::Buffer) -> Result<()>;
    /// The attention input of `layer`: `qkv = rmsnorm(x)·[Q;K;V]ᵀ + bias`,
    /// then the optional per-head Q/K norms, RoPE on Q and K at each row's
    /// position, and K and V written into the row's KV slot of `layer`.
    fn attn_in(
        &mut self,
        step: &Self::Step,
        x: &mut Self::Buffer,
        a: &AttnIn<'_, Self>,
        kv: &mut Self::Kv,
        layer: usize,
        qkv: &mut Self::Buffer,
    ) -> Result<()>;
    /// Causal paged attention of each row's Q over its sequence's cached
    /// K/V of `layer` (the blocks are read in place) into `out`.
    fn attention(
        &mut self,
        step: &Self::Step,
        qkv: &Self::Buffer,
        kv: &Self::Kv,
        layer: usize,
        shape: &AttnShape,
        out: &mut Self::Buffer,
    ) -> Result<()>;
    /// [`Backend::attention`] with a sliding window and/or attention
    /// sinks ([`AttnMask`]; needs [`Feature::SlidingWindow`] for a window
    /// and [`Feature::AttentionSinks`] for sinks).
    #[allow(clippy::too_many_arguments)]
    fn attention_masked(
        &mut self,
        step: &Self::Step,
        qkv: &Self::Buffer,
        kv: &Self::Kv,
        layer: usize,
        shape: &AttnShape,
        mask: &AttnMask<'_, Self>,
        out: &mut Self::Buffer,
    ) -> Result<()> {
        let _ = (step, qkv, kv, layer, shape, mask, out);
        Err(BackendError::Unsupported {
            device: "this device",
            what: format!("sliding-window attention and attention sinks on {}", self.name()),
        })
    }
    /// `x += a·Wᵀ`: a projection whose output joins the residual stream;
    /// with `post_norm` = (g, eps), `x += rmsnorm(a·Wᵀ) ⊙ g` (Gemma's
    /// sandwich norms; needs [`Feature::PostNorm`]).
    fn linear_add(
        &mut self,
        step: &Self::Step,
        a: &Self::Buffer,
        w: &Self::Matrix,
        post_norm: Option<(&Self::Vector, f32)>,
        x: &mut Self::Buffer,
    ) -> Result<()>;
    /// The gated unit: `out = act(rmsnorm(x)·Gᵀ) ⊙ (rmsnorm(x)·Uᵀ)` for
    /// `gate_up` = [G; U].
    #[allow(clippy::too_many_arguments)]
    fn norm_glu(
        &mut self,
        step: &Self::Step,
        x: &mut Self::Buffer,
        norm: &Self::Vector,
        eps: f32,
        gate_up: &Self::Matrix,
        act: Glu,
        out: &mut Self::Buffer,
    ) -> Result<()>;
    /// The final norm and the output head for the step's logit rows only.
    #[allow(clippy::too_many_arguments)]
    fn head(
        &mut self,
        step: &Self::Step,
        x: &mut Self::Buffer,
        norm: &Self::Vector,
        eps: f32,
        w: &Self::Matrix,
        logits: &mut Self::Buffer,
    ) -> Result<()>;

    /// The mixture-of-experts block of a layer ([`Moe`]), rows grouped by
    /// expert: the router's logits for every row, each row's `top_k`
    /// experts, then each picked expert's products over the rows that
    /// picked it, the weighted outputs added into `x` (needs
    /// [`Feature::Moe`]).
    fn moe(&mut self, step: &Self::Step, x: &mut Self::Buffer, m: &Moe<'_, Self>) -> Result<()> {
        let _ = (step, x, m);
        Err(BackendError::Unsupported {
            device: "this device",
            what: format!("mixture-of-experts blocks on {}", self.name()),
        })
    }

    // Encoders (see [`encoder`]); a backend without them says so through
    // `supports(Feature::Encoder)` and the defaults below.

    /// Starts an encoder step over `batch`: each sequence is a whole input
    /// (its rows attend to each other); no KV memory, no logits.
    fn begin_encoder(&mut self, batch: &ForwardBatch) -> Result<Self::Step> {
        let _ = batch;
        Err(self.no_encoder())
    }
    /// `x = LayerNorm(table[token] + positions[position])` for every row
    /// (`positions` is a table of learned absolute positions).
    fn embed_sum(
        &mut self,
        step: &Self::Step,
        table: &Self::Matrix,
        positions: &Self::Matrix,
        norm: LayerNorm<'_, Self::Vector>,
        x: &mut Self::Buffer,
    ) -> Result<()> {
        let _ = (step, table, positions, norm, x);
        Err(self.no_encoder())
    }
    /// `out = act(a·Wᵀ + b)`. For a [`MatrixUse::Qkv`] matrix `out` is a
    /// [`BufferKind::Qkv`] buffer that [`Backend::attention_within`] reads.
    fn linear(
        &mut self,
        step: &Self::Step,
        a: &Self::Buffer,
        w: &Self::Matrix,
        act: Act,
        out: &mut Self::Buffer,
    ) -> Result<()> {
        let _ = (step, a, w, act, out);
        Err(self.no_encoder())
    }
    /// Attention of every row over all rows of its own sequence (no causal
    /// mask), from the Q, K and V that [`Backend::linear`] wrote; with
    /// `rope`, Q and K are rotated at each row's position first.
    fn attention_within(
        &mut self,
        step: &Self::Step,
        qkv: &mut Self::Buffer,
        rope: Option<&Self::Rope>,
        shape: &AttnShape,
        out: &mut Self::Buffer,
    ) -> Result<()> {
        let _ = (step, qkv, rope, shape, out);
        Err(self.no_encoder())
    }
    /// `x = LayerNorm(x + a·Wᵀ + b)`: a post-norm block's residual add.
    fn linear_add_norm(
        &mut self,
        step: &Self::Step,
        a: &Self::Buffer,
        w: &Self::Matrix,
        norm: LayerNorm<'_, Self::Vector>,
        x: &mut Self::Buffer,
    ) -> Result<()> {
        let _ = (step, a, w, norm, x);
        Err(self.no_encoder())
    }
    /// Copies the step's rows of `x` to the host (`cols` floats per row).
    fn read_rows(&mut self, step: &Self::Step, x: &mut Self::Buffer, out: &mut Vec<f32>) -> Result<()> {
        let _ = (step, x, out);
        Err(self.no_encoder())
    }
    /// Copies K and V of `layer` from slot `c.src` to slot `c.dst` for
    /// every `c` in `copies` (sources and destinations distinct), the key
    /// rotated by `c.shift` more positions of `rope` (RoPE composes:
    /// `R(p + d) = R(d)·R(p)`; a negative shift rotates back,
    /// `R(-d) = R(d)ᵀ`), before the next step's forward pass. This is how
    /// a segment computed alone at position 0 is placed at any position
    /// (docs/segment-cache.md) and how a context shift moves the kept
    /// tokens down (docs/long-context.md). A cache format whose keys cannot
    /// be rotated in place (quantized blocks) is an error that says so.
    fn kv_shift(&mut self, kv: &mut Self::Kv, layer: usize, rope: &Self::Rope, copies: &[KvShift]) -> Result<()> {
        let _ = (kv, layer, rope, copies);
        Err(BackendError::Unsupported {
            device: "this device",
            what: format!("re-rotated KV copies (the segment cache) on {}", self.name()),
        })
    }

    // LoRA adapters (see [`lora`]); a backend without them says so through
    // `supports(Feature::Lora)` and the defaults below.

    /// Attaches adapter `adapter`'s factors to the parts of `m` (one entry
    /// per part, in order; `None`: the part has none), replacing what that
    /// adapter had on `m`. From the next step on, the rows of sequences
    /// whose [`SeqSpan::lora`] names `adapter` get its delta in every
    /// operation that reads `m`.
    fn lora_attach(&mut self, m: &Self::Matrix, adapter: u32, parts: &[Option<&LoraFactors>]) -> Result<()> {
        let _ = (m, adapter, parts);
        Err(BackendError::Unsupported { device: "this device", what: format!("LoRA adapters on {}", self.name()) })
    }
    /// Drops every factor of `adapter` (no step may name it afterwards).
    fn lora_detach(&mut self, adapter: u32) -> Result<()> {
        let _ = adapter;
        Ok(())
    }
    /// Bytes of device memory the factors of `adapter` take.
    fn lora_bytes(&self, adapter: u32) -> usize {
        let _ = adapter;
        0
    }

    /// The error of an encoder operation on a backend without them.
    fn no_encoder(&self) -> BackendError {
        BackendError::Unsupported { device: "this device", what: format!("encoder models on {}", self.name()) }
    }
}

#[cfg(test)]
mod tests {
    use super::Routing;

    #[test]
    fn routing_picks_the_top_k_and_renormalizes() {
        let mut picks = Vec::new();
        let logits = [0.0, 2.0, 1.0, 2.0, -1.0, 0.5];
        Routing::SoftmaxTopK { renormalize: true }.pick(&logits, 3, 2, &mut picks);
        assert_eq!(picks.iter().map(|p| p.0).collect::<Vec<_>>(), [1, 2, 0, 2]);
        // Renormalized weights equal a softmax over the kept logits.
        let w = 1.0 / (1.0 + (-1.0f32).exp());
        assert!((picks[0].1 - w).abs() < 1e-6 && (picks[1].1 - (1.0 - w)).abs() < 1e-6);
        Routing::SoftmaxTopK { renormalize: false }.pick(&logits, 3, 1, &mut picks);
        let z = 1.0 + 2f32.exp() + 1f32.exp();
        assert!((picks[0].1 - 2f32.exp() / z).abs() < 1e-6);
        // A tie goes to the lower index.
        Routing::SoftmaxTopK { renormalize: true }.pick(&[1.0, 1.0], 2, 1, &mut picks);
        assert_eq!(picks, [(0, 1.0)]);
        // Many experts: the k best of a stable sort, best first, row by row.
        let (e, k) = (37, 5);
        let logits: Vec<f32> = (0..3 * e).map(|i| ((i * 7919 % 23) as f32) / 4.0).collect();
        Routing::SoftmaxTopK { renormalize: false }.pick(&logits, e, k, &mut picks);
        for (r, row) in logits.chunks(e).enumerate() {
            let mut order: Vec<usize> = (0..e).collect();
            order.sort_by(|&a, &b| row[b].total_cmp(&row[a]));
            let got: Vec<usize> = picks[r * k..(r + 1) * k].iter().map(|p| p.0 as usize).collect();
            assert_eq!(got, order[..k]);
        }
    }
}
