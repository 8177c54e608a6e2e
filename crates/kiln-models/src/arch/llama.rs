//! The llama graph: Llama 1/2/3, SmolLM, Mistral (no sliding window), Qwen2
//! (Q/K/V biases) and Qwen3 (per-head Q/K RMSNorm) as configuration flags,
//! and their mixture-of-experts forms: Mixtral (Llama with experts) and
//! Qwen3-MoE (Qwen3 with experts), whose feed-forward block is
//! `super::moe`'s in place of the dense gated unit; attention is the
//! same. Written once over [`Backend`]: the same code runs on every device.
//!
//! Papers: LLaMA (Touvron et al., 2023, arXiv:2302.13971), RoFormer (Su et
//! al., arXiv:2104.09864), GQA (Ainslie et al., arXiv:2305.13245).
//! Reference implementations: Hugging Face `modeling_llama.py`,
//! `modeling_qwen2.py`, `modeling_qwen3.py`.
//!
//! Per layer: `x += o(attn(rope(q(norm(x))), rope(k(norm(x))), v(norm(x))))`,
//! then `x += down(silu(gate(norm(x))) * up(norm(x)))`. K is rotated before
//! it is written to the paged cache; attention reads the cache in place.

use kiln_backend::{AttnIn, Backend, Glu, HostWeight, MatrixDesc, MatrixUse, RopeDesc};

use super::moe::{self, MoeFfn};
use super::{bytes_of, Activations, Decoder};
use crate::config::ModelConfig;
use crate::error::Result;
use crate::loader::TensorSource;
use crate::weights::{host_weight, vector_f32};

struct Block<B: Backend> {
    attn_norm: B::Vector,
    /// Q, K and V stacked, with Qwen2's biases.
    qkv: B::Matrix,
    /// Qwen3's per-head norms of Q and K.
    qk_norm: Option<(B::Vector, B::Vector)>,
    o: B::Matrix,
    ffn_norm: B::Vector,
    ffn: Ffn<B>,
}

/// A layer's feed-forward block.
enum Ffn<B: Backend> {
    /// One gated unit.
    Dense { gate_up: B::Matrix, down: B::Matrix },
    /// A mixture of experts.
    Moe(MoeFfn<B>),
}

/// A llama-family model on backend `B`.
pub struct Llama<B: Backend> {
    cfg: ModelConfig,
    embed: B::Matrix,
    blocks: Vec<Block<B>>,
    norm: B::Vector,
    /// The output head when it is not the embedding.
    lm_head: Option<B::Matrix>,
    rope: B::Rope,
    max_ctx: usize,
}

/// The rotary embedding of a llama-family model for positions `0..max_ctx`:
/// frequency factors from the file's `rope_freqs.weight` (Llama 3.1 GGUFs)
/// or from the configuration's scaling ([`crate::config::RopeScaling`]).
pub fn rope_desc(cfg: &ModelConfig, src: &dyn TensorSource, max_ctx: usize) -> Result<RopeDesc> {
    let freq_factors = match src.get("rope_freqs.weight")? {
        Some(t) => Some(vector_f32("rope_freqs.weight", &t, cfg.head_dim / 2)?),
        None => cfg.rope_scaling.freq_factors(cfg.rope_theta, cfg.head_dim),
    };
    Ok(RopeDesc {
        style: cfg.rope_style,
        rot_dim: cfg.head_dim,
        theta: cfg.rope_theta,
        max_pos: max_ctx.max(1),
        freq_factors,
        scale: cfg.rope_scaling.position_scale(),
        attn_factor: cfg.rope_scaling.attn_factor(),
    })
}

impl<B: Backend> Llama<B> {
    /// Places the weights named in canonical (GGUF) form in `src` on `be`;
    /// `max_ctx` sizes the RoPE table.
    pub fn load(be: &mut B, cfg: ModelConfig, src: &dyn TensorSource, max_ctx: usize) -> Result<Self> {
        cfg.validate()?;
        if cfg.moe.is_some() {
            moe::check_backend(be)?;
        }
        let (d, ff, q_dim, kv_dim) = (cfg.hidden_size, cfg.intermediate_size, cfg.q_dim(), cfg.kv_dim());
        let weight =
            |name: &str, rows, cols| -> Result<HostWeight> { host_weight(name, src.require(name)?, rows, cols) };
        let vector = |be: &mut B, name: &str, len| -> Result<B::Vector> {
            Ok(be.vector(&vector_f32(name, &src.require(name)?, len)?)?)
        };
        let single = |be: &mut B, name: &str, rows, cols, usage| -> Result<B::Matrix> {
            Ok(be.matrix(MatrixDesc::single(weight(name, rows, cols)?, usage))?)
        };
        let head = match src.get("output.weight")? {
            Some(t) if !cfg.tie_embeddings => Some(host_weight("output.weight", t, cfg.vocab_size, d)?),
            _ => None,
        };
        let tied_head = head.is_none();
        let embed = single(be, "token_embd.weight", cfg.vocab_size, d, MatrixUse::Embedding { tied_head })?;
        let mut blocks = Vec::with_capacity(cfg.num_layers);
        for i in 0..cfg.num_layers {
            let p = |s: &str| format!("blk.{i}.{s}");
            let bias = if cfg.qkv_bias {
                let mut b = Vec::with_capacity(q_dim + 2 * kv_dim);
                for (n, len) in [("attn_q.bias", q_dim), ("attn_k.bias", kv_dim), ("attn_v.bias", kv_dim)] {
                    b.extend(vector_f32(&p(n), &src.require(&p(n))?, len)?);
                }
                Some(b)
            } else {
                None
            };
            let qkv = MatrixDesc {
                parts: vec![
                    weight(&p("attn_q.weight"), q_dim, d)?,
                    weight(&p("attn_k.weight"), kv_dim, d)?,
                    weight(&p("attn_v.weight"), kv_dim, d)?,
                ],
                bias,
                usage: MatrixUse::Qkv,
            };
            let ffn = match cfg.moe {
                Some(m) => Ffn::Moe(MoeFfn::load(be, &cfg, m, src, i, false)?),
                None => {
                    let gate_up = MatrixDesc {
                        parts: vec![weight(&p("ffn_gate.weight"), ff, d)?, weight(&p("ffn_up.weight"), ff, d)?],
                        bias: None,
                        usage: MatrixUse::GateUp,
                    };
                    let down = single(be, &p("ffn_down.weight"), d, ff, MatrixUse::Linear)?;
                    Ffn::Dense { gate_up: be.matrix(gate_up)?, down }
                }
            };
            let qk_norm = if cfg.qk_norm {
                let hd = cfg.head_dim;
                Some((vector(be, &p("attn_q_norm.weight"), hd)?, vector(be, &p("attn_k_norm.weight"), hd)?))
            } else {
                None
            };
            blocks.push(Block {
                attn_norm: vector(be, &p("attn_norm.weight"), d)?,
                qkv: be.matrix(qkv)?,
                qk_norm,
                o: single(be, &p("attn_output.weight"), d, q_dim, MatrixUse::Linear)?,
                ffn_norm: vector(be, &p("ffn_norm.weight"), d)?,
                ffn,
            });
        }
        let norm = vector(be, "output_norm.weight", d)?;
        let lm_head = match head {
            Some(w) => Some(be.matrix(MatrixDesc::single(w, MatrixUse::Head))?),
            None => None,
        };
        let rope = be.rope(&rope_desc(&cfg, src, max_ctx)?)?;
        Ok(Self { cfg, embed, blocks, norm, lm_head, rope, max_ctx })
    }

    /// Positions `0..max_ctx` are covered.
    pub fn max_ctx(&self) -> usize {
        self.max_ctx
    }

    /// Bytes of weights read by one decode step (all layers + output head).
    pub fn weight_bytes_per_token(&self, be: &B) -> usize {
        let ffn = |b: &Block<B>| match &b.ffn {
            Ffn::Dense { gate_up, down } => bytes_of(be, &[gate_up, down]),
            Ffn::Moe(m) => m.bytes_per_token(be),
        };
        let layers: usize = self.blocks.iter().map(|b| bytes_of(be, &[&b.qkv, &b.o]) + ffn(b)).sum();
        layers + be.matrix_bytes(self.head_matrix())
    }

    fn head_matrix(&self) -> &B::Matrix {
        self.lm_head.as_ref().unwrap_or(&self.embed)
    }

    /// Attaches LoRA adapter `id`'s factors to every layer's products.
    pub fn lora_attach(&self, be: &mut B, id: u32, ad: &crate::lora::LoraAdapter) -> Result<()> {
        for (i, b) in self.blocks.iter().enumerate() {
            let (gate_up, down) = match &b.ffn {
                Ffn::Dense { gate_up, down } => (Some(gate_up), Some(down)),
                Ffn::Moe(_) => (None, None),
            };
            crate::lora::attach_block(be, id, ad, i, [Some(&b.qkv), Some(&b.o), gate_up, down])?;
        }
        Ok(())
    }
}

impl<B: Backend> Decoder<B> for Llama<B> {
    fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    fn rope(&self, _layer: usize) -> &B::Rope {
        &self.rope
    }

    fn head(&self) -> (&B::Vector, &B::Matrix) {
        (&self.norm, self.head_matrix())
    }

    fn layers(&self, be: &mut B, step: &B::Step, kv: &mut B::Kv, a: &mut Activations<B>) -> Result<()> {
        let eps = self.cfg.rms_norm_eps;
        let shape = self.attn_shape();
        be.embed(step, &self.embed, 1.0, &mut a.x)?;
        for (li, b) in self.blocks.iter().enumerate() {
            let input = AttnIn {
                norm: &b.attn_norm,
                eps,
                qkv: &b.qkv,
                qk_norm: b.qk_norm.as_ref().map(|(q, k)| (q, k)),
                rope: &self.rope,
                shape,
            };
            be.attn_in(step, &mut a.x, &input, kv, li, &mut a.qkv)?;
            be.attention(step, &a.qkv, kv, li, &shape, &mut a.attn)?;
            be.linear_add(step, &a.attn, &b.o, None, &mut a.x)?;
            match &b.ffn {
                Ffn::Dense { gate_up, down } => {
                    be.norm_glu(step, &mut a.x, &b.ffn_norm, eps, gate_up, Glu::Swiglu, &mut a.act)?;
                    be.linear_add(step, &a.act, down, None, &mut a.x)?;
                }
                Ffn::Moe(m) => m.forward(be, step, &mut a.x, &b.ffn_norm, eps)?,
            }
        }
        Ok(())
    }
}
