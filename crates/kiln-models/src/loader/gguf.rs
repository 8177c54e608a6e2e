//! GGUF files (parsed and validated by `kiln-gguf`), and the mapping of their
//! metadata into [`ModelConfig`].

use std::path::{Path, PathBuf};
use std::sync::Arc;

use kiln_gguf::{GgufFile, Metadata};
use kiln_kernels::ops::RopeStyle;

use super::TensorSource;
use crate::config::{Arch, ModelConfig, MoeConfig, RopeScaling};
use crate::error::{ModelError, Result};
use crate::weights::{RawTensor, SharedBytes};

struct FileBytes(GgufFile);
impl AsRef<[u8]> for FileBytes {
    fn as_ref(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

/// The tensors of one GGUF file.
pub struct GgufSource {
    file: Arc<FileBytes>,
    path: PathBuf,
}

impl GgufSource {
    /// Opens and validates a GGUF file.
    pub fn open(path: &Path) -> Result<Self> {
        let file = GgufFile::open(path)?;
        Ok(Self::from_file(file, path.to_path_buf()))
    }
    /// Wraps an already parsed file.
    pub fn from_file(file: GgufFile, path: PathBuf) -> Self {
        Self { file: Arc::new(FileBytes(file)), path }
    }
    /// The parsed file (metadata for the tokenizer and chat template).
    pub fn file(&self) -> &GgufFile {
        &self.file.0
    }

    /// The model configuration from the metadata.
    pub fn config(&self) -> Result<ModelConfig> {
        let meta = self.file.0.metadata();
        let bad = |e: kiln_gguf::GgufError| ModelError::Format { path: self.path.clone(), msg: e.to_string() };
        let arch_name = meta.arch().map_err(bad)?.to_string();
        let arch = Arch::parse(&arch_name)?;
        let get = |k: &str| -> Result<usize> { Ok(meta.arch_u32(k).map_err(bad)? as usize) };
        let opt = |k: &str| -> Result<Option<usize>> { Ok(meta.opt_arch_u32(k).map_err(bad)?.map(|v| v as usize)) };
        let hidden = get("embedding_length")?;
        let heads = get("attention.head_count")?;
        let embd = self
            .file
            .0
            .tensor("token_embd.weight")
            .ok_or_else(|| ModelError::MissingTensor { path: self.path.clone(), name: "token_embd.weight".into() })?;
        let vocab = embd.dims.get(1).copied().unwrap_or(0) as usize;
        let head_dim = match opt("attention.key_length")? {
            Some(k) => k,
            None if heads > 0 => hidden / heads,
            None => 0,
        };
        let cfg = ModelConfig {
            arch,
            vocab_size: vocab,
            hidden_size: hidden,
            // A qwen3moe file may give only its experts' width.
            intermediate_size: opt("feed_forward_length")?.or(opt("expert_feed_forward_length")?).ok_or_else(|| {
                bad(kiln_gguf::GgufError::MissingKey { key: format!("{arch_name}.feed_forward_length") })
            })?,
            num_layers: get("block_count")?,
            num_heads: heads,
            num_kv_heads: opt("attention.head_count_kv")?.unwrap_or(heads),
            head_dim,
            max_position: opt("context_length")?.unwrap_or(2048),
            rms_norm_eps: meta.opt_arch_f32("attention.layer_norm_rms_epsilon").map_err(bad)?.unwrap_or(1e-5),
            rope_theta: meta.opt_arch_f32("rope.freq_base").map_err(bad)?.unwrap_or(10000.0),
            rope_scaling: rope_scaling(meta, &arch_name)
                .map_err(|m| ModelError::Format { path: self.path.clone(), msg: m })?,
            // The GGUF converter permutes llama Q/K so pairs are adjacent;
            // Qwen files keep the Hugging Face (half-split) layout.
            rope_style: if arch == Arch::Llama { RopeStyle::Normal } else { RopeStyle::Neox },
            tie_embeddings: self.file.0.tensor("output.weight").is_none(),
            qkv_bias: arch == Arch::Qwen2,
            qk_norm: matches!(arch, Arch::Qwen3 | Arch::Qwen3Moe | Arch::Gemma3),
            sliding_window: None,
            global_every: 0,
            rope_local_theta: None,
            moe: moe_config(meta, arch).map_err(|m| ModelError::Format { path: self.path.clone(), msg: m })?,
        };
        // Gemma 3 as llama.cpp reads it: every sixth layer global, the others
        // local with a RoPE base of 10 000.
        let cfg = match arch {
            Arch::Gemma3 => cfg.with_gemma3_layers(opt("attention.sliding_window")?, 6, 10_000.0),
            // gpt-oss as llama.cpp reads it: even layers local, odd global.
            Arch::GptOss => {
                if meta.get(&format!("{arch_name}.attention.sliding_window_pattern")).is_some() {
                    return Err(ModelError::Format {
                        path: self.path.clone(),
                        msg: "gpt-oss with attention.sliding_window_pattern is not supported (kiln runs the alternating pattern)".into(),
                    });
                }
                let local_theta = meta.opt_arch_f32("rope.freq_base_swa").map_err(bad)?;
                cfg.with_gpt_oss_layers(opt("attention.sliding_window")?, local_theta)
            }
            _ => cfg,
        };
        cfg.validate()?;
        Ok(cfg)
    }
}

/// The experts of a mixture-of-experts file (`{arch}.expert_count` > 0):
/// Mixtral-style `llama` files (each expert `feed_forward_length` wide) and
/// `qwen3moe` and `gpt-oss` (`expert_feed_forward_length`). All weigh the top experts by
/// their softmax renormalized to 1, as llama.cpp runs them; what kiln does
/// not run (shared experts, a weight scale) is an error naming it.
fn moe_config(meta: &Metadata, arch: Arch) -> std::result::Result<Option<MoeConfig>, String> {
    let u32_of = |k: &str| meta.opt_arch_u32(k).map_err(|e| e.to_string()).map(|v| v.map(|v| v as usize));
    let experts = u32_of("expert_count")?.unwrap_or(0);
    if experts == 0 {
        return Ok(None);
    }
    if !matches!(arch, Arch::Llama | Arch::Qwen3Moe | Arch::GptOss) {
        return Err(format!("experts in a {arch:?} model are not supported"));
    }
    if u32_of("expert_shared_feed_forward_length")?.is_some_and(|n| n > 0) {
        return Err("shared experts (expert_shared_feed_forward_length) are not supported".into());
    }
    if let Some(s) = meta.opt_arch_f32("expert_weights_scale").map_err(|e| e.to_string())? {
        if s != 0.0 && s != 1.0 {
            return Err(format!("expert_weights_scale {s} is not supported"));
        }
    }
    let top_k = u32_of("expert_used_count")?.ok_or("expert_count without expert_used_count")?;
    let ff = u32_of("feed_forward_length")?.unwrap_or(0);
    // As llama.cpp: a `llama` file's experts are `feed_forward_length` wide.
    let expert_ff = match (arch, u32_of("expert_feed_forward_length")?) {
        (Arch::Qwen3Moe | Arch::GptOss, Some(n)) => n,
        (Arch::GptOss, None) => return Err("gpt-oss without expert_feed_forward_length".into()),
        (Arch::Qwen3Moe, None) => ff.checked_div(top_k).unwrap_or(0),
        _ => ff,
    };
    Ok(Some(MoeConfig { experts, top_k, expert_ff, norm_topk: true }))
}

/// The RoPE scaling of the metadata (`{arch}.rope.scaling.*`); a type kiln
/// does not implement is an error (positions would be wrong). Llama 3.1's
/// frequency smoothing comes in a GGUF as the `rope_freqs.weight` tensor.
fn rope_scaling(meta: &Metadata, arch: &str) -> std::result::Result<RopeScaling, String> {
    let key = |k: &str| format!("{arch}.rope.scaling.{k}");
    let f32_of = |k: &str| meta.opt_f32(&key(k)).map_err(|e| e.to_string());
    let ty = meta.opt_str(&key("type")).map_err(|e| e.to_string())?;
    let factor = f32_of("factor")?;
    Ok(match (ty, factor) {
        (None | Some("none"), _) => RopeScaling::None,
        (Some("linear"), Some(factor)) => RopeScaling::Linear { factor },
        (Some("yarn"), Some(factor)) => {
            let original = meta.opt_u32(&key("original_context_length")).map_err(|e| e.to_string())?;
            RopeScaling::Yarn {
                factor,
                original_max_position: original.ok_or("YaRN scaling without rope.scaling.original_context_length")?
                    as usize,
                beta_fast: f32_of("yarn_beta_fast")?.unwrap_or(32.0),
                beta_slow: f32_of("yarn_beta_slow")?.unwrap_or(1.0),
                attn_factor: f32_of("attn_factor")?.unwrap_or_else(|| RopeScaling::yarn_mscale(factor)),
            }
        }
        (Some(t @ ("linear" | "yarn")), None) => return Err(format!("{t} RoPE scaling without rope.scaling.factor")),
        (Some(other), _) => {
            return Err(format!("RoPE scaling '{other}' is not supported (kiln runs none, linear and yarn)"))
        }
    })
}

impl TensorSource for GgufSource {
    fn get(&self, name: &str) -> Result<Option<RawTensor>> {
        let Some(info) = self.file.0.tensor(name) else {
            return Ok(None);
        };
        let range = info.data_range();
        let owner: Arc<dyn AsRef<[u8]> + Send + Sync> = self.file.clone();
        let bytes = SharedBytes::new(owner, range.start, range.len())
            .ok_or_else(|| ModelError::Format {
                path: self.path.clone(),
                msg: format!("tensor '{name}' out of range"),
            })?
            .with_mapped(self.file.0.is_mapped());
        let dims = info.dims.iter().map(|&d| usize::try_from(d).unwrap_or(usize::MAX)).collect();
        Ok(Some(RawTensor { ty: info.ty, dims, bytes }))
    }
    fn path(&self) -> &Path {
        &self.path
    }
}
