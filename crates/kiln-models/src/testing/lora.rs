//! Tiny random LoRA adapters for tests and benchmarks: written as PEFT
//! directories or llama.cpp GGUF LoRA files, and the float64 reference of
//! a model with them merged (`W + scale·(alpha/r)·B·A`).

use std::collections::BTreeMap;
use std::path::Path;

use kiln_gguf::{GgmlType, GgufWriter};
use kiln_kernels::ops::RopeStyle;

use super::{Rng, TinyWeights};
use crate::config::{Arch, ModelConfig};
use crate::lora::{permute_rows, Proj};

/// A random adapter: factors per (layer, projection) in Hugging Face row
/// order, with PEFT's `alpha` and rsLoRA flag.
#[derive(Debug, Clone)]
pub struct TinyLora {
    pub rank: usize,
    pub alpha: f32,
    pub rslora: bool,
    /// `A` (`rank × cols`) and `B` (`rows × rank`), row-major.
    pub targets: BTreeMap<(usize, Proj), (Vec<f32>, Vec<f32>)>,
}

impl TinyLora {
    /// Random factors of `rank` for `projs` of every layer of a model of
    /// `cfg` (`b_zero`: B is all zeros, the delta of a fresh adapter).
    pub fn random(cfg: &ModelConfig, rank: usize, projs: &[Proj], seed: u64, b_zero: bool) -> Self {
        let mut rng = Rng::new(seed);
        let mut targets = BTreeMap::new();
        for layer in 0..cfg.num_layers {
            for &p in projs {
                let (rows, cols) = p.shape(cfg);
                let sa = 1.0 / (cols as f32).sqrt();
                let a: Vec<f32> = (0..rank * cols).map(|_| rng.uniform() * sa).collect();
                let b: Vec<f32> =
                    (0..rows * rank).map(|_| if b_zero { 0.0 } else { rng.uniform() * 0.5 / rank as f32 }).collect();
                targets.insert((layer, p), (a, b));
            }
        }
        Self { rank, alpha: 2.0 * rank as f32, rslora: false, targets }
    }

    /// The scale PEFT applies.
    pub fn scale(&self) -> f32 {
        if self.rslora {
            self.alpha / (self.rank as f32).sqrt()
        } else {
            self.alpha / self.rank as f32
        }
    }

    /// Writes a PEFT directory (`adapter_config.json`,
    /// `adapter_model.safetensors`).
    pub fn write_peft(&self, dir: &Path) -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        let mut mods: Vec<&str> =
            self.targets.keys().map(|(_, p)| p.hf_module().rsplit('.').next().unwrap_or("")).collect();
        mods.sort();
        mods.dedup();
        let cfg = serde_json::json!({
            "peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": "tiny",
            "r": self.rank, "lora_alpha": self.alpha, "use_rslora": self.rslora, "lora_dropout": 0.0,
            "bias": "none", "fan_in_fan_out": false, "target_modules": mods, "modules_to_save": null,
            "rank_pattern": {}, "alpha_pattern": {}, "use_dora": false,
        });
        std::fs::write(dir.join("adapter_config.json"), serde_json::to_string_pretty(&cfg)?)?;
        let mut named: Vec<(String, Vec<usize>, &[f32])> = Vec::new();
        for ((layer, p), (a, b)) in &self.targets {
            let base = format!("base_model.model.model.layers.{layer}.{}", p.hf_module());
            named.push((format!("{base}.lora_A.weight"), vec![self.rank, a.len() / self.rank], a));
            named.push((format!("{base}.lora_B.weight"), vec![b.len() / self.rank, self.rank], b));
        }
        super::encoder::write_f32_safetensors(&named, &dir.join("adapter_model.safetensors"))
    }

    /// Writes a llama.cpp GGUF LoRA file for a model of `cfg` (`alpha`
    /// as PEFT's, and for llama the Q/K rows of B in the converter's
    /// order), with the factors in `ty`.
    pub fn write_gguf(&self, cfg: &ModelConfig, path: &Path, ty: GgmlType) -> Result<(), kiln_gguf::GgufError> {
        let mut g = GgufWriter::new();
        let arch = match cfg.arch {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
            Arch::Qwen3Moe => "qwen3moe",
            Arch::Gemma3 => "gemma3",
            Arch::GptOss => "gpt-oss",
            Arch::Bert | Arch::NomicBert => "bert",
        };
        g.add_metadata("general.architecture", arch)?;
        g.add_metadata("general.type", "adapter")?;
        g.add_metadata("adapter.type", "lora")?;
        // llama.cpp has no rsLoRA: its scale is alpha/r.
        let alpha = if self.rslora { self.scale() * self.rank as f32 } else { self.alpha };
        g.add_metadata("adapter.lora.alpha", alpha)?;
        for ((layer, p), (a, b)) in &self.targets {
            let (rows, cols) = p.shape(cfg);
            let b = self.b_in_file_order(cfg, *p, b, cfg.arch == Arch::Llama);
            let name = format!("blk.{layer}.{}.weight", p.gguf_stem());
            let enc = |vals: &[f32], c: usize| super::encode(ty, vals, c);
            g.add_tensor(format!("{name}.lora_a"), &[cols as u64, self.rank as u64], ty, enc(a, cols))?;
            g.add_tensor(format!("{name}.lora_b"), &[self.rank as u64, rows as u64], ty, enc(&b, self.rank))?;
        }
        g.write_to(path)
    }

    fn b_in_file_order(&self, cfg: &ModelConfig, p: Proj, b: &[f32], permuted: bool) -> Vec<f32> {
        if permuted && matches!(p, Proj::Q | Proj::K) {
            let heads = if p == Proj::Q { cfg.num_heads } else { cfg.num_kv_heads };
            permute_rows(b, self.rank, heads, cfg.head_dim, true)
        } else {
            b.to_vec()
        }
    }

    /// `w` with every adapter delta merged in float64, at `scale` times
    /// the adapter's own (B's Q/K rows in the model's order).
    pub fn merged(&self, cfg: &ModelConfig, w: &TinyWeights, scale: f32) -> TinyWeights {
        let mut out = w.clone();
        let s = f64::from(self.scale()) * f64::from(scale);
        for ((layer, p), (a, b)) in &self.targets {
            let b = self.b_in_file_order(cfg, *p, b, cfg.rope_style == RopeStyle::Normal);
            let (rows, cols) = p.shape(cfg);
            let name = format!("blk.{layer}.{}.weight", p.gguf_stem());
            let Some((_, vals)) = out.get_mut(&name) else { continue };
            for o in 0..rows {
                for c in 0..cols {
                    let d: f64 =
                        (0..self.rank).map(|r| f64::from(b[o * self.rank + r]) * f64::from(a[r * cols + c])).sum();
                    vals[o * cols + c] = (f64::from(vals[o * cols + c]) + s * d) as f32;
                }
            }
        }
        out
    }
}
