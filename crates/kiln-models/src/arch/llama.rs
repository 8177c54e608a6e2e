//! The llama graph: Llama 1/2/3, SmolLM, Mistral (no sliding window), Qwen2
//! (Q/K/V biases) and Qwen3 (per-head Q/K RMSNorm) as configuration flags.
//!
//! Papers: LLaMA (Touvron et al., 2023, arXiv:2302.13971), RoFormer (Su et
//! al., arXiv:2104.09864), GQA (Ainslie et al., arXiv:2305.13245).
//! Reference implementations: Hugging Face `modeling_llama.py`,
//! `modeling_qwen2.py`, `modeling_qwen3.py`.
//!
//! Per layer: `x += o(attn(rope(q(norm(x))), rope(k(norm(x))), v(norm(x))))`,
//! then `x += down(silu(gate(norm(x))) * up(norm(x)))`. K is rotated before
//! it is written to the paged cache; attention reads the cache in place.

use kiln_kernels::ops::{self, AttnSeq, Rope};
use kiln_kernels::ThreadPool;

use crate::batch::ForwardBatch;
use crate::config::ModelConfig;
use crate::error::{ModelError, Result};
use crate::kv_cache::KvCache;
use crate::loader::TensorSource;
use crate::weights::{forward_multi, vector_f32, Linear, Weight};

struct Block {
    attn_norm: Vec<f32>,
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    q_norm: Option<Vec<f32>>,
    k_norm: Option<Vec<f32>>,
    ffn_norm: Vec<f32>,
    gate: Linear,
    up: Linear,
    down: Linear,
}

/// A llama-family model.
pub struct Llama {
    cfg: ModelConfig,
    embed: Weight,
    blocks: Vec<Block>,
    norm: Vec<f32>,
    lm_head: Linear,
    rope: Rope,
}

/// Reusable activation buffers of a forward pass (grow-only).
#[derive(Debug, Default)]
pub struct Scratch {
    x: Vec<f32>,
    h: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    attn: Vec<f32>,
    o: Vec<f32>,
    gate: Vec<f32>,
    up: Vec<f32>,
    last: Vec<f32>,
}

fn grow(v: &mut Vec<f32>, n: usize) -> &mut [f32] {
    if v.len() < n {
        v.resize(n, 0.0);
    }
    &mut v[..n]
}

/// The RoPE table of a llama-family model for positions `0..max_ctx`
/// (Llama 3.1 frequency factors from `rope_freqs.weight` when present).
pub fn rope_table(cfg: &ModelConfig, src: &dyn TensorSource, max_ctx: usize) -> Result<Rope> {
    let freq_factors = match src.get("rope_freqs.weight")? {
        Some(t) => Some(vector_f32("rope_freqs.weight", &t, cfg.head_dim / 2)?),
        None => None,
    };
    Ok(Rope::new(cfg.rope_style, cfg.head_dim, cfg.rope_theta, max_ctx.max(1), freq_factors.as_deref(), cfg.rope_scale))
}

impl Llama {
    /// Loads the weights named in canonical (GGUF) form from `src`;
    /// `max_ctx` sizes the RoPE table; `pack` repacks the matrices for the
    /// integer kernels where that helps ([`Linear::new`]).
    pub fn load(cfg: ModelConfig, src: &dyn TensorSource, max_ctx: usize, pack: bool) -> Result<Self> {
        cfg.validate()?;
        let (d, ff, q_dim, kv_dim) = (cfg.hidden_size, cfg.intermediate_size, cfg.q_dim(), cfg.kv_dim());
        let weight = |name: &str, rows, cols| Weight::new(name, src.require(name)?, rows, cols);
        let vector = |name: &str, len| vector_f32(name, &src.require(name)?, len);
        let linear = |name: &str, rows, cols, bias: bool| -> Result<Linear> {
            let w = weight(&format!("{name}.weight"), rows, cols)?;
            let b = if bias { Some(vector(&format!("{name}.bias"), rows)?) } else { None };
            Linear::new(w, b, pack)
        };
        let embed = weight("token_embd.weight", cfg.vocab_size, d)?;
        let mut blocks = Vec::with_capacity(cfg.num_layers);
        for i in 0..cfg.num_layers {
            let p = |s: &str| format!("blk.{i}.{s}");
            blocks.push(Block {
                attn_norm: vector(&p("attn_norm.weight"), d)?,
                q: linear(&p("attn_q"), q_dim, d, cfg.qkv_bias)?,
                k: linear(&p("attn_k"), kv_dim, d, cfg.qkv_bias)?,
                v: linear(&p("attn_v"), kv_dim, d, cfg.qkv_bias)?,
                o: linear(&p("attn_output"), d, q_dim, false)?,
                q_norm: if cfg.qk_norm { Some(vector(&p("attn_q_norm.weight"), cfg.head_dim)?) } else { None },
                k_norm: if cfg.qk_norm { Some(vector(&p("attn_k_norm.weight"), cfg.head_dim)?) } else { None },
                ffn_norm: vector(&p("ffn_norm.weight"), d)?,
                gate: linear(&p("ffn_gate"), ff, d, false)?,
                up: linear(&p("ffn_up"), ff, d, false)?,
                down: linear(&p("ffn_down"), d, ff, false)?,
            });
        }
        let norm = vector("output_norm.weight", d)?;
        let lm_head = match src.get("output.weight")? {
            Some(t) if !cfg.tie_embeddings => {
                Linear::new(Weight::new("output.weight", t, cfg.vocab_size, d)?, None, pack)?
            }
            _ => Linear::new(embed.clone(), None, pack)?,
        };
        let rope = rope_table(&cfg, src, max_ctx)?;
        Ok(Self { cfg, embed, blocks, norm, lm_head, rope })
    }

    /// The configuration.
    pub fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    /// Bytes of weights read by one decode step (all layers + output head).
    pub fn weight_bytes_per_token(&self) -> usize {
        let b: usize = self
            .blocks
            .iter()
            .map(|b| {
                [&b.q, &b.k, &b.v, &b.o, &b.gate, &b.up, &b.down].iter().map(|l| l.weight().n_bytes()).sum::<usize>()
            })
            .sum();
        b + self.lm_head.weight().n_bytes()
    }

    /// Runs one batched forward: writes every token's K/V into `kv` and puts
    /// the wanted logits (see [`ForwardBatch::logit_rows`]) in `logits`,
    /// `vocab_size` floats per row.
    pub fn forward(
        &self,
        pool: &ThreadPool,
        batch: &ForwardBatch,
        kv: &mut KvCache,
        s: &mut Scratch,
        logits: &mut Vec<f32>,
    ) -> Result<()> {
        let cfg = &self.cfg;
        let n = batch.len();
        let (d, hd) = (cfg.hidden_size, cfg.head_dim);
        self.check_batch(batch, kv)?;
        let x = grow(&mut s.x, n * d);
        for (t, &tok) in batch.tokens.iter().enumerate() {
            self.embed.row_f32(tok as usize, &mut x[t * d..(t + 1) * d])?;
        }
        let attn_seqs: Vec<AttnSeq<'_>> = batch
            .seqs
            .iter()
            .map(|sp| AttnSeq { q_start: sp.start, n_q: sp.len, pos0: sp.pos0, block_table: &sp.block_table })
            .collect();
        let layout = kv.layout();
        let path = kv.attention_path();
        let scale = 1.0 / (hd as f32).sqrt();
        let eps = cfg.rms_norm_eps;
        for (li, b) in self.blocks.iter().enumerate() {
            let x = &mut s.x[..n * d];
            let h = grow(&mut s.h, n * d);
            if li == 0 {
                ops::rms_norm(pool, x, &b.attn_norm, eps, h);
            } else {
                // The previous block's FFN output joins the residual here,
                // fused with this block's attention norm.
                ops::add_rms_norm(pool, x, &s.o[..n * d], &b.attn_norm, eps, h);
            }
            let q = grow(&mut s.q, n * cfg.q_dim());
            let k = grow(&mut s.k, n * cfg.kv_dim());
            let v = grow(&mut s.v, n * cfg.kv_dim());
            forward_multi(pool, &[&b.q, &b.k, &b.v], h, n, &mut [&mut *q, &mut *k, &mut *v])?;
            if let (Some(qn), Some(kn)) = (&b.q_norm, &b.k_norm) {
                ops::rms_norm_inplace(pool, q, qn, eps);
                ops::rms_norm_inplace(pool, k, kn, eps);
            }
            self.rope.apply(pool, q, &batch.positions, cfg.num_heads, hd);
            self.rope.apply(pool, k, &batch.positions, cfg.num_kv_heads, hd);
            let (kc, vc) = kv.layer_mut(li).ok_or_else(|| ModelError::Batch(format!("KV cache has no layer {li}")))?;
            ops::write_kv(pool, layout, kc, vc, &batch.slots, k, v);
            let attn = grow(&mut s.attn, n * cfg.q_dim());
            ops::paged_attention_with(path, None, pool, layout, kc, vc, &attn_seqs, q, cfg.num_heads, scale, attn);
            let o = grow(&mut s.o, n * d);
            b.o.forward(pool, attn, n, o)?;
            ops::add_rms_norm(pool, x, o, &b.ffn_norm, eps, h);
            let gate = grow(&mut s.gate, n * cfg.intermediate_size);
            let up = grow(&mut s.up, n * cfg.intermediate_size);
            forward_multi(pool, &[&b.gate, &b.up], h, n, &mut [&mut *gate, &mut *up])?;
            ops::silu_mul(pool, gate, up, n);
            b.down.forward(pool, gate, n, o)?;
        }
        // The last block's FFN output.
        ops::add_inplace(&mut s.x[..n * d], &s.o[..n * d]);
        self.head(pool, batch, s, logits)
    }

    fn head(&self, pool: &ThreadPool, batch: &ForwardBatch, s: &mut Scratch, logits: &mut Vec<f32>) -> Result<()> {
        let d = self.cfg.hidden_size;
        let m = batch.logit_rows().count();
        let last = grow(&mut s.last, m * d);
        for (i, r) in batch.logit_rows().enumerate() {
            ops::rms_norm(
                pool,
                &s.x[r * d..(r + 1) * d],
                &self.norm,
                self.cfg.rms_norm_eps,
                &mut last[i * d..(i + 1) * d],
            );
        }
        logits.resize(m * self.cfg.vocab_size, 0.0);
        if m > 0 {
            self.lm_head.forward(pool, last, m, logits)?;
        }
        Ok(())
    }

    fn check_batch(&self, batch: &ForwardBatch, kv: &KvCache) -> Result<()> {
        let bad = |m: String| Err(ModelError::Batch(m));
        if batch.is_empty() {
            return bad("empty batch".into());
        }
        if let Some(&t) = batch.tokens.iter().find(|&&t| t as usize >= self.cfg.vocab_size) {
            return bad(format!("token id {t} is outside the vocabulary ({} tokens)", self.cfg.vocab_size));
        }
        if let Some(&p) = batch.positions.iter().find(|&&p| p as usize >= self.rope.max_pos()) {
            return bad(format!("position {p} is past the context length {}", self.rope.max_pos()));
        }
        if let Some(&b) = batch.seqs.iter().flat_map(|s| s.block_table.iter()).find(|&&b| b as usize >= kv.num_blocks())
        {
            return bad(format!("block {b} is outside the KV cache ({} blocks)", kv.num_blocks()));
        }
        if kv.block_size() == 0 {
            return bad("KV block size is 0".into());
        }
        Ok(())
    }
}
