//! gpt-oss (OpenAI's open-weight mixture-of-experts models, GGUF
//! architecture `gpt-oss`): the llama block with these changes, as
//! llama.cpp's `openai-moe` graph runs it.
//!
//! - Q, K, V and the output projection have biases.
//! - Attention sinks: one learned logit per query head joins each softmax's
//!   denominator (attention may put weight on "nothing").
//! - Even layers attend to the last `sliding_window` (128) positions, odd
//!   layers to the whole context ([`Backend::attention_masked`]).
//! - The feed-forward block is a mixture of experts (`super::moe` in its
//!   biased form): a router with a bias, top-k by logit then a softmax over
//!   the picked, experts with biases on gate, up and down, and the clamped
//!   SwiGLU `min(g, 7)·σ(1.702·min(g, 7)) ⊙ (clamp(u, ±7) + 1)`.
//! - RoPE in the half-split (NeoX) pairing with YaRN scaling (factor 32
//!   over an original 4096 positions in the released models), from the
//!   file's `rope.scaling.*` keys.
//!
//! The block norms are RMSNorms: `attn_norm` before attention and
//! `post_attention_norm` before the experts (the GGUF name of the second
//! pre-norm). Reference: OpenAI's `gpt_oss` model code and Hugging Face
//! `modeling_gpt_oss.py`; model card arXiv:2508.10925.
//!
//! Local layers keep only their window in the KV memory where the engine
//! gives them a window pool (`kiln_models::window_layers`; the backend
//! reads their slots and tables from the batch), else their whole context.

use kiln_backend::{AttnIn, AttnMask, Backend, Feature, HostWeight, MatrixDesc, MatrixUse, RopeDesc};

use super::moe::{self, MoeFfn};
use super::{bytes_of, Activations, Decoder};
use crate::config::ModelConfig;
use crate::error::{ModelError, Result};
use crate::loader::TensorSource;
use crate::weights::{host_weight, vector_f32};

struct Block<B: Backend> {
    attn_norm: B::Vector,
    /// Q, K and V stacked, with their biases.
    qkv: B::Matrix,
    /// The output projection, with its bias.
    o: B::Matrix,
    /// One logit per query head.
    sinks: B::Vector,
    ffn_norm: B::Vector,
    experts: MoeFfn<B>,
    /// Attends to the sliding window only.
    local: bool,
}

/// A gpt-oss model on backend `B`.
pub struct GptOss<B: Backend> {
    cfg: ModelConfig,
    embed: B::Matrix,
    blocks: Vec<Block<B>>,
    norm: B::Vector,
    /// The output head when it is not the embedding.
    lm_head: Option<B::Matrix>,
    rope_local: B::Rope,
    rope_global: B::Rope,
    max_ctx: usize,
}

/// What gpt-oss needs beyond the llama graph.
const NEEDS: [Feature; 5] =
    [Feature::Moe, Feature::SlidingWindow, Feature::AttentionSinks, Feature::SwigluOai, Feature::ExpertBias];

impl<B: Backend> GptOss<B> {
    /// Places the weights of `src` (GGUF names) on `be`.
    pub fn load(be: &mut B, cfg: ModelConfig, src: &dyn TensorSource, max_ctx: usize) -> Result<Self> {
        cfg.validate()?;
        if let Some(f) = NEEDS.into_iter().find(|&f| !be.supports(f)) {
            return Err(ModelError::Config(format!(
                "gpt-oss needs {f:?}, which the {} backend does not implement yet",
                be.name()
            )));
        }
        moe::check_backend(be)?;
        let m = cfg.moe.ok_or_else(|| ModelError::Config("a gpt-oss model without experts".into()))?;
        let (d, q_dim, kv_dim) = (cfg.hidden_size, cfg.q_dim(), cfg.kv_dim());
        let weight =
            |name: &str, rows, cols| -> Result<HostWeight> { host_weight(name, src.require(name)?, rows, cols) };
        let vec_of = |name: &str, len| vector_f32(name, &src.require(name)?, len);
        let head = match src.get("output.weight")? {
            Some(t) => Some(host_weight("output.weight", t, cfg.vocab_size, d)?),
            None => None,
        };
        let embed = be.matrix(MatrixDesc::single(
            weight("token_embd.weight", cfg.vocab_size, d)?,
            MatrixUse::Embedding { tied_head: head.is_none() },
        ))?;
        let mut blocks = Vec::with_capacity(cfg.num_layers);
        for i in 0..cfg.num_layers {
            let p = |s: &str| format!("blk.{i}.{s}");
            let mut bias = Vec::with_capacity(q_dim + 2 * kv_dim);
            for (n, len) in [("attn_q.bias", q_dim), ("attn_k.bias", kv_dim), ("attn_v.bias", kv_dim)] {
                bias.extend(vec_of(&p(n), len)?);
            }
            let qkv = MatrixDesc {
                parts: vec![
                    weight(&p("attn_q.weight"), q_dim, d)?,
                    weight(&p("attn_k.weight"), kv_dim, d)?,
                    weight(&p("attn_v.weight"), kv_dim, d)?,
                ],
                bias: Some(bias),
                usage: MatrixUse::Qkv,
            };
            let o = MatrixDesc {
                parts: vec![weight(&p("attn_output.weight"), d, q_dim)?],
                bias: Some(vec_of(&p("attn_output.bias"), d)?),
                usage: MatrixUse::Linear,
            };
            let block = Block {
                attn_norm: be.vector(&vec_of(&p("attn_norm.weight"), d)?)?,
                qkv: be.matrix(qkv)?,
                o: be.matrix(o)?,
                sinks: be.vector(&vec_of(&p("attn_sinks.weight"), cfg.num_heads)?)?,
                ffn_norm: be.vector(&vec_of(&p("post_attention_norm.weight"), d)?)?,
                experts: MoeFfn::load(be, &cfg, m, src, i, true)?,
                local: cfg.is_local_layer(i),
            };
            blocks.push(block);
        }
        let norm = be.vector(&vec_of("output_norm.weight", d)?)?;
        let lm_head = match head {
            Some(w) => Some(be.matrix(MatrixDesc::single(w, MatrixUse::Head))?),
            None => None,
        };
        let hd = cfg.head_dim;
        let desc = |theta: f32| RopeDesc {
            style: cfg.rope_style,
            rot_dim: hd,
            theta,
            max_pos: max_ctx.max(1),
            freq_factors: cfg.rope_scaling.freq_factors(theta, hd),
            scale: cfg.rope_scaling.position_scale(),
            attn_factor: cfg.rope_scaling.attn_factor(),
        };
        // As llama.cpp: both kinds of layer scale RoPE alike; the local ones
        // may have their own base.
        let rope_global = be.rope(&desc(cfg.rope_theta))?;
        let rope_local = be.rope(&desc(cfg.rope_local_theta.unwrap_or(cfg.rope_theta)))?;
        Ok(Self { cfg, embed, blocks, norm, lm_head, rope_local, rope_global, max_ctx })
    }

    /// Attaches LoRA adapter `id`'s factors to the attention products (the
    /// experts take none).
    pub fn lora_attach(&self, be: &mut B, id: u32, ad: &crate::lora::LoraAdapter) -> Result<()> {
        for (i, b) in self.blocks.iter().enumerate() {
            crate::lora::attach_block(be, id, ad, i, [Some(&b.qkv), Some(&b.o), None, None])?;
        }
        Ok(())
    }

    /// Positions `0..max_ctx` are covered.
    pub fn max_ctx(&self) -> usize {
        self.max_ctx
    }

    fn head_matrix(&self) -> &B::Matrix {
        self.lm_head.as_ref().unwrap_or(&self.embed)
    }

    /// Bytes of weights read by one decode step (all layers + the head).
    pub fn weight_bytes_per_token(&self, be: &B) -> usize {
        let layers: usize =
            self.blocks.iter().map(|b| bytes_of(be, &[&b.qkv, &b.o]) + b.experts.bytes_per_token(be)).sum();
        layers + be.matrix_bytes(self.head_matrix())
    }
}

impl<B: Backend> Decoder<B> for GptOss<B> {
    fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    fn rope(&self, layer: usize) -> &B::Rope {
        if self.blocks.get(layer).is_some_and(|b| b.local) {
            &self.rope_local
        } else {
            &self.rope_global
        }
    }

    fn head(&self) -> (&B::Vector, &B::Matrix) {
        (&self.norm, self.head_matrix())
    }

    fn layers(&self, be: &mut B, step: &B::Step, kv: &mut B::Kv, a: &mut Activations<B>) -> Result<()> {
        let eps = self.cfg.rms_norm_eps;
        let shape = self.attn_shape();
        be.embed(step, &self.embed, 1.0, &mut a.x)?;
        for (li, b) in self.blocks.iter().enumerate() {
            let input = AttnIn { norm: &b.attn_norm, eps, qkv: &b.qkv, qk_norm: None, rope: self.rope(li), shape };
            be.attn_in(step, &mut a.x, &input, kv, li, &mut a.qkv)?;
            let mask = AttnMask { window: self.cfg.sliding_window.filter(|_| b.local), sinks: Some(&b.sinks) };
            be.attention_masked(step, &a.qkv, kv, li, &shape, &mask, &mut a.attn)?;
            be.linear_add(step, &a.attn, &b.o, None, &mut a.x)?;
            b.experts.forward(be, step, &mut a.x, &b.ffn_norm, eps)?;
        }
        Ok(())
    }
}
