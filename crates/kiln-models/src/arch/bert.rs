//! BERT-style encoders: BERT, MiniLM and bge (learned absolute positions and
//! token types, GELU), XLM-RoBERTa (the same graph, positions counted from
//! `pad_token_id + 1`, no token types) and nomic-bert (rotary positions,
//! SwiGLU, no biases). Every block is post-norm: `x = LN(x + attn(x))`,
//! then `x = LN(x + ffn(x))`; attention runs in both directions within an
//! input, with no KV cache. The output is the last layer's token rows;
//! pooling and the reranking head are the runner's ([`crate::encoder`]).
//!
//! Token types ride on the position table: row `t · max_position + p` of
//! the table kiln builds holds `position[p] + type[t]`, so a row of
//! segment `t` at position `p` looks up `t · max_position + p` (rotary
//! models have one type and look up their position only for RoPE).
//!
//! Papers: BERT (Devlin et al., 2018, arXiv:1810.04805); MiniLM (Wang et
//! al., 2020, arXiv:2002.10957); XLM-R (Conneau et al., 2019,
//! arXiv:1911.02116); nomic-embed (Nussbaum et al., 2024,
//! arXiv:2402.01613). Reference: Hugging Face `modeling_bert.py`.

use kiln_backend::{
    Act, AttnShape, Backend, Feature, HostWeight, LayerNorm, MatrixDesc, MatrixUse, RopeDesc, RopeStyle,
};
use kiln_gguf::GgmlType;

use crate::encoder::EncoderConfig;
use crate::error::{ModelError, Result};
use crate::loader::TensorSource;
use crate::weights::{host_weight, vector_f32, RawTensor, SharedBytes};

struct Norm<B: Backend> {
    w: B::Vector,
    b: B::Vector,
}

struct Block<B: Backend> {
    qkv: B::Matrix,
    o: B::Matrix,
    attn_norm: Norm<B>,
    up: B::Matrix,
    down: B::Matrix,
    out_norm: Norm<B>,
}

/// The activation buffers of an encoder's steps.
pub struct EncoderActivations<B: Backend> {
    pub(crate) x: B::Buffer,
    qkv: B::Buffer,
    attn: B::Buffer,
    act: B::Buffer,
}

/// A BERT-family encoder on backend `B`.
pub struct Bert<B: Backend> {
    cfg: EncoderConfig,
    embed: B::Matrix,
    positions: B::Matrix,
    embed_norm: Norm<B>,
    rope: Option<B::Rope>,
    blocks: Vec<Block<B>>,
}

/// The reranking head of a cross-encoder, on the host: `score =
/// out · tanh(dense · cls + b) + out_b` (BERT's pooler and classifier,
/// RoBERTa's classification head), or `out · cls + out_b` for a file
/// without the dense layer (llama.cpp's converter drops BERT's pooler).
#[derive(Debug, Clone)]
pub struct RankHead {
    dense: Option<(Vec<f32>, Vec<f32>)>,
    out: Vec<f32>,
    out_b: f32,
}

impl RankHead {
    /// Loads the head (`cls.weight` and `cls.bias` when present,
    /// `cls.output.weight`, `cls.output.bias`); the first label's score is
    /// the relevance.
    pub fn load(src: &dyn TensorSource, d: usize) -> Result<Self> {
        let mat = |name: &str, rows: usize| -> Result<Vec<f32>> {
            let t = src.require(name)?;
            let w = host_weight(name, t, rows, d)?;
            let mut v = vec![0.0; rows * d];
            for (r, row) in v.chunks_exact_mut(d).enumerate() {
                let bytes = &w.bytes().as_slice()[r * w.row_bytes()..(r + 1) * w.row_bytes()];
                kiln_kernels::quant::dequantize_row(w.ty(), bytes, row)
                    .map_err(|e| ModelError::Config(format!("tensor '{name}': {e}")))?;
            }
            Ok(v)
        };
        let out_t = src.require("cls.output.weight")?;
        let labels = out_t.dims.get(1).copied().unwrap_or(1).max(1);
        let out = mat("cls.output.weight", labels)?;
        let out_b = vector_f32("cls.output.bias", &src.require("cls.output.bias")?, labels)?;
        let dense = match src.get("cls.weight")? {
            Some(_) => Some((mat("cls.weight", d)?, vector_f32("cls.bias", &src.require("cls.bias")?, d)?)),
            None => None,
        };
        Ok(Self { dense, out: out[..d].to_vec(), out_b: out_b[0] })
    }

    /// The relevance score of a pair from its `[CLS]` row.
    pub fn score(&self, cls: &[f32]) -> f32 {
        let d = cls.len();
        let dot = |w: &[f32]| w.iter().zip(cls).map(|(a, b)| f64::from(*a) * f64::from(*b)).sum::<f64>();
        let mut s = f64::from(self.out_b);
        match &self.dense {
            Some((dense, bias)) => {
                for (r, w) in dense.chunks_exact(d).enumerate() {
                    s += (dot(w) + f64::from(bias[r])).tanh() * f64::from(self.out[r]);
                }
            }
            None => s += dot(&self.out),
        }
        s as f32
    }
}

impl<B: Backend> Bert<B> {
    /// Places the weights of `src` (GGUF names) on `be`.
    pub fn load(be: &mut B, cfg: EncoderConfig, src: &dyn TensorSource) -> Result<Self> {
        cfg.validate()?;
        if !be.supports(Feature::Encoder) {
            return Err(ModelError::Config(format!("the {} backend does not run encoder models yet", be.name())));
        }
        let (d, ff) = (cfg.hidden_size, cfg.intermediate_size);
        let weight =
            |name: &str, rows, cols| -> Result<HostWeight> { host_weight(name, src.require(name)?, rows, cols) };
        let vector = |name: &str, len| -> Result<Vec<f32>> { vector_f32(name, &src.require(name)?, len) };
        let norm = |be: &mut B, stem: &str| -> Result<Norm<B>> {
            Ok(Norm {
                w: be.vector(&vector(&format!("{stem}.weight"), d)?)?,
                b: be.vector(&vector(&format!("{stem}.bias"), d)?)?,
            })
        };
        let bias = |names: &[(&str, usize)]| -> Result<Option<Vec<f32>>> {
            if !cfg.biases {
                return Ok(None);
            }
            let mut all = Vec::new();
            for (n, len) in names {
                all.extend(vector(n, *len)?);
            }
            Ok(Some(all))
        };
        let embed = be.matrix(MatrixDesc::single(
            weight("token_embd.weight", cfg.vocab_size, d)?,
            MatrixUse::Embedding { tied_head: false },
        ))?;
        let positions =
            be.matrix(MatrixDesc::single(position_table(&cfg, src)?, MatrixUse::Embedding { tied_head: false }))?;
        let embed_norm = norm(be, "token_embd_norm")?;
        let mut blocks = Vec::with_capacity(cfg.num_layers);
        for i in 0..cfg.num_layers {
            let p = |s: &str| format!("blk.{i}.{s}");
            let qkv_parts = match src.get(&p("attn_qkv.weight"))? {
                Some(fused) => split_rows(&p("attn_qkv.weight"), fused, &[d, d, d], d)?,
                None => vec![
                    weight(&p("attn_q.weight"), d, d)?,
                    weight(&p("attn_k.weight"), d, d)?,
                    weight(&p("attn_v.weight"), d, d)?,
                ],
            };
            let qkv_bias = bias(&[(&p("attn_q.bias"), d), (&p("attn_k.bias"), d), (&p("attn_v.bias"), d)])?;
            let up = if cfg.act == Act::Swiglu {
                MatrixDesc {
                    parts: vec![weight(&p("ffn_gate.weight"), ff, d)?, weight(&p("ffn_up.weight"), ff, d)?],
                    bias: None,
                    usage: MatrixUse::GateUp,
                }
            } else {
                MatrixDesc {
                    parts: vec![weight(&p("ffn_up.weight"), ff, d)?],
                    bias: bias(&[(&p("ffn_up.bias"), ff)])?,
                    usage: MatrixUse::Linear,
                }
            };
            blocks.push(Block {
                qkv: be.matrix(MatrixDesc { parts: qkv_parts, bias: qkv_bias, usage: MatrixUse::Qkv })?,
                o: be.matrix(MatrixDesc {
                    parts: vec![weight(&p("attn_output.weight"), d, d)?],
                    bias: bias(&[(&p("attn_output.bias"), d)])?,
                    usage: MatrixUse::Linear,
                })?,
                attn_norm: norm(be, &p("attn_output_norm"))?,
                up: be.matrix(up)?,
                down: be.matrix(MatrixDesc {
                    parts: vec![weight(&p("ffn_down.weight"), d, ff)?],
                    bias: bias(&[(&p("ffn_down.bias"), d)])?,
                    usage: MatrixUse::Linear,
                })?,
                out_norm: norm(be, &p("layer_output_norm"))?,
            });
        }
        let rope = match cfg.rope_theta {
            Some(theta) => Some(be.rope(&RopeDesc {
                style: RopeStyle::Neox,
                rot_dim: cfg.head_dim(),
                theta,
                max_pos: cfg.max_position,
                freq_factors: None,
                scale: 1.0,
                attn_factor: 1.0,
            })?),
            None => None,
        };
        Ok(Self { cfg, embed, positions, embed_norm, rope, blocks })
    }

    /// The configuration.
    pub fn config(&self) -> &EncoderConfig {
        &self.cfg
    }

    /// The attention layers' heads.
    pub fn attn_shape(&self) -> AttnShape {
        self.cfg.attn_shape()
    }

    /// The activation buffers of this model's steps.
    pub fn activations(&self, be: &mut B) -> Result<EncoderActivations<B>> {
        let shape = self.attn_shape();
        let width = self.cfg.intermediate_size;
        Ok(EncoderActivations {
            x: be.buffer(kiln_backend::BufferKind::Residual, self.cfg.hidden_size)?,
            qkv: be.buffer(kiln_backend::BufferKind::Qkv(shape), shape.q_dim() + 2 * shape.kv_dim())?,
            attn: be.buffer(kiln_backend::BufferKind::Hidden, shape.q_dim())?,
            act: be.buffer(kiln_backend::BufferKind::Hidden, width)?,
        })
    }

    /// Every layer of an encoder step; the last layer's rows end in `a.x`.
    pub fn body(&self, be: &mut B, step: &B::Step, a: &mut EncoderActivations<B>) -> Result<()> {
        let eps = self.cfg.layer_norm_eps;
        let shape = self.attn_shape();
        fn ln<B: Backend>(n: &Norm<B>, eps: f32) -> LayerNorm<'_, B::Vector> {
            LayerNorm { weight: &n.w, bias: &n.b, eps }
        }
        be.embed_sum(step, &self.embed, &self.positions, ln(&self.embed_norm, eps), &mut a.x)?;
        for b in &self.blocks {
            be.linear(step, &a.x, &b.qkv, Act::None, &mut a.qkv)?;
            be.attention_within(step, &mut a.qkv, self.rope.as_ref(), &shape, &mut a.attn)?;
            be.linear_add_norm(step, &a.attn, &b.o, ln(&b.attn_norm, eps), &mut a.x)?;
            be.linear(step, &a.x, &b.up, self.cfg.act, &mut a.act)?;
            be.linear_add_norm(step, &a.act, &b.down, ln(&b.out_norm, eps), &mut a.x)?;
        }
        Ok(())
    }
}

/// The table `embed_sum` adds: `position[p + offset] + type[t]` at row
/// `t · max_position + p` (see the module documentation), as f32.
fn position_table(cfg: &EncoderConfig, src: &dyn TensorSource) -> Result<HostWeight> {
    let (d, max_pos) = (cfg.hidden_size, cfg.max_position);
    let rows_of = |name: &str, t: &RawTensor, want: usize| -> Result<Vec<f32>> {
        if t.dims.len() != 2 || t.dims[0] != d || t.dims[1] < want {
            return Err(ModelError::Config(format!(
                "tensor '{name}': expected at least {want} rows of {d}, found {:?} (innermost first)",
                t.dims
            )));
        }
        let row_bytes = t.ty.row_bytes(d).ok_or_else(|| ModelError::Config(format!("tensor '{name}': bad type")))?;
        let mut out = vec![0.0; want * d];
        for (r, row) in out.chunks_exact_mut(d).enumerate() {
            let bytes = t
                .bytes
                .as_slice()
                .get(r * row_bytes..(r + 1) * row_bytes)
                .ok_or_else(|| ModelError::Config(format!("tensor '{name}' is short")))?;
            kiln_kernels::quant::dequantize_row(t.ty, bytes, row)
                .map_err(|e| ModelError::Config(format!("tensor '{name}': {e}")))?;
        }
        Ok(out)
    };
    let pos = match (cfg.rope_theta, src.get("position_embd.weight")?) {
        (None, Some(t)) => {
            rows_of("position_embd.weight", &t, max_pos + cfg.position_offset)?.split_off(cfg.position_offset * d)
        }
        (None, None) => {
            return Err(ModelError::MissingTensor {
                path: src.path().to_path_buf(),
                name: "position_embd.weight".into(),
            })
        }
        (Some(_), _) => vec![0.0; max_pos * d],
    };
    let types = match src.get("token_types.weight")? {
        Some(t) => {
            let n = t.dims.get(1).copied().unwrap_or(0).clamp(1, cfg.type_vocab_size.max(1));
            rows_of("token_types.weight", &t, n)?
        }
        None => vec![0.0; d],
    };
    let mut table = Vec::with_capacity(types.len() / d * max_pos * d);
    for ty in types.chunks_exact(d) {
        for p in pos.chunks_exact(d) {
            table.extend(p.iter().zip(ty).map(|(a, b)| a + b));
        }
    }
    let rows = table.len() / d;
    let bytes: Vec<u8> = table.into_iter().flat_map(f32::to_le_bytes).collect();
    Ok(HostWeight::new("position table", GgmlType::F32, rows, d, SharedBytes::from_vec(bytes))?)
}

/// Splits a fused weight of `parts` stacked rows (`cols` inputs) into one
/// weight per part.
fn split_rows(name: &str, t: RawTensor, parts: &[usize], cols: usize) -> Result<Vec<HostWeight>> {
    let total: usize = parts.iter().sum();
    let w = host_weight(name, t, total, cols)?;
    let rb = w.row_bytes();
    let mut at = 0;
    parts
        .iter()
        .map(|&rows| {
            let bytes = w.bytes().as_slice()[at * rb..(at + rows) * rb].to_vec();
            at += rows;
            Ok(HostWeight::new(name, w.ty(), rows, cols, SharedBytes::from_vec(bytes))?)
        })
        .collect()
}
