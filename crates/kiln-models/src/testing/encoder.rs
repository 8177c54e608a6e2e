//! Tiny random encoders (BERT, XLM-RoBERTa, nomic-bert, a BERT reranker)
//! written as Hugging Face directories or GGUF files, and a float64
//! reference forward that reads the same weights with nothing of the
//! backends' code but dequantization.

use std::path::Path;

use kiln_gguf::{GgmlType, GgufWriter};

use super::{encode, round_trip, Rng, TinyWeights};
use crate::loader::TensorSource;

/// The shape of a tiny encoder.
#[derive(Debug, Clone, Copy)]
pub struct TinyEncoder {
    /// nomic-bert (rotary, SwiGLU, fused QKV, no biases) instead of BERT.
    pub nomic: bool,
    /// XLM-RoBERTa's positions (offset 2) and pair format.
    pub roberta: bool,
    /// With a reranking head (`cls.*`).
    pub rank: bool,
    /// Type of the 2-D weights.
    pub ty: GgmlType,
    pub vocab: usize,
    pub hidden: usize,
    pub heads: usize,
    pub ff: usize,
    pub layers: usize,
    pub max_pos: usize,
    pub seed: u64,
}

impl Default for TinyEncoder {
    fn default() -> Self {
        Self {
            nomic: false,
            roberta: false,
            rank: false,
            ty: GgmlType::F32,
            vocab: 96,
            hidden: 64,
            heads: 4,
            ff: 128,
            layers: 2,
            max_pos: 64,
            seed: 7,
        }
    }
}

impl TinyEncoder {
    fn offset(&self) -> usize {
        if self.roberta {
            2
        } else {
            0
        }
    }

    /// Random weights by canonical name (2-D weights rounded through `ty`).
    pub fn weights(&self) -> TinyWeights {
        let mut rng = Rng::new(self.seed);
        let (d, ff) = (self.hidden, self.ff);
        let mut w = TinyWeights::new();
        let mut put = |name: String, shape: Vec<usize>, scale: f32, centre: f32, w: &mut TinyWeights| {
            let n: usize = shape.iter().product();
            let vals: Vec<f32> = (0..n).map(|_| centre + rng.uniform() * scale).collect();
            let vals = if shape.len() == 2 { round_trip(self.ty, &vals, shape[1]) } else { vals };
            w.insert(name, (shape, vals));
        };
        let s = 1.0 / (d as f32).sqrt();
        put("token_embd.weight".into(), vec![self.vocab, d], 1.0, 0.0, &mut w);
        if !self.nomic {
            put("position_embd.weight".into(), vec![self.max_pos + self.offset(), d], 0.5, 0.0, &mut w);
        }
        let types = if self.roberta { 1 } else { 2 };
        put("token_types.weight".into(), vec![types, d], 0.5, 0.0, &mut w);
        put("token_embd_norm.weight".into(), vec![d], 0.2, 1.0, &mut w);
        put("token_embd_norm.bias".into(), vec![d], 0.1, 0.0, &mut w);
        for i in 0..self.layers {
            let p = |x: &str| format!("blk.{i}.{x}");
            if self.nomic {
                put(p("attn_qkv.weight"), vec![3 * d, d], s * 2.0, 0.0, &mut w);
                put(p("ffn_gate.weight"), vec![ff, d], s, 0.0, &mut w);
            } else {
                for q in ["attn_q", "attn_k", "attn_v"] {
                    put(p(&format!("{q}.weight")), vec![d, d], s * 2.0, 0.0, &mut w);
                    put(p(&format!("{q}.bias")), vec![d], 0.1, 0.0, &mut w);
                }
                put(p("attn_output.bias"), vec![d], 0.1, 0.0, &mut w);
                put(p("ffn_up.bias"), vec![ff], 0.1, 0.0, &mut w);
                put(p("ffn_down.bias"), vec![d], 0.1, 0.0, &mut w);
            }
            put(p("attn_output.weight"), vec![d, d], s, 0.0, &mut w);
            put(p("ffn_up.weight"), vec![ff, d], s, 0.0, &mut w);
            put(p("ffn_down.weight"), vec![d, ff], 1.0 / (ff as f32).sqrt(), 0.0, &mut w);
            for n in ["attn_output_norm", "layer_output_norm"] {
                put(p(&format!("{n}.weight")), vec![d], 0.2, 1.0, &mut w);
                put(p(&format!("{n}.bias")), vec![d], 0.1, 0.0, &mut w);
            }
        }
        if self.rank {
            put("cls.weight".into(), vec![d, d], s, 0.0, &mut w);
            put("cls.bias".into(), vec![d], 0.1, 0.0, &mut w);
            put("cls.output.weight".into(), vec![1, d], s, 0.0, &mut w);
            put("cls.output.bias".into(), vec![1], 0.1, 0.0, &mut w);
        }
        w
    }

    /// Writes a GGUF file as llama.cpp's converter lays one out.
    pub fn write_gguf(&self, w: &TinyWeights, path: &Path) -> Result<(), kiln_gguf::GgufError> {
        self.write_gguf_with(w, path, &[])
    }

    /// [`Self::write_gguf`] with more metadata (a tokenizer: [`Self::gguf_tokenizer`]).
    pub fn write_gguf_with(
        &self,
        w: &TinyWeights,
        path: &Path,
        extra: &[(String, kiln_gguf::Value)],
    ) -> Result<(), kiln_gguf::GgufError> {
        let mut g = GgufWriter::new();
        for (k, v) in extra {
            g.add_metadata(k.clone(), v.clone())?;
        }
        let a = if self.nomic { "nomic-bert" } else { "bert" };
        g.add_metadata("general.architecture", a)?;
        g.add_metadata(format!("{a}.context_length"), self.max_pos as u32)?;
        g.add_metadata(format!("{a}.embedding_length"), self.hidden as u32)?;
        g.add_metadata(format!("{a}.block_count"), self.layers as u32)?;
        g.add_metadata(format!("{a}.feed_forward_length"), self.ff as u32)?;
        g.add_metadata(format!("{a}.attention.head_count"), self.heads as u32)?;
        g.add_metadata(format!("{a}.attention.layer_norm_epsilon"), 1e-12f32)?;
        g.add_metadata(format!("{a}.attention.causal"), false)?;
        g.add_metadata(format!("{a}.pooling_type"), if self.rank { 4u32 } else { 1u32 })?;
        if self.nomic {
            g.add_metadata(format!("{a}.rope.freq_base"), 1000.0f32)?;
        }
        for (name, (shape, vals)) in w {
            // The converter drops RoBERTa's position rows before position 0.
            let (shape, vals) = match name.as_str() {
                "position_embd.weight" if self.offset() > 0 => {
                    (&vec![shape[0] - self.offset(), shape[1]], &vals[self.offset() * shape[1]..].to_vec())
                }
                _ => (shape, vals),
            };
            let dims: Vec<u64> = shape.iter().rev().map(|&x| x as u64).collect();
            if shape.len() == 2 && name != "position_embd.weight" && name != "token_types.weight" {
                g.add_tensor(name.clone(), &dims, self.ty, encode(self.ty, vals, shape[1]))?;
            } else {
                g.add_f32_tensor(name.clone(), &dims, vals)?;
            }
        }
        g.write_to(path)
    }

    /// The reference's view of this model's GGUF file (whose position
    /// table starts at position 0).
    pub fn gguf_ref_shape(&self) -> RefShape {
        RefShape { position_offset: 0, ..self.ref_shape() }
    }

    /// Writes a Hugging Face directory (`config.json`, `model.safetensors`
    /// in f32, HF names under the task model's prefix when `rank`).
    pub fn write_hf_dir(&self, w: &TinyWeights, dir: &Path) -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        if self.nomic {
            return self.write_nomic_dir(w, dir);
        }
        let (arch, model_type, prefix) = match (self.roberta, self.rank) {
            (false, false) => ("BertModel", "bert", ""),
            (false, true) => ("BertForSequenceClassification", "bert", "bert."),
            (true, false) => ("XLMRobertaModel", "xlm-roberta", ""),
            (true, true) => ("XLMRobertaForSequenceClassification", "xlm-roberta", "roberta."),
        };
        let config = format!(
            r#"{{"architectures":["{arch}"],"model_type":"{model_type}","vocab_size":{},"hidden_size":{},
            "intermediate_size":{},"num_hidden_layers":{},"num_attention_heads":{},"max_position_embeddings":{},
            "type_vocab_size":{},"layer_norm_eps":1e-12,"hidden_act":"gelu","pad_token_id":{},
            "position_embedding_type":"absolute"}}"#,
            self.vocab,
            self.hidden,
            self.ff,
            self.layers,
            self.heads,
            self.max_pos + self.offset(),
            if self.roberta { 1 } else { 2 },
            if self.roberta { 1 } else { 0 },
        );
        std::fs::write(dir.join("config.json"), config)?;
        let named: Vec<(String, Vec<usize>, &[f32])> = w
            .iter()
            .map(|(name, (shape, vals))| (hf_encoder_name(name, prefix, self.roberta), shape.clone(), vals.as_slice()))
            .collect();
        write_f32_safetensors(&named, &dir.join("model.safetensors"))
    }
}

impl TinyEncoder {
    /// A nomic-bert directory as nomic-embed-text ships one (its own
    /// config names and tensor names, f32 safetensors).
    fn write_nomic_dir(&self, w: &TinyWeights, dir: &Path) -> std::io::Result<()> {
        assert!(!self.rank && !self.roberta, "nomic-bert has no reranker or RoBERTa form");
        let config = format!(
            r#"{{"architectures":["NomicBertModel"],"model_type":"nomic_bert","vocab_size":{},"n_embd":{},
            "n_head":{},"n_inner":{},"n_layer":{},"n_positions":8192,"max_trained_positions":{},
            "type_vocab_size":2,"layer_norm_epsilon":1e-12,"activation_function":"swiglu","rotary_emb_base":1000,
            "rotary_emb_fraction":1.0,"rotary_emb_interleaved":false,"rotary_scaling_factor":null,"prenorm":false,
            "use_rms_norm":false,"qkv_proj_bias":false,"mlp_fc1_bias":false,"mlp_fc2_bias":false,"causal":false}}"#,
            self.vocab, self.hidden, self.heads, self.ff, self.layers, self.max_pos,
        );
        std::fs::write(dir.join("config.json"), config)?;
        let named: Vec<(String, Vec<usize>, &[f32])> =
            w.iter().map(|(name, (shape, vals))| (nomic_hf_name(name), shape.clone(), vals.as_slice())).collect();
        write_f32_safetensors(&named, &dir.join("model.safetensors"))
    }
}

/// Writes f32 tensors as one safetensors file.
pub(crate) fn write_f32_safetensors(tensors: &[(String, Vec<usize>, &[f32])], path: &Path) -> std::io::Result<()> {
    let bytes: Vec<(String, Vec<usize>, Vec<u8>)> = tensors
        .iter()
        .map(|(n, s, v)| (n.clone(), s.clone(), v.iter().flat_map(|x| x.to_le_bytes()).collect()))
        .collect();
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = bytes
        .iter()
        .map(|(n, s, b)| {
            let view = safetensors::tensor::TensorView::new(safetensors::Dtype::F32, s.clone(), b).expect("view");
            (n.clone(), view)
        })
        .collect();
    let data = safetensors::serialize(views, None).map_err(std::io::Error::other)?;
    std::fs::write(path, data)
}

/// nomic-bert's name of a canonical tensor, written out here independently
/// of the loader's map.
fn nomic_hf_name(name: &str) -> String {
    let fixed = match name {
        "token_embd.weight" => Some("embeddings.word_embeddings.weight"),
        "token_types.weight" => Some("embeddings.token_type_embeddings.weight"),
        "token_embd_norm.weight" => Some("emb_ln.weight"),
        "token_embd_norm.bias" => Some("emb_ln.bias"),
        _ => None,
    };
    if let Some(f) = fixed {
        return f.to_string();
    }
    let rest = name.strip_prefix("blk.").expect("a layer tensor");
    let (layer, part) = rest.split_once('.').expect("blk.N.x");
    let (stem, suffix) = part.rsplit_once('.').expect("x.weight");
    let h = match stem {
        "attn_qkv" => "attn.Wqkv",
        "attn_output" => "attn.out_proj",
        "attn_output_norm" => "norm1",
        "ffn_up" => "mlp.fc11",
        "ffn_gate" => "mlp.fc12",
        "ffn_down" => "mlp.fc2",
        "layer_output_norm" => "norm2",
        other => panic!("no nomic-bert name for {other}"),
    };
    format!("encoder.layers.{layer}.{h}.{suffix}")
}

/// The Hugging Face name of a canonical encoder tensor, written out here
/// independently of the loader's map.
fn hf_encoder_name(name: &str, prefix: &str, roberta: bool) -> String {
    let head = match (name, roberta) {
        ("cls.weight", false) => Some("bert.pooler.dense.weight"),
        ("cls.bias", false) => Some("bert.pooler.dense.bias"),
        ("cls.output.weight", false) => Some("classifier.weight"),
        ("cls.output.bias", false) => Some("classifier.bias"),
        ("cls.weight", true) => Some("classifier.dense.weight"),
        ("cls.bias", true) => Some("classifier.dense.bias"),
        ("cls.output.weight", true) => Some("classifier.out_proj.weight"),
        ("cls.output.bias", true) => Some("classifier.out_proj.bias"),
        _ => None,
    };
    if let Some(h) = head {
        return h.to_string();
    }
    let fixed = match name {
        "token_embd.weight" => Some("embeddings.word_embeddings.weight"),
        "position_embd.weight" => Some("embeddings.position_embeddings.weight"),
        "token_types.weight" => Some("embeddings.token_type_embeddings.weight"),
        "token_embd_norm.weight" => Some("embeddings.LayerNorm.weight"),
        "token_embd_norm.bias" => Some("embeddings.LayerNorm.bias"),
        _ => None,
    };
    if let Some(f) = fixed {
        return format!("{prefix}{f}");
    }
    let rest = name.strip_prefix("blk.").expect("a layer tensor");
    let (layer, part) = rest.split_once('.').expect("blk.N.x");
    let (stem, suffix) = part.rsplit_once('.').expect("x.weight");
    let h = match stem {
        "attn_q" => "attention.self.query",
        "attn_k" => "attention.self.key",
        "attn_v" => "attention.self.value",
        "attn_output" => "attention.output.dense",
        "attn_output_norm" => "attention.output.LayerNorm",
        "ffn_up" => "intermediate.dense",
        "ffn_down" => "output.dense",
        "layer_output_norm" => "output.LayerNorm",
        other => panic!("no HF name for {other}"),
    };
    format!("{prefix}encoder.layer.{layer}.{h}.{suffix}")
}

/// A tensor of `src` as f64 values.
fn tensor(src: &dyn TensorSource, name: &str) -> Vec<f64> {
    let t = src.require(name).expect("tensor");
    let cols = t.dims[0];
    let rows: usize = t.dims[1..].iter().product();
    let rb = t.ty.row_bytes(cols).expect("row bytes");
    let mut out = vec![0f32; cols];
    let mut all = Vec::with_capacity(rows * cols);
    for r in 0..rows {
        kiln_kernels::quant::dequantize_row(t.ty, &t.bytes.as_slice()[r * rb..(r + 1) * rb], &mut out)
            .expect("dequantize");
        all.extend(out.iter().map(|&v| f64::from(v)));
    }
    all
}

fn affine(w: &[f64], b: Option<&[f64]>, x: &[f64]) -> Vec<f64> {
    let cols = x.len();
    w.chunks_exact(cols)
        .enumerate()
        .map(|(r, row)| row.iter().zip(x).map(|(a, b)| a * b).sum::<f64>() + b.map_or(0.0, |b| b[r]))
        .collect()
}

fn layer_norm(x: &[f64], w: &[f64], b: &[f64], eps: f64) -> Vec<f64> {
    let n = x.len() as f64;
    let mean = x.iter().sum::<f64>() / n;
    let var = x.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
    let s = 1.0 / (var + eps).sqrt();
    x.iter().zip(w).zip(b).map(|((v, w), b)| (v - mean) * s * w + b).collect()
}

fn erf64(x: f64) -> f64 {
    // The Maclaurin series where it converges without cancellation; past
    // 2.5 erf is within 4e-4 of ±1, and 1 - erfc with erfc from its
    // Chebyshev fit (relative error 1.2e-7) is exact to ~5e-11.
    if x.abs() > 2.5 {
        let z = x.abs();
        let t = 1.0 / (1.0 + 0.5 * z);
        let poly = -z * z - 1.265_512_23
            + t * (1.000_023_68
                + t * (0.374_091_96
                    + t * (0.096_784_18
                        + t * (-0.186_288_06
                            + t * (0.278_868_07
                                + t * (-1.135_203_98
                                    + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
        return x.signum() * (1.0 - t * poly.exp());
    }
    let mut term = x;
    let mut sum = x;
    let x2 = x * x;
    for n in 1..200 {
        term *= -x2 / n as f64;
        let add = term / (2 * n + 1) as f64;
        sum += add;
        if add.abs() < 1e-18 {
            break;
        }
    }
    sum * 2.0 / std::f64::consts::PI.sqrt()
}

fn rope_neox(x: &mut [f64], pos: usize, hd: usize, theta: f64) {
    let half = hd / 2;
    for h in x.chunks_exact_mut(hd) {
        for i in 0..half {
            let freq = theta.powf(-((2 * i) as f64) / hd as f64);
            let (s, c) = (pos as f64 * freq).sin_cos();
            let (a, b) = (h[i], h[i + half]);
            h[i] = a * c - b * s;
            h[i + half] = a * s + b * c;
        }
    }
}

/// What the reference knows of a model, stated by the test rather than
/// read by kiln's config code.
#[derive(Debug, Clone, Copy)]
pub struct RefShape {
    /// Layers.
    pub layers: usize,
    /// Heads.
    pub heads: usize,
    /// Rows of the position table before position 0 (RoBERTa: 2).
    pub position_offset: usize,
    /// Rotary base (nomic-bert) instead of learned positions.
    pub rope_theta: Option<f64>,
    /// LayerNorm epsilon.
    pub eps: f64,
}

impl TinyEncoder {
    /// The reference's view of this model.
    pub fn ref_shape(&self) -> RefShape {
        RefShape {
            layers: self.layers,
            heads: self.heads,
            position_offset: self.offset(),
            rope_theta: self.nomic.then_some(1000.0),
            eps: 1e-12,
        }
    }
}

/// The last layer's rows of one input (`second_from`: first row of token
/// type 1), in f64, from `src`'s weights (biases where the file has them).
pub fn encoder_reference(
    shape: RefShape,
    src: &dyn TensorSource,
    tokens: &[u32],
    second_from: Option<usize>,
) -> Vec<Vec<f64>> {
    let word_t = src.require("token_embd.weight").expect("embedding");
    let d = word_t.dims[0];
    let (nh, hd) = (shape.heads, d / shape.heads);
    let eps = shape.eps;
    let t = |n: &str| tensor(src, n);
    let opt = |n: &str| src.get(n).expect("read").map(|_| tensor(src, n));
    let word = t("token_embd.weight");
    let pos = opt("position_embd.weight");
    let types = opt("token_types.weight");
    let rope = shape.rope_theta;
    let mut xs: Vec<Vec<f64>> = tokens
        .iter()
        .enumerate()
        .map(|(p, &tok)| {
            let mut x = word[tok as usize * d..(tok as usize + 1) * d].to_vec();
            if rope.is_none() {
                let pe = pos.as_ref().expect("learned positions");
                let r = p + shape.position_offset;
                x.iter_mut().zip(&pe[r * d..(r + 1) * d]).for_each(|(a, b)| *a += b);
            }
            if let Some(ty) = &types {
                let k = usize::from(second_from.is_some_and(|s| p >= s) && ty.len() >= 2 * d);
                x.iter_mut().zip(&ty[k * d..(k + 1) * d]).for_each(|(a, b)| *a += b);
            }
            layer_norm(&x, &t("token_embd_norm.weight"), &t("token_embd_norm.bias"), eps)
        })
        .collect();
    for l in 0..shape.layers {
        let p = |s: &str| format!("blk.{l}.{s}");
        let bias = |s: &str| opt(&p(s));
        let (wq, wk, wv) = match opt(&p("attn_qkv.weight")) {
            Some(f) => (f[..d * d].to_vec(), f[d * d..2 * d * d].to_vec(), f[2 * d * d..].to_vec()),
            None => (t(&p("attn_q.weight")), t(&p("attn_k.weight")), t(&p("attn_v.weight"))),
        };
        let (bq, bk, bv) = (bias("attn_q.bias"), bias("attn_k.bias"), bias("attn_v.bias"));
        let mut qs = Vec::new();
        let mut ks = Vec::new();
        let mut vs = Vec::new();
        for (i, x) in xs.iter().enumerate() {
            let mut q = affine(&wq, bq.as_deref(), x);
            let mut k = affine(&wk, bk.as_deref(), x);
            if let Some(theta) = rope {
                rope_neox(&mut q, i, hd, theta);
                rope_neox(&mut k, i, hd, theta);
            }
            qs.push(q);
            ks.push(k);
            vs.push(affine(&wv, bv.as_deref(), x));
        }
        let (wo, bo) = (t(&p("attn_output.weight")), bias("attn_output.bias"));
        let (up, bup, down, bdown) =
            (t(&p("ffn_up.weight")), bias("ffn_up.bias"), t(&p("ffn_down.weight")), bias("ffn_down.bias"));
        let gate = opt(&p("ffn_gate.weight"));
        for (i, x) in xs.iter_mut().enumerate() {
            let mut attn = vec![0f64; d];
            for h in 0..nh {
                let r = h * hd..(h + 1) * hd;
                let sc: Vec<f64> = ks
                    .iter()
                    .map(|k| {
                        qs[i][r.clone()].iter().zip(&k[r.clone()]).map(|(a, b)| a * b).sum::<f64>() / (hd as f64).sqrt()
                    })
                    .collect();
                let m = sc.iter().cloned().fold(f64::MIN, f64::max);
                let z: f64 = sc.iter().map(|s| (s - m).exp()).sum();
                for (j, s) in sc.iter().enumerate() {
                    let pj = (s - m).exp() / z;
                    for e in r.clone() {
                        attn[e] += pj * vs[j][e];
                    }
                }
            }
            let o = affine(&wo, bo.as_deref(), &attn);
            let sum: Vec<f64> = x.iter().zip(&o).map(|(a, b)| a + b).collect();
            *x = layer_norm(&sum, &t(&p("attn_output_norm.weight")), &t(&p("attn_output_norm.bias")), eps);
            let u = affine(&up, bup.as_deref(), x);
            let h: Vec<f64> = match &gate {
                Some(g) => affine(g, None, x).iter().zip(&u).map(|(g, u)| g / (1.0 + (-g).exp()) * u).collect(),
                None => u.iter().map(|v| 0.5 * v * (1.0 + erf64(v / std::f64::consts::SQRT_2))).collect(),
            };
            let y = affine(&down, bdown.as_deref(), &h);
            let sum: Vec<f64> = x.iter().zip(&y).map(|(a, b)| a + b).collect();
            *x = layer_norm(&sum, &t(&p("layer_output_norm.weight")), &t(&p("layer_output_norm.bias")), eps);
        }
    }
    xs
}

/// The reference score of a reranker from its first row.
pub fn rank_reference(src: &dyn TensorSource, cls: &[f64]) -> f64 {
    let t = |n: &str| tensor(src, n);
    let h: Vec<f64> = match src.get("cls.weight").expect("read") {
        Some(_) => affine(&t("cls.weight"), Some(&t("cls.bias")), cls).iter().map(|v| v.tanh()).collect(),
        None => cls.to_vec(),
    };
    affine(&t("cls.output.weight"), Some(&t("cls.output.bias")), &h)[0]
}

/// Cosine similarity.
pub fn cosine(a: &[f64], b: &[f64]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na: f64 = a.iter().map(|x| x * x).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| x * x).sum::<f64>().sqrt();
    dot / (na * nb)
}

/// The words of the tiny WordPiece vocabulary after its special tokens,
/// letters, `##` letters and digits.
const TINY_WORDS: [&str; 25] = [
    ".", ",", "!", "?", "the", "cat", "dog", "sat", "on", "mat", "hello", "world", "ship", "sea", "sail", "red",
    "blue", "fish", "bird", "tree", "house", "car", "road", "sun", "moon",
];

impl TinyEncoder {
    /// The tiny WordPiece vocabulary (HF form: `##` continuations).
    pub fn tiny_vocab(&self) -> Vec<String> {
        let mut vocab: Vec<String> = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"].map(String::from).to_vec();
        vocab.extend(('a'..='z').map(String::from));
        vocab.extend(('a'..='z').map(|c| format!("##{c}")));
        vocab.extend(('0'..='9').map(String::from));
        vocab.extend(TINY_WORDS.iter().map(|w| w.to_string()));
        vocab.truncate(self.vocab);
        while vocab.len() < self.vocab {
            vocab.push(format!("##w{}", vocab.len()));
        }
        vocab
    }

    /// GGUF metadata of the tiny vocabulary as llama.cpp's converter writes
    /// a BERT one (`bert` model, word starts with U+2581).
    pub fn gguf_tokenizer(&self) -> Vec<(String, kiln_gguf::Value)> {
        let vocab = self.tiny_vocab();
        let tokens: Vec<String> = vocab
            .iter()
            .enumerate()
            .map(|(i, t)| match t.strip_prefix("##") {
                _ if i < 5 => t.clone(),
                Some(c) => c.to_string(),
                None => format!("\u{2581}{t}"),
            })
            .collect();
        let types: Vec<i32> = (0..vocab.len()).map(|i| if i < 5 { 3 } else { 1 }).collect();
        vec![
            ("tokenizer.ggml.model".into(), kiln_gguf::Value::from("bert")),
            ("tokenizer.ggml.tokens".into(), kiln_gguf::Value::from(tokens)),
            ("tokenizer.ggml.token_type".into(), kiln_gguf::Value::from(types)),
            ("tokenizer.ggml.bos_token_id".into(), kiln_gguf::Value::from(2u32)),
            ("tokenizer.ggml.seperator_token_id".into(), kiln_gguf::Value::from(3u32)),
            ("tokenizer.ggml.unknown_token_id".into(), kiln_gguf::Value::from(1u32)),
            ("tokenizer.ggml.padding_token_id".into(), kiln_gguf::Value::from(0u32)),
        ]
    }

    /// GGUF metadata of a tiny SentencePiece Unigram vocabulary (`t5`) as
    /// llama.cpp's converter writes XLM-RoBERTa's: `<s>`, `<pad>`, `</s>`,
    /// `<unk>`, then `▁`, `▁`-words, letters and `▁`-letters with falling
    /// log-probabilities, `<s> … </s>` added. No normalization map.
    pub fn gguf_unigram_tokenizer(&self) -> Vec<(String, kiln_gguf::Value)> {
        let mut tokens: Vec<String> = ["<s>", "<pad>", "</s>", "<unk>", "\u{2581}"].map(String::from).to_vec();
        tokens.extend(TINY_WORDS.iter().map(|w| format!("\u{2581}{w}")));
        tokens.extend(('a'..='z').map(String::from));
        tokens.extend(('a'..='z').map(|c| format!("\u{2581}{c}")));
        tokens.truncate(self.vocab);
        while tokens.len() < self.vocab {
            tokens.push(format!("[PAD{}]", tokens.len()));
        }
        let n = tokens.len();
        let types: Vec<i32> = (0..n)
            .map(|i| {
                if i == 3 {
                    2
                } else if i < 4 || tokens[i].starts_with("[PAD") {
                    3
                } else {
                    1
                }
            })
            .collect();
        let scores: Vec<f32> = (0..n).map(|i| if i < 4 { 0.0 } else { -2.0 - i as f32 * 0.1 }).collect();
        vec![
            ("tokenizer.ggml.model".into(), kiln_gguf::Value::from("t5")),
            ("tokenizer.ggml.tokens".into(), kiln_gguf::Value::from(tokens)),
            ("tokenizer.ggml.token_type".into(), kiln_gguf::Value::from(types)),
            ("tokenizer.ggml.scores".into(), kiln_gguf::Value::from(scores)),
            ("tokenizer.ggml.bos_token_id".into(), kiln_gguf::Value::from(0u32)),
            ("tokenizer.ggml.eos_token_id".into(), kiln_gguf::Value::from(2u32)),
            ("tokenizer.ggml.seperator_token_id".into(), kiln_gguf::Value::from(2u32)),
            ("tokenizer.ggml.unknown_token_id".into(), kiln_gguf::Value::from(3u32)),
            ("tokenizer.ggml.padding_token_id".into(), kiln_gguf::Value::from(1u32)),
            ("tokenizer.ggml.add_bos_token".into(), kiln_gguf::Value::from(true)),
            ("tokenizer.ggml.add_eos_token".into(), kiln_gguf::Value::from(true)),
            ("tokenizer.ggml.add_space_prefix".into(), kiln_gguf::Value::from(true)),
            ("tokenizer.ggml.remove_extra_whitespaces".into(), kiln_gguf::Value::from(true)),
        ]
    }

    /// Writes a BERT WordPiece `tokenizer.json` of exactly `vocab` tokens
    /// (specials, letters, `##` letters, digits, a few words) into `dir`,
    /// with RoBERTa's `<s>`/`</s>` pair template when `roberta`.
    pub fn write_tokenizer(&self, dir: &Path) -> std::io::Result<()> {
        let vocab = self.tiny_vocab();
        let map: serde_json::Map<String, serde_json::Value> =
            vocab.iter().enumerate().map(|(i, t)| (t.clone(), serde_json::json!(i))).collect();
        let (single, pair) = if self.roberta {
            (
                serde_json::json!([{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "[SEP]", "type_id": 0}}]),
                serde_json::json!([{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "[SEP]", "type_id": 0}}, {"SpecialToken": {"id": "[SEP]", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 0}}, {"SpecialToken": {"id": "[SEP]", "type_id": 0}}]),
            )
        } else {
            (
                serde_json::json!([{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "[SEP]", "type_id": 0}}]),
                serde_json::json!([{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "[SEP]", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}, {"SpecialToken": {"id": "[SEP]", "type_id": 1}}]),
            )
        };
        let added: Vec<serde_json::Value> = (0..5)
            .map(|i| serde_json::json!({"id": i, "content": vocab[i], "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}))
            .collect();
        let tok = serde_json::json!({
            "version": "1.0",
            "truncation": {"max_length": 8, "strategy": "LongestFirst", "stride": 0},
            "padding": {"strategy": {"Fixed": 8}, "direction": "Right", "pad_to_multiple_of": null, "pad_id": 0, "pad_type_id": 0, "pad_token": "[PAD]"},
            "added_tokens": added,
            "normalizer": {"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true, "strip_accents": null, "lowercase": true},
            "pre_tokenizer": {"type": "BertPreTokenizer"},
            "post_processor": {"type": "TemplateProcessing", "single": single, "pair": pair,
                "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [2], "tokens": ["[CLS]"]}, "[SEP]": {"id": "[SEP]", "ids": [3], "tokens": ["[SEP]"]}}},
            "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": true},
            "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##", "max_input_chars_per_word": 100, "vocab": map}
        });
        std::fs::write(dir.join("tokenizer.json"), tok.to_string())?;
        std::fs::write(
            dir.join("tokenizer_config.json"),
            r#"{"cls_token":"[CLS]","sep_token":"[SEP]","unk_token":"[UNK]","pad_token":"[PAD]","do_lower_case":true}"#,
        )
    }

    /// A Hugging Face directory with weights and tokenizer: a model kiln
    /// can load and serve.
    pub fn write_servable(&self, dir: &Path) -> std::io::Result<()> {
        self.write_hf_dir(&self.weights(), dir)?;
        self.write_tokenizer(dir)
    }
}
