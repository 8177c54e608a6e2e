//! Gemma 3 (text): the llama block with Gemma's changes. The embedding is
//! scaled by √d; every sub-layer is wrapped in two RMSNorms (the input
//! norm, and a norm of its output before the residual add: "sandwich"
//! norms); the feed-forward unit is GeGLU with the tanh GELU; Q and K get
//! per-head RMSNorms; local layers use a RoPE base of 10 000 and global
//! ones the model's (every sixth layer is global). GGUF files store the
//! norms' `1 + w` already (llama.cpp's converter adds the one), so they
//! are plain RMSNorm weights here.
//!
//! Papers: Gemma 3 Technical Report (Gemma Team, 2025, arXiv:2503.19786);
//! GLU variants (Shazeer, 2020, arXiv:2002.05202). Reference: Hugging Face
//! `modeling_gemma3.py`.
//!
//! Local layers attend to a window of `sliding_window` positions
//! ([`Backend::attention_masked`]) and global ones to the whole context. A
//! context no longer than the window needs no mask (every layer then runs
//! plain causal attention); a backend without
//! [`Feature::SlidingWindow`] gets its context capped at the window,
//! where local and global attention agree. Where the engine gives them a
//! window pool (`crate::window_layers`), local layers keep only their
//! window in the KV memory.

use kiln_backend::{AttnIn, AttnMask, Backend, Feature, Glu, HostWeight, MatrixDesc, MatrixUse, RopeDesc};

use super::{bytes_of, Activations, Decoder};
use crate::config::ModelConfig;
use crate::error::{ModelError, Result};
use crate::loader::TensorSource;
use crate::weights::{host_weight, vector_f32};

struct Block<B: Backend> {
    attn_norm: B::Vector,
    qkv: B::Matrix,
    q_norm: B::Vector,
    k_norm: B::Vector,
    o: B::Matrix,
    post_attn_norm: B::Vector,
    ffn_norm: B::Vector,
    gate_up: B::Matrix,
    down: B::Matrix,
    post_ffn_norm: B::Vector,
    /// Uses the global RoPE base.
    global: bool,
}

/// A Gemma 3 model on backend `B`.
pub struct Gemma3<B: Backend> {
    cfg: ModelConfig,
    embed: B::Matrix,
    blocks: Vec<Block<B>>,
    norm: B::Vector,
    rope_local: B::Rope,
    rope_global: B::Rope,
    max_ctx: usize,
    /// The local layers' window, where it is shorter than the context.
    window: Option<usize>,
}

/// What Gemma 3 needs beyond the llama graph.
const NEEDS: [Feature; 3] = [Feature::EmbedScale, Feature::PostNorm, Feature::GeluTanh];

impl<B: Backend> Gemma3<B> {
    /// Places the weights of `src` (GGUF names) on `be`.
    pub fn load(be: &mut B, cfg: ModelConfig, src: &dyn TensorSource, max_ctx: usize) -> Result<Self> {
        cfg.validate()?;
        let mut max_ctx = max_ctx;
        let mut window = cfg.sliding_window.filter(|&w| w > 0 && w < max_ctx);
        if let Some(w) = window.filter(|_| !be.supports(Feature::SlidingWindow)) {
            tracing::warn!(
                "Gemma 3's local layers attend to {w} positions, and the {} backend has no sliding-window attention: the context is capped at {w} tokens",
                be.name()
            );
            (max_ctx, window) = (w, None);
        }
        if let Some(f) = NEEDS.into_iter().find(|&f| !be.supports(f)) {
            return Err(ModelError::Config(format!(
                "Gemma 3 needs {f:?}, which the {} backend does not implement yet",
                be.name()
            )));
        }
        let (d, ff, q_dim, kv_dim, hd) =
            (cfg.hidden_size, cfg.intermediate_size, cfg.q_dim(), cfg.kv_dim(), cfg.head_dim);
        let weight =
            |name: &str, rows, cols| -> Result<HostWeight> { host_weight(name, src.require(name)?, rows, cols) };
        let vector = |be: &mut B, name: &str, len| -> Result<B::Vector> {
            Ok(be.vector(&vector_f32(name, &src.require(name)?, len)?)?)
        };
        let embed = be.matrix(MatrixDesc::single(
            weight("token_embd.weight", cfg.vocab_size, d)?,
            MatrixUse::Embedding { tied_head: true },
        ))?;
        let mut blocks = Vec::with_capacity(cfg.num_layers);
        for i in 0..cfg.num_layers {
            let p = |s: &str| format!("blk.{i}.{s}");
            let qkv = MatrixDesc {
                parts: vec![
                    weight(&p("attn_q.weight"), q_dim, d)?,
                    weight(&p("attn_k.weight"), kv_dim, d)?,
                    weight(&p("attn_v.weight"), kv_dim, d)?,
                ],
                bias: None,
                usage: MatrixUse::Qkv,
            };
            let gate_up = MatrixDesc {
                parts: vec![weight(&p("ffn_gate.weight"), ff, d)?, weight(&p("ffn_up.weight"), ff, d)?],
                bias: None,
                usage: MatrixUse::GateUp,
            };
            blocks.push(Block {
                attn_norm: vector(be, &p("attn_norm.weight"), d)?,
                qkv: be.matrix(qkv)?,
                q_norm: vector(be, &p("attn_q_norm.weight"), hd)?,
                k_norm: vector(be, &p("attn_k_norm.weight"), hd)?,
                o: be.matrix(MatrixDesc::single(weight(&p("attn_output.weight"), d, q_dim)?, MatrixUse::Linear))?,
                post_attn_norm: vector(be, &p("post_attention_norm.weight"), d)?,
                ffn_norm: vector(be, &p("ffn_norm.weight"), d)?,
                gate_up: be.matrix(gate_up)?,
                down: be.matrix(MatrixDesc::single(weight(&p("ffn_down.weight"), d, ff)?, MatrixUse::Linear))?,
                post_ffn_norm: vector(be, &p("post_ffw_norm.weight"), d)?,
                global: cfg.global_every == 0 || (i + 1) % cfg.global_every == 0,
            });
        }
        let norm = vector(be, "output_norm.weight", d)?;
        let desc = |theta: f32| RopeDesc {
            style: cfg.rope_style,
            rot_dim: hd,
            theta,
            max_pos: max_ctx.max(1),
            freq_factors: cfg.rope_scaling.freq_factors(theta, hd),
            scale: cfg.rope_scaling.position_scale(),
            attn_factor: cfg.rope_scaling.attn_factor(),
        };
        let rope_global = be.rope(&desc(cfg.rope_theta))?;
        let rope_local = be.rope(&RopeDesc {
            freq_factors: None,
            scale: 1.0,
            attn_factor: 1.0,
            ..desc(cfg.rope_local_theta.unwrap_or(cfg.rope_theta))
        })?;
        Ok(Self { cfg, embed, blocks, norm, rope_local, rope_global, max_ctx, window })
    }

    /// Attaches LoRA adapter `id`'s factors to every layer's products.
    pub fn lora_attach(&self, be: &mut B, id: u32, ad: &crate::lora::LoraAdapter) -> Result<()> {
        for (i, b) in self.blocks.iter().enumerate() {
            crate::lora::attach_block(be, id, ad, i, [Some(&b.qkv), Some(&b.o), Some(&b.gate_up), Some(&b.down)])?;
        }
        Ok(())
    }

    /// Positions `0..max_ctx` are covered.
    pub fn max_ctx(&self) -> usize {
        self.max_ctx
    }

    /// Bytes of weights read by one decode step (all layers + the head).
    pub fn weight_bytes_per_token(&self, be: &B) -> usize {
        let layers: usize = self.blocks.iter().map(|b| bytes_of(be, &[&b.qkv, &b.o, &b.gate_up, &b.down])).sum();
        layers + be.matrix_bytes(&self.embed)
    }
}

impl<B: Backend> Decoder<B> for Gemma3<B> {
    fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    fn rope(&self, layer: usize) -> &B::Rope {
        if self.blocks.get(layer).is_some_and(|b| b.global) {
            &self.rope_global
        } else {
            &self.rope_local
        }
    }

    fn head(&self) -> (&B::Vector, &B::Matrix) {
        (&self.norm, &self.embed)
    }

    fn layers(&self, be: &mut B, step: &B::Step, kv: &mut B::Kv, a: &mut Activations<B>) -> Result<()> {
        let eps = self.cfg.rms_norm_eps;
        let shape = self.attn_shape();
        be.embed(step, &self.embed, (self.cfg.hidden_size as f32).sqrt(), &mut a.x)?;
        for (li, b) in self.blocks.iter().enumerate() {
            let input = AttnIn {
                norm: &b.attn_norm,
                eps,
                qkv: &b.qkv,
                qk_norm: Some((&b.q_norm, &b.k_norm)),
                rope: self.rope(li),
                shape,
            };
            be.attn_in(step, &mut a.x, &input, kv, li, &mut a.qkv)?;
            match self.window.filter(|_| !b.global) {
                Some(w) => {
                    let mask = AttnMask { window: Some(w), sinks: None };
                    be.attention_masked(step, &a.qkv, kv, li, &shape, &mask, &mut a.attn)?
                }
                None => be.attention(step, &a.qkv, kv, li, &shape, &mut a.attn)?,
            }
            be.linear_add(step, &a.attn, &b.o, Some((&b.post_attn_norm, eps)), &mut a.x)?;
            be.norm_glu(step, &mut a.x, &b.ffn_norm, eps, &b.gate_up, Glu::GeluTanh, &mut a.act)?;
            be.linear_add(step, &a.act, &b.down, Some((&b.post_ffn_norm, eps)), &mut a.x)?;
        }
        Ok(())
    }
}
