//! Tiny random-weight models for tests (kiln's own and downstream crates'):
//! a GGUF or safetensors writer and a plain dense reference forward pass
//! with contiguous K/V, written for clarity, not speed.
#![allow(missing_docs)]

use std::collections::BTreeMap;
use std::path::Path;

use kiln_gguf::{GgmlType, GgufWriter};
use kiln_kernels::ops::{Rope, RopeStyle};
use kiln_kernels::quant;

use crate::config::{Arch, ModelConfig};

pub mod cases;
pub mod encoder;
pub mod gpt_oss;
pub mod lora;
pub mod lora_cases;
pub mod moe;

/// Shape and format of a tiny model.
#[derive(Debug, Clone)]
pub struct TinySpec {
    pub arch: Arch,
    pub ty: GgmlType,
    pub vocab: usize,
    pub hidden: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub ff: usize,
    pub ctx: usize,
    pub tied: bool,
    pub seed: u64,
    /// Mixture-of-experts feed-forward blocks: (experts, used per token),
    /// each expert `ff` wide (Mixtral: `Arch::Llama`; `Arch::Qwen3Moe`).
    pub moe: Option<(usize, usize)>,
    /// The local layers' sliding window (gpt-oss's even layers, Gemma 3's
    /// local ones attend this many positions back; 0: Gemma 3's window is
    /// the context, and the other families have none).
    pub window: usize,
}

impl TinySpec {
    pub fn llama(ty: GgmlType) -> Self {
        Self {
            arch: Arch::Llama,
            ty,
            vocab: 288,
            hidden: 64,
            layers: 2,
            heads: 4,
            kv_heads: 2,
            ff: 128,
            ctx: 256,
            tied: false,
            seed: 1,
            moe: None,
            window: 0,
        }
    }
    /// A tiny gpt-oss: 8 experts, 2 per token, a window of 8 positions,
    /// YaRN over an original context of 32 (`arch/gpt_oss.rs`).
    pub fn gpt_oss(ty: GgmlType) -> Self {
        Self { arch: Arch::GptOss, hidden: 256, ff: 256, moe: Some((8, 2)), window: 8, ..Self::llama(ty) }
    }
    /// Gemma 3's window: [`TinySpec::window`], or the context where 0.
    pub fn gemma3_window(&self) -> usize {
        if self.window == 0 {
            self.ctx
        } else {
            self.window
        }
    }
    pub fn head_dim(&self) -> usize {
        self.hidden / self.heads
    }
    fn arch_name(&self) -> &'static str {
        match self.arch {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
            Arch::Qwen3Moe => "qwen3moe",
            Arch::Gemma3 => "gemma3",
            Arch::GptOss => "gpt-oss",
            Arch::Bert => "bert",
            Arch::NomicBert => "nomic-bert",
        }
    }
    /// The RoPE base written to the file (Gemma 3's global layers: 10^6,
    /// apart from its local layers' 10^4).
    fn rope_theta(&self) -> f32 {
        if self.arch == Arch::Gemma3 {
            1e6
        } else {
            10000.0
        }
    }
    /// The configuration kiln should derive from the GGUF file.
    pub fn config(&self, rope_style: RopeStyle) -> ModelConfig {
        let cfg = self.base_config(rope_style);
        if self.arch == Arch::GptOss {
            return ModelConfig { rope_scaling: gpt_oss::TINY_YARN, ..cfg }
                .with_gpt_oss_layers(Some(self.window), None);
        }
        cfg
    }

    fn base_config(&self, rope_style: RopeStyle) -> ModelConfig {
        ModelConfig {
            arch: self.arch,
            vocab_size: self.vocab,
            hidden_size: self.hidden,
            intermediate_size: self.ff,
            num_layers: self.layers,
            num_heads: self.heads,
            num_kv_heads: self.kv_heads,
            head_dim: self.head_dim(),
            max_position: self.ctx,
            rms_norm_eps: 1e-5,
            rope_theta: self.rope_theta(),
            rope_scaling: crate::config::RopeScaling::None,
            rope_style,
            tie_embeddings: self.tied,
            qkv_bias: self.arch == Arch::Qwen2,
            qk_norm: matches!(self.arch, Arch::Qwen3 | Arch::Qwen3Moe | Arch::Gemma3),
            sliding_window: (self.arch == Arch::Gemma3).then_some(self.gemma3_window()),
            global_every: if self.arch == Arch::Gemma3 { 6 } else { 0 },
            rope_local_theta: (self.arch == Arch::Gemma3).then_some(10_000.0),
            moe: self.moe.map(|(experts, top_k)| crate::config::MoeConfig {
                experts,
                top_k,
                expert_ff: self.ff,
                norm_topk: true,
            }),
        }
    }
}

/// Deterministic pseudo-random numbers (splitmix64).
pub struct Rng(u64);
impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [-1, 1).
    pub fn uniform(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
}

/// Weights by canonical name: (row-major shape, values as stored after any quantization).
pub type TinyWeights = BTreeMap<String, (Vec<usize>, Vec<f32>)>;

/// Generates the tensors of a tiny model; 2-D weights are rounded through `spec.ty`.
pub fn tiny_weights(spec: &TinySpec) -> TinyWeights {
    let mut rng = Rng::new(spec.seed);
    let (d, hd, ff) = (spec.hidden, spec.head_dim(), spec.ff);
    let (qd, kvd) = (spec.heads * hd, spec.kv_heads * hd);
    let mut w = TinyWeights::new();
    let mut mat = |name: String, rows: usize, cols: usize, scale: f32, w: &mut TinyWeights| {
        let vals: Vec<f32> = (0..rows * cols).map(|_| rng.uniform() * scale).collect();
        w.insert(name, (vec![rows, cols], round_trip(spec.ty, &vals, cols)));
    };
    mat("token_embd.weight".into(), spec.vocab, d, 1.0, &mut w);
    for i in 0..spec.layers {
        let s = 1.0 / (d as f32).sqrt();
        mat(format!("blk.{i}.attn_q.weight"), qd, d, s * 2.0, &mut w);
        mat(format!("blk.{i}.attn_k.weight"), kvd, d, s * 2.0, &mut w);
        mat(format!("blk.{i}.attn_v.weight"), kvd, d, s, &mut w);
        mat(format!("blk.{i}.attn_output.weight"), d, qd, s, &mut w);
        if let Some((experts, _)) = spec.moe {
            // The router (written as f32, as converters keep it) and the
            // experts, stacked as GGUF's 3-D tensors are.
            mat(format!("blk.{i}.ffn_gate_inp.weight"), experts, d, s * 4.0, &mut w);
            let down_scale = 1.0 / (ff as f32).sqrt();
            // gpt-oss: gate and up wide enough that the clamp at 7 acts.
            let gu = if spec.arch == Arch::GptOss { s * 6.0 } else { s };
            for (n, rows, cols, sc) in [("gate", ff, d, gu), ("up", ff, d, gu), ("down", d, ff, down_scale)] {
                let name = format!("blk.{i}.ffn_{n}_exps.weight");
                mat(name.clone(), experts * rows, cols, sc, &mut w);
                if let Some(t) = w.get_mut(&name) {
                    t.0 = vec![experts, rows, cols];
                }
            }
            continue;
        }
        mat(format!("blk.{i}.ffn_gate.weight"), ff, d, s, &mut w);
        mat(format!("blk.{i}.ffn_up.weight"), ff, d, s, &mut w);
        mat(format!("blk.{i}.ffn_down.weight"), d, ff, 1.0 / (ff as f32).sqrt(), &mut w);
    }
    if !spec.tied {
        mat("output.weight".into(), spec.vocab, d, 1.0 / (d as f32).sqrt(), &mut w);
    }
    let mut vecs = |name: String, n: usize, base: f32, w: &mut TinyWeights| {
        let vals: Vec<f32> = (0..n).map(|_| base + 0.2 * rng.uniform()).collect();
        w.insert(name, (vec![n], vals));
    };
    for i in 0..spec.layers {
        vecs(format!("blk.{i}.attn_norm.weight"), d, 1.0, &mut w);
        // gpt-oss's GGUF names its pre-expert norm `post_attention_norm`.
        let ffn_norm = if spec.arch == Arch::GptOss { "post_attention_norm" } else { "ffn_norm" };
        vecs(format!("blk.{i}.{ffn_norm}.weight"), d, 1.0, &mut w);
        if matches!(spec.arch, Arch::Qwen2 | Arch::GptOss) {
            vecs(format!("blk.{i}.attn_q.bias"), qd, 0.0, &mut w);
            vecs(format!("blk.{i}.attn_k.bias"), kvd, 0.0, &mut w);
            vecs(format!("blk.{i}.attn_v.bias"), kvd, 0.0, &mut w);
        }
        if matches!(spec.arch, Arch::Qwen3 | Arch::Qwen3Moe | Arch::Gemma3) {
            vecs(format!("blk.{i}.attn_q_norm.weight"), hd, 1.0, &mut w);
            vecs(format!("blk.{i}.attn_k_norm.weight"), hd, 1.0, &mut w);
        }
        if spec.arch == Arch::Gemma3 {
            vecs(format!("blk.{i}.post_attention_norm.weight"), d, 1.0, &mut w);
            vecs(format!("blk.{i}.post_ffw_norm.weight"), d, 1.0, &mut w);
        }
    }
    vecs("output_norm.weight".into(), d, 1.0, &mut w);
    if spec.arch == Arch::GptOss {
        gpt_oss::extra_weights(spec, &mut w);
    }
    w
}

pub(crate) fn round_trip(ty: GgmlType, vals: &[f32], cols: usize) -> Vec<f32> {
    let bytes = encode(ty, vals, cols);
    let mut out = vec![0.0; vals.len()];
    let rb = ty.row_bytes(cols).unwrap_or(0);
    for (r, o) in out.chunks_exact_mut(cols).enumerate() {
        quant::dequantize_row(ty, &bytes[r * rb..(r + 1) * rb], o).expect("tiny model dequantize");
    }
    out
}

fn encode(ty: GgmlType, vals: &[f32], cols: usize) -> Vec<u8> {
    let rb = ty.row_bytes(cols).expect("tiny model row fits the type");
    let mut bytes = vec![0u8; rb * (vals.len() / cols)];
    for (r, row) in vals.chunks_exact(cols).enumerate() {
        quant::quantize_row(ty, row, &mut bytes[r * rb..(r + 1) * rb]).expect("tiny model quantize");
    }
    bytes
}

/// Writes a GGUF file of the tiny model (llama-style RoPE permutation is not
/// applied: kiln reads GGUF llama with adjacent-pair RoPE, and the reference
/// uses the same style). `extra` adds metadata (e.g. a tokenizer).
pub fn write_gguf(
    spec: &TinySpec,
    w: &TinyWeights,
    path: &Path,
    extra: &[(String, kiln_gguf::Value)],
) -> Result<(), kiln_gguf::GgufError> {
    let mut g = GgufWriter::new();
    let a = spec.arch_name();
    g.add_metadata("general.architecture", a)?;
    g.add_metadata(format!("{a}.context_length"), spec.ctx as u32)?;
    g.add_metadata(format!("{a}.embedding_length"), spec.hidden as u32)?;
    g.add_metadata(format!("{a}.block_count"), spec.layers as u32)?;
    g.add_metadata(format!("{a}.feed_forward_length"), spec.ff as u32)?;
    g.add_metadata(format!("{a}.attention.head_count"), spec.heads as u32)?;
    g.add_metadata(format!("{a}.attention.head_count_kv"), spec.kv_heads as u32)?;
    g.add_metadata(format!("{a}.attention.layer_norm_rms_epsilon"), 1e-5f32)?;
    g.add_metadata(format!("{a}.rope.freq_base"), spec.rope_theta())?;
    if spec.arch == Arch::Gemma3 {
        g.add_metadata(format!("{a}.attention.key_length"), spec.head_dim() as u32)?;
        g.add_metadata(format!("{a}.attention.sliding_window"), spec.gemma3_window() as u32)?;
    }
    if spec.arch == Arch::GptOss {
        gpt_oss::write_metadata(spec, &mut g)?;
    }
    if matches!(spec.arch, Arch::Qwen3Moe | Arch::GptOss) {
        g.add_metadata(format!("{a}.attention.key_length"), spec.head_dim() as u32)?;
        g.add_metadata(format!("{a}.attention.value_length"), spec.head_dim() as u32)?;
    }
    if let Some((experts, used)) = spec.moe {
        g.add_metadata(format!("{a}.expert_count"), experts as u32)?;
        g.add_metadata(format!("{a}.expert_used_count"), used as u32)?;
        if matches!(spec.arch, Arch::Qwen3Moe | Arch::GptOss) {
            g.add_metadata(format!("{a}.expert_feed_forward_length"), spec.ff as u32)?;
        }
    }
    for (k, v) in extra {
        g.add_metadata(k.clone(), v.clone())?;
    }
    for (name, (shape, vals)) in w {
        let dims: Vec<u64> = shape.iter().rev().map(|&x| x as u64).collect();
        if shape.len() >= 2 && !moe::is_router(name) && !name.ends_with(".bias") {
            let cols = shape[shape.len() - 1];
            g.add_tensor(name.clone(), &dims, spec.ty, encode(spec.ty, vals, cols))?;
        } else {
            g.add_f32_tensor(name.clone(), &dims, vals)?;
        }
    }
    g.write_to(path)
}

pub(crate) fn matvec(w: &[f32], rows: usize, cols: usize, x: &[f32]) -> Vec<f32> {
    (0..rows)
        .map(|r| w[r * cols..(r + 1) * cols].iter().zip(x).map(|(a, b)| (*a as f64) * (*b as f64)).sum::<f64>() as f32)
        .collect()
}

pub(crate) fn rms(x: &[f32], w: &[f32], eps: f32) -> Vec<f32> {
    let ms = x.iter().map(|v| (*v as f64).powi(2)).sum::<f64>() / x.len() as f64;
    let s = 1.0 / (ms + eps as f64).sqrt();
    x.iter().zip(w).map(|(a, b)| (*a as f64 * s) as f32 * b).collect()
}

/// Dense reference forward of the whole token sequence; logits at every
/// position. K and V are rounded to `f16` as the KV cache stores them;
/// everything else is exact up to `f32` storage of intermediates.
pub fn reference_forward(cfg: &ModelConfig, w: &TinyWeights, tokens: &[u32]) -> Vec<Vec<f32>> {
    let g = |n: &str| &w[n].1;
    let head = if cfg.tie_embeddings { "token_embd.weight" } else { "output.weight" };
    reference_hidden(cfg, w, tokens).iter().map(|h| matvec(g(head), cfg.vocab_size, cfg.hidden_size, h)).collect()
}

/// [`reference_forward`] up to the final norm: every position's normed
/// last-layer row (what a decoder embedder pools).
pub fn reference_hidden(cfg: &ModelConfig, w: &TinyWeights, tokens: &[u32]) -> Vec<Vec<f32>> {
    if cfg.arch == Arch::GptOss {
        return gpt_oss::reference_hidden(cfg, w, tokens);
    }
    let g = |n: &str| &w[n].1;
    let (d, hd, nh, nkv) = (cfg.hidden_size, cfg.head_dim, cfg.num_heads, cfg.num_kv_heads);
    let desc = kiln_backend::RopeDesc {
        style: cfg.rope_style,
        rot_dim: hd,
        theta: cfg.rope_theta,
        max_pos: tokens.len() + 1,
        freq_factors: cfg.rope_scaling.freq_factors(cfg.rope_theta, hd),
        scale: cfg.rope_scaling.position_scale(),
        attn_factor: cfg.rope_scaling.attn_factor(),
    };
    let global_rope = Rope::from_desc(&desc);
    let local_theta = cfg.rope_local_theta.unwrap_or(cfg.rope_theta);
    let local_rope = Rope::from_desc(&kiln_backend::RopeDesc {
        theta: local_theta,
        freq_factors: None,
        scale: 1.0,
        attn_factor: 1.0,
        ..desc
    });
    let gemma = cfg.arch == crate::Arch::Gemma3;
    let pool = kiln_kernels::ThreadPool::new(1);
    let embed_scale = if gemma { (d as f32).sqrt() } else { 1.0 };
    let mut xs: Vec<Vec<f32>> = tokens
        .iter()
        .map(|&t| {
            g("token_embd.weight")[t as usize * d..(t as usize + 1) * d].iter().map(|v| v * embed_scale).collect()
        })
        .collect();
    for l in 0..cfg.num_layers {
        let p = |s: &str| format!("blk.{l}.{s}");
        let global = !gemma || (l + 1) % cfg.global_every.max(1) == 0;
        let rope = if global { &global_rope } else { &local_rope };
        // Keys a query at `pos` sees: its local layers' window, or all.
        let first_key = |pos: usize| match cfg.sliding_window.filter(|_| gemma && !global) {
            Some(w) => (pos + 1).saturating_sub(w),
            None => 0,
        };
        let mut ks = Vec::new();
        let mut vs = Vec::new();
        let mut qs = Vec::new();
        for (pos, x) in xs.iter().enumerate() {
            let h = rms(x, g(&p("attn_norm.weight")), cfg.rms_norm_eps);
            let mut q = matvec(g(&p("attn_q.weight")), nh * hd, d, &h);
            let mut k = matvec(g(&p("attn_k.weight")), nkv * hd, d, &h);
            let mut v = matvec(g(&p("attn_v.weight")), nkv * hd, d, &h);
            if cfg.qkv_bias {
                for (a, b) in q.iter_mut().zip(g(&p("attn_q.bias"))) {
                    *a += b;
                }
                for (a, b) in k.iter_mut().zip(g(&p("attn_k.bias"))) {
                    *a += b;
                }
                for (a, b) in v.iter_mut().zip(g(&p("attn_v.bias"))) {
                    *a += b;
                }
            }
            if cfg.qk_norm {
                q = q.chunks(hd).flat_map(|c| rms(c, g(&p("attn_q_norm.weight")), cfg.rms_norm_eps)).collect();
                k = k.chunks(hd).flat_map(|c| rms(c, g(&p("attn_k_norm.weight")), cfg.rms_norm_eps)).collect();
            }
            rope.apply(&pool, &mut q, &[pos as u32], nh, hd);
            rope.apply(&pool, &mut k, &[pos as u32], nkv, hd);
            // The KV cache stores f16: the reference rounds K and V the same way.
            let f16 = |x: Vec<f32>| x.into_iter().map(|v| half::f16::from_f32(v).to_f32()).collect::<Vec<f32>>();
            qs.push(q);
            ks.push(f16(k));
            vs.push(f16(v));
        }
        for (pos, x) in xs.iter_mut().enumerate() {
            let mut attn = vec![0f32; nh * hd];
            for h in 0..nh {
                let kvh = h / (nh / nkv);
                let q = &qs[pos][h * hd..(h + 1) * hd];
                let lo = first_key(pos);
                let sc: Vec<f64> = (lo..=pos)
                    .map(|j| {
                        q.iter()
                            .zip(&ks[j][kvh * hd..(kvh + 1) * hd])
                            .map(|(a, b)| (*a as f64) * (*b as f64))
                            .sum::<f64>()
                            / (hd as f64).sqrt()
                    })
                    .collect();
                let m = sc.iter().cloned().fold(f64::MIN, f64::max);
                let z: f64 = sc.iter().map(|s| (s - m).exp()).sum();
                for (j, s) in (lo..).zip(&sc) {
                    let pj = (s - m).exp() / z;
                    for e in 0..hd {
                        attn[h * hd + e] += (pj * vs[j][kvh * hd + e] as f64) as f32;
                    }
                }
            }
            let mut o = matvec(g(&p("attn_output.weight")), d, nh * hd, &attn);
            if gemma {
                o = rms(&o, g(&p("post_attention_norm.weight")), cfg.rms_norm_eps);
            }
            for (a, b) in x.iter_mut().zip(&o) {
                *a += b;
            }
            let h = rms(x, g(&p("ffn_norm.weight")), cfg.rms_norm_eps);
            if let Some(m) = &cfg.moe {
                let out = moe::reference_moe(m, d, w, l, pos, &h);
                for (a, b) in x.iter_mut().zip(&out) {
                    *a += b;
                }
                continue;
            }
            let gt = matvec(g(&p("ffn_gate.weight")), cfg.intermediate_size, d, &h);
            let up = matvec(g(&p("ffn_up.weight")), cfg.intermediate_size, d, &h);
            let act: Vec<f32> = if gemma {
                let gelu = |x: f64| {
                    0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x)).tanh())
                };
                gt.iter().zip(&up).map(|(a, b)| (gelu(f64::from(*a)) * f64::from(*b)) as f32).collect()
            } else {
                gt.iter().zip(&up).map(|(a, b)| a / (1.0 + (-a).exp()) * b).collect()
            };
            let mut dn = matvec(g(&p("ffn_down.weight")), d, cfg.intermediate_size, &act);
            if gemma {
                dn = rms(&dn, g(&p("post_ffw_norm.weight")), cfg.rms_norm_eps);
            }
            for (a, b) in x.iter_mut().zip(&dn) {
                *a += b;
            }
        }
    }
    xs.iter().map(|x| rms(x, g("output_norm.weight"), cfg.rms_norm_eps)).collect()
}

/// GPT-2's reversible byte → printable-char map (a fact of the byte-level BPE format).
fn byte_to_char(b: u8) -> char {
    let printable = (b'!'..=b'~').contains(&b) || (0xA1..=0xAC).contains(&b) || (0xAE..=0xFF).contains(&b);
    if printable {
        return char::from(b);
    }
    let mut n = 0u32;
    for x in 0..b {
        let p = (b'!'..=b'~').contains(&x) || (0xA1..=0xAC).contains(&x) || (0xAE..=0xFF).contains(&x);
        if !p {
            n += 1;
        }
    }
    char::from_u32(256 + n).unwrap_or('?')
}

/// Special tokens of the tiny chat tokenizer, after the 256 byte tokens.
pub const TINY_SPECIALS: [&str; 3] = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"];

/// Metadata of a tiny byte-level BPE tokenizer (256 byte tokens, a few
/// merges, 3 specials, ChatML template): vocab size 256 + merges + 3.
pub fn tiny_tokenizer_metadata() -> (usize, Vec<(String, kiln_gguf::Value)>) {
    let template = "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
    tokenizer_metadata(&TINY_SPECIALS, TINY_SPECIALS.len() - 1, template)
}

/// Special tokens of the tiny harmony tokenizer (gpt-oss's markers), after
/// the 256 byte tokens and the merges.
pub const TINY_HARMONY_SPECIALS: [&str; 8] =
    ["<|endoftext|>", "<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|return|>", "<|call|>"];

/// [`tiny_tokenizer_metadata`] with harmony's special tokens
/// ([`TINY_HARMONY_SPECIALS`], EOS `<|return|>`) and a plain harmony
/// template (`<|start|>ROLE<|message|>TEXT<|end|>` per message, the
/// generation prompt `<|start|>assistant`): the vocabulary alone tells kiln
/// the model writes harmony channels and calls.
pub fn tiny_harmony_tokenizer_metadata() -> (usize, Vec<(String, kiln_gguf::Value)>) {
    let template = "{% for m in messages %}{{ '<|start|>' + m['role'] + '<|message|>' + m['content'] + '<|end|>' }}{% endfor %}{% if add_generation_prompt %}{{ '<|start|>assistant' }}{% endif %}";
    tokenizer_metadata(&TINY_HARMONY_SPECIALS, 6, template)
}

/// The tiny tokenizer with `specials` after the merges, the first of them
/// BOS and `specials[eos]` EOS.
fn tokenizer_metadata(specials: &[&str], eos: usize, template: &str) -> (usize, Vec<(String, kiln_gguf::Value)>) {
    use kiln_gguf::Value;
    let mut tokens: Vec<String> = (0..=255u8).map(|b| byte_to_char(b).to_string()).collect();
    let sp = byte_to_char(b' ');
    let merges: Vec<String> = vec![format!("{sp} t"), "h e".into(), "i n".into(), format!("{sp} a")];
    for m in &merges {
        tokens.push(m.replace(' ', ""));
    }
    let mut types = vec![1i32; tokens.len()];
    let first_special = tokens.len();
    for s in specials {
        tokens.push(s.to_string());
        types.push(3);
    }
    let n = tokens.len();
    let md = vec![
        ("tokenizer.ggml.model".to_string(), Value::from("gpt2")),
        ("tokenizer.ggml.pre".to_string(), Value::from("gpt-2")),
        ("tokenizer.ggml.tokens".to_string(), Value::from(kiln_gguf::Array::String(tokens))),
        ("tokenizer.ggml.token_type".to_string(), Value::from(kiln_gguf::Array::I32(types))),
        ("tokenizer.ggml.merges".to_string(), Value::from(kiln_gguf::Array::String(merges))),
        ("tokenizer.ggml.bos_token_id".to_string(), Value::from(first_special as u32)),
        ("tokenizer.ggml.eos_token_id".to_string(), Value::from((first_special + eos) as u32)),
        ("tokenizer.ggml.add_bos_token".to_string(), Value::from(false)),
        ("tokenizer.chat_template".to_string(), Value::from(template)),
    ];
    (n, md)
}

/// Writes a tiny llama model with a working tokenizer and chat template to
/// `path` (for engine, server and bench tests). Returns its spec.
pub fn write_tiny_chat_model(path: &Path, ty: GgmlType, ctx: usize) -> Result<TinySpec, kiln_gguf::GgufError> {
    let (vocab, md) = tiny_tokenizer_metadata();
    let spec = TinySpec { vocab, ctx, ..TinySpec::llama(ty) };
    write_gguf(&spec, &tiny_weights(&spec), path, &md)?;
    Ok(spec)
}

/// [`write_tiny_chat_model`] with the shape of `base` (its vocabulary is the
/// tokenizer's): e.g. a head dimension of 32 for quantized KV caches.
pub fn write_tiny_chat_model_like(path: &Path, base: TinySpec) -> Result<TinySpec, kiln_gguf::GgufError> {
    let (vocab, md) = tiny_tokenizer_metadata();
    let spec = TinySpec { vocab, ..base };
    write_gguf(&spec, &tiny_weights(&spec), path, &md)?;
    Ok(spec)
}
