//! One model configuration, built from a Hugging Face `config.json` or from
//! GGUF metadata.

use serde::Deserialize;

use crate::error::{ModelError, Result};
pub use crate::rope_scaling::RopeScaling;
use kiln_kernels::ops::RopeStyle;

/// Model families kiln implements (one file each under `arch/`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    /// Llama 1/2/3, SmolLM, Mistral (no sliding window): the llama graph.
    Llama,
    /// Qwen2 / Qwen2.5: llama graph + Q/K/V biases.
    Qwen2,
    /// Qwen3 (dense): llama graph + per-head Q/K RMSNorm.
    Qwen3,
    /// Qwen3-MoE: the Qwen3 graph with a mixture-of-experts feed-forward
    /// block ([`MoeConfig`]). Mixtral is [`Arch::Llama`] with experts.
    Qwen3Moe,
    /// Gemma 3 (text): sandwich norms, GeGLU, Q/K norms, scaled
    /// embedding, local (sliding-window) and global layers.
    Gemma3,
    /// gpt-oss: attention sinks, Q/K/V/O biases, alternating sliding-window
    /// and full layers, a mixture of experts with biases and the clamped
    /// SwiGLU, YaRN RoPE (`arch/gpt_oss.rs`; GGUF only).
    GptOss,
    /// BERT-style encoders (BERT, MiniLM, bge, XLM-RoBERTa): learned
    /// positions, post-norm LayerNorm blocks, GELU (`encoder` module).
    Bert,
    /// nomic-bert: rotary positions, SwiGLU, no biases (`encoder` module).
    NomicBert,
}

impl Arch {
    /// Whether this is an encoder (embeddings and reranking, no generation).
    pub fn is_encoder(self) -> bool {
        matches!(self, Self::Bert | Self::NomicBert)
    }

    /// Parses a GGUF `general.architecture` or an HF `architectures[0]` / `model_type`.
    pub fn parse(s: &str) -> Result<Self> {
        Ok(match s {
            // Mixtral checkpoints parse so that `from_hf_json` can say
            // what it refuses (mixtures of experts load from GGUF).
            "llama" | "mistral" | "LlamaForCausalLM" | "MistralForCausalLM" | "MixtralForCausalLM" => Self::Llama,
            "qwen2" | "Qwen2ForCausalLM" => Self::Qwen2,
            "qwen3" | "Qwen3ForCausalLM" => Self::Qwen3,
            "qwen3moe" | "Qwen3MoeForCausalLM" => Self::Qwen3Moe,
            "gemma3" | "gemma3_text" | "Gemma3ForCausalLM" => Self::Gemma3,
            "gpt-oss" | "gpt_oss" | "GptOssForCausalLM" => Self::GptOss,
            "bert"
            | "BertModel"
            | "BertForMaskedLM"
            | "BertForSequenceClassification"
            | "xlm-roberta"
            | "roberta"
            | "XLMRobertaModel"
            | "XLMRobertaForSequenceClassification"
            | "RobertaModel" => Self::Bert,
            "nomic-bert" | "nomic_bert" | "NomicBertModel" => Self::NomicBert,
            other => return Err(ModelError::UnsupportedArch(other.to_string())),
        })
    }
}

/// Everything the forward pass needs to know about a model's shape.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    /// Family.
    pub arch: Arch,
    /// Vocabulary size (rows of the embedding).
    pub vocab_size: usize,
    /// Model width.
    pub hidden_size: usize,
    /// MLP width.
    pub intermediate_size: usize,
    /// Decoder layers.
    pub num_layers: usize,
    /// Query heads.
    pub num_heads: usize,
    /// Key/value heads (GQA).
    pub num_kv_heads: usize,
    /// Dimension of one head.
    pub head_dim: usize,
    /// Context length the model was trained for.
    pub max_position: usize,
    /// RMSNorm epsilon.
    pub rms_norm_eps: f32,
    /// RoPE base frequency.
    pub rope_theta: f32,
    /// RoPE scaling (linear, Llama 3.1, YaRN).
    pub rope_scaling: RopeScaling,
    /// How RoPE pairs dimensions (depends on the file format, see [`RopeStyle`]).
    pub rope_style: RopeStyle,
    /// Output head shares the embedding matrix.
    pub tie_embeddings: bool,
    /// Q/K/V projections have biases (Qwen2).
    pub qkv_bias: bool,
    /// Per-head RMSNorm on Q and K before RoPE (Qwen3, Gemma 3).
    pub qk_norm: bool,
    /// Local layers attend to this many positions back (Gemma 3, gpt-oss).
    pub sliding_window: Option<usize>,
    /// Every `global_every`-th layer is global, the others local (Gemma 3:
    /// 6; gpt-oss: 2; 0: every layer global).
    pub global_every: usize,
    /// RoPE base of the local layers (Gemma 3: 10 000; `None`: `rope_theta`).
    pub rope_local_theta: Option<f32>,
    /// The feed-forward blocks are mixtures of experts (Qwen3-MoE, Mixtral).
    pub moe: Option<MoeConfig>,
}

/// A mixture-of-experts feed-forward block: `top_k` of `experts` gated
/// units per token, weighted by the router's softmax.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MoeConfig {
    /// Experts per layer.
    pub experts: usize,
    /// Experts each token uses.
    pub top_k: usize,
    /// Width of one expert's gated unit.
    pub expert_ff: usize,
    /// The kept experts' weights are scaled to sum to 1 (Mixtral, and
    /// Qwen3-MoE as llama.cpp runs it).
    pub norm_topk: bool,
}

impl MoeConfig {
    /// Checks the counts against each other and against sanity bounds.
    pub fn validate(&self) -> Result<()> {
        let ok = self.experts > 0
            && self.experts <= 1024
            && (1..=self.experts).contains(&self.top_k)
            && self.expert_ff > 0
            && self.expert_ff <= 1 << 18;
        if ok {
            Ok(())
        } else {
            Err(ModelError::Config(format!(
                "{} of {} experts of width {} (1 <= used <= experts <= 1024, width <= 262144)",
                self.top_k, self.experts, self.expert_ff
            )))
        }
    }
}

impl ModelConfig {
    /// Width of the Q projection output.
    pub fn q_dim(&self) -> usize {
        self.num_heads * self.head_dim
    }
    /// Width of the K (and V) projection output.
    pub fn kv_dim(&self) -> usize {
        self.num_kv_heads * self.head_dim
    }
    /// The attention layers' heads, with the 1/√head_dim score scale.
    pub fn attn_shape(&self) -> kiln_backend::AttnShape {
        kiln_backend::AttnShape {
            num_heads: self.num_heads,
            num_kv_heads: self.num_kv_heads,
            head_dim: self.head_dim,
            scale: 1.0 / (self.head_dim as f32).sqrt(),
        }
    }

    /// Checks the invariants the forward pass relies on.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(ModelError::Config(m));
        if self.hidden_size == 0 || self.num_layers == 0 || self.vocab_size == 0 || self.intermediate_size == 0 {
            return bad(format!("zero dimension in {self:?}"));
        }
        if self.num_heads == 0 || self.num_kv_heads == 0 || !self.num_heads.is_multiple_of(self.num_kv_heads) {
            return bad(format!(
                "{} query heads cannot be grouped over {} KV heads",
                self.num_heads, self.num_kv_heads
            ));
        }
        if self.head_dim == 0 || !self.head_dim.is_multiple_of(2) || self.head_dim > 1024 {
            return bad(format!("head_dim {} must be even and at most 1024", self.head_dim));
        }
        // Sanity bounds so a corrupted file cannot ask for absurd buffers.
        let limits = [
            ("hidden_size", self.hidden_size, 1 << 16),
            ("intermediate_size", self.intermediate_size, 1 << 18),
            ("num_layers", self.num_layers, 1024),
            ("num_heads", self.num_heads, 1024),
            ("vocab_size", self.vocab_size, 1 << 22),
            ("max_position", self.max_position, 1 << 24),
        ];
        for (name, v, max) in limits {
            if v > max {
                return bad(format!("{name} = {v} exceeds the supported maximum {max}"));
            }
        }
        self.rope_scaling.validate()?;
        if let Some(m) = &self.moe {
            m.validate()?;
        }
        if self.arch == Arch::Qwen3Moe && self.moe.is_none() {
            return bad("a qwen3moe model without experts".into());
        }
        if self.arch == Arch::GptOss && (self.moe.is_none() || self.sliding_window.is_none_or(|w| w == 0)) {
            return bad("a gpt-oss model needs experts and a sliding window".into());
        }
        let eps_ok = self.rms_norm_eps.is_finite() && self.rms_norm_eps >= 0.0;
        let theta_ok = self.rope_theta.is_finite() && self.rope_theta > 0.0;
        if !(eps_ok && theta_ok) {
            return bad(format!("rms_norm_eps {} / rope_theta {} out of range", self.rms_norm_eps, self.rope_theta));
        }
        Ok(())
    }

    /// Builds the configuration from a Hugging Face `config.json`.
    pub fn from_hf_json(json: &str) -> Result<Self> {
        let hf: HfConfig = serde_json::from_str(json).map_err(|e| ModelError::Config(format!("config.json: {e}")))?;
        let arch_name = hf.architectures.first().cloned().or(hf.model_type.clone()).unwrap_or_default();
        let arch = Arch::parse(&arch_name)?;
        if arch == Arch::GptOss {
            return Err(ModelError::Config(
                "config.json: gpt-oss loads from GGUF files only (its experts are MXFP4 blocks there)".into(),
            ));
        }
        if hf.num_local_experts.or(hf.num_experts).is_some_and(|e| e > 0) {
            return Err(ModelError::Config(format!(
                "config.json: {arch_name} is a mixture of experts; kiln loads those from GGUF files only"
            )));
        }
        let num_heads = hf.num_attention_heads;
        let head_dim = hf.head_dim.unwrap_or(hf.hidden_size.checked_div(num_heads).unwrap_or(0));
        let mut max_position = hf.max_position_embeddings.unwrap_or(2048);
        if let Some(w) = hf.sliding_window.filter(|&w| {
            arch != Arch::Gemma3 && hf.use_sliding_window.unwrap_or(arch == Arch::Llama) && w < max_position
        }) {
            tracing::warn!("model uses a sliding window of {w}; kiln caps the context at {w} tokens");
            max_position = w;
        }
        // transformers 5 writes RoPE settings into `rope_parameters`; older
        // versions use `rope_theta` and `rope_scaling`.
        let scaling = hf.rope_scaling.as_ref().or(hf.rope_parameters.as_ref());
        let rope_scaling = match scaling {
            Some(s) => s.to_scaling(hf.original_max_position_embeddings)?,
            None => RopeScaling::None,
        };
        let rope_theta = hf.rope_theta.or(hf.rope_parameters.as_ref().and_then(|p| p.rope_theta));
        let cfg = Self {
            arch,
            vocab_size: hf.vocab_size,
            hidden_size: hf.hidden_size,
            intermediate_size: hf.intermediate_size,
            num_layers: hf.num_hidden_layers,
            num_heads,
            num_kv_heads: hf.num_key_value_heads.unwrap_or(num_heads),
            head_dim,
            max_position,
            rms_norm_eps: hf.rms_norm_eps.unwrap_or(1e-6),
            rope_theta: rope_theta.unwrap_or(10000.0),
            rope_scaling,
            rope_style: RopeStyle::Neox,
            tie_embeddings: hf.tie_word_embeddings.unwrap_or(false),
            qkv_bias: hf.attention_bias.unwrap_or(arch == Arch::Qwen2),
            qk_norm: arch == Arch::Qwen3,
            sliding_window: None,
            global_every: 0,
            rope_local_theta: None,
            moe: None,
        };
        let cfg = if arch == Arch::Gemma3 { hf.gemma3(cfg)? } else { cfg };
        cfg.validate()?;
        Ok(cfg)
    }

    /// gpt-oss's layers: even layers attend to the last `window` positions,
    /// odd ones to the whole context (as llama.cpp's default pattern of 2);
    /// the local layers' RoPE base is `local_theta` where the file gives one.
    pub fn with_gpt_oss_layers(mut self, window: Option<usize>, local_theta: Option<f32>) -> Self {
        self.qkv_bias = true;
        self.qk_norm = false;
        self.sliding_window = window;
        self.global_every = 2;
        self.rope_local_theta = local_theta;
        self
    }

    /// Whether layer `i` is local (attends to [`ModelConfig::sliding_window`]
    /// positions); every `global_every`-th layer is global.
    pub fn is_local_layer(&self, i: usize) -> bool {
        self.sliding_window.is_some() && self.global_every != 0 && !(i + 1).is_multiple_of(self.global_every)
    }

    /// Gemma 3's layers: local layers attending `window` positions back on
    /// RoPE base `local_theta`, every `global_every`-th layer global (the
    /// window is applied by [`kiln_backend::Backend::attention_masked`];
    /// a backend without it caps the context at the window, where local
    /// and global attention agree: `arch/gemma3.rs`).
    pub fn with_gemma3_layers(mut self, window: Option<usize>, global_every: usize, local_theta: f32) -> Self {
        self.qk_norm = true;
        self.sliding_window = window;
        self.global_every = global_every;
        self.rope_local_theta = Some(local_theta);
        self
    }
}

impl HfConfig {
    /// The Gemma 3 fields of `config.json`; what kiln does not run (logit
    /// soft-capping, another activation, an irregular layer pattern) is an
    /// error that names it.
    fn gemma3(&self, cfg: ModelConfig) -> Result<ModelConfig> {
        let bad = |m: String| Err(ModelError::Config(format!("config.json (Gemma 3): {m}")));
        if let Some(a) = self.hidden_activation.as_deref().filter(|a| *a != "gelu_pytorch_tanh") {
            return bad(format!("hidden_activation '{a}' (kiln runs gelu_pytorch_tanh)"));
        }
        if self.final_logit_softcapping.is_some() || self.attn_logit_softcapping.is_some() {
            return bad("logit soft-capping is not supported".into());
        }
        if let Some(s) = self.query_pre_attn_scalar.filter(|&s| s != cfg.head_dim) {
            return bad(format!("query_pre_attn_scalar {s} differs from head_dim {}", cfg.head_dim));
        }
        let every = match (&self.layer_types, self.sliding_window_pattern) {
            (Some(types), _) => {
                let every = types.iter().position(|t| t == "full_attention").map_or(0, |i| i + 1);
                let regular = types
                    .iter()
                    .enumerate()
                    .all(|(i, t)| (every > 0 && (i + 1) % every == 0) == (t == "full_attention"));
                if !regular {
                    return bad("layer_types is not every n-th layer global".into());
                }
                every
            }
            (None, Some(p)) => p,
            (None, None) => 6,
        };
        let cfg = ModelConfig { tie_embeddings: self.tie_word_embeddings.unwrap_or(true), ..cfg };
        Ok(cfg.with_gemma3_layers(self.sliding_window, every, self.rope_local_base_freq.unwrap_or(10_000.0)))
    }
}

/// The fields of HF `config.json` kiln reads (named exactly as there).
#[derive(Debug, Deserialize)]
struct HfConfig {
    #[serde(default)]
    architectures: Vec<String>,
    model_type: Option<String>,
    vocab_size: usize,
    hidden_size: usize,
    intermediate_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    num_key_value_heads: Option<usize>,
    head_dim: Option<usize>,
    max_position_embeddings: Option<usize>,
    rms_norm_eps: Option<f32>,
    rope_theta: Option<f32>,
    rope_scaling: Option<HfRopeScaling>,
    rope_parameters: Option<HfRopeScaling>,
    original_max_position_embeddings: Option<usize>,
    tie_word_embeddings: Option<bool>,
    attention_bias: Option<bool>,
    sliding_window: Option<usize>,
    use_sliding_window: Option<bool>,
    // Gemma 3.
    sliding_window_pattern: Option<usize>,
    layer_types: Option<Vec<String>>,
    rope_local_base_freq: Option<f32>,
    query_pre_attn_scalar: Option<usize>,
    hidden_activation: Option<String>,
    final_logit_softcapping: Option<f32>,
    attn_logit_softcapping: Option<f32>,
    // Mixtures of experts (refused: GGUF only).
    num_local_experts: Option<usize>,
    num_experts: Option<usize>,
}

/// `rope_scaling` (or transformers 5's `rope_parameters`) as HF writes it.
#[derive(Debug, Deserialize)]
struct HfRopeScaling {
    #[serde(alias = "type")]
    rope_type: Option<String>,
    factor: Option<f32>,
    rope_theta: Option<f32>,
    low_freq_factor: Option<f32>,
    high_freq_factor: Option<f32>,
    original_max_position_embeddings: Option<usize>,
    beta_fast: Option<f32>,
    beta_slow: Option<f32>,
    attention_factor: Option<f32>,
    mscale: Option<f32>,
    mscale_all_dim: Option<f32>,
}

impl HfRopeScaling {
    /// The scaling this describes; a type kiln does not implement is an
    /// error naming it (never silently ignored: positions would be wrong).
    fn to_scaling(&self, top_level_original: Option<usize>) -> Result<RopeScaling> {
        let bad = |m: String| Err(ModelError::Config(format!("config.json rope_scaling: {m}")));
        let need = |v: Option<f32>, name: &str| {
            v.ok_or_else(|| ModelError::Config(format!("config.json rope_scaling: {name} is missing")))
        };
        let original = self.original_max_position_embeddings.or(top_level_original);
        let original = |kind: &str| {
            original.ok_or_else(|| {
                ModelError::Config(format!("config.json rope_scaling: {kind} needs original_max_position_embeddings"))
            })
        };
        Ok(match self.rope_type.as_deref().unwrap_or("default") {
            "default" | "none" => RopeScaling::None,
            "linear" => RopeScaling::Linear { factor: need(self.factor, "factor")? },
            "llama3" => RopeScaling::Llama3 {
                factor: need(self.factor, "factor")?,
                low_freq_factor: need(self.low_freq_factor, "low_freq_factor")?,
                high_freq_factor: need(self.high_freq_factor, "high_freq_factor")?,
                original_max_position: original("llama3")?,
            },
            "yarn" => {
                if self.mscale.is_some() || self.mscale_all_dim.is_some() {
                    return bad("YaRN with mscale / mscale_all_dim (DeepSeek's variant) is not supported".into());
                }
                let factor = need(self.factor, "factor")?;
                RopeScaling::Yarn {
                    factor,
                    original_max_position: original("yarn")?,
                    beta_fast: self.beta_fast.unwrap_or(32.0),
                    beta_slow: self.beta_slow.unwrap_or(1.0),
                    attn_factor: self.attention_factor.unwrap_or_else(|| RopeScaling::yarn_mscale(factor)),
                }
            }
            other => {
                return bad(format!(
                    "rope type '{other}' is not supported (kiln runs default, linear, llama3 and yarn)"
                ))
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qwen2_config_json() {
        let json = r#"{"architectures":["Qwen2ForCausalLM"],"vocab_size":151936,"hidden_size":896,
            "intermediate_size":4864,"num_hidden_layers":24,"num_attention_heads":14,"num_key_value_heads":2,
            "max_position_embeddings":32768,"rms_norm_eps":1e-6,"rope_theta":1000000.0,"tie_word_embeddings":true,
            "sliding_window":32768,"use_sliding_window":false}"#;
        let c = ModelConfig::from_hf_json(json).unwrap();
        assert_eq!(c.arch, Arch::Qwen2);
        assert!(c.qkv_bias && c.tie_embeddings && !c.qk_norm);
        assert_eq!(c.head_dim, 64);
        assert_eq!(c.max_position, 32768);
    }

    #[test]
    fn reads_transformers_5_rope_parameters() {
        let json = r#"{"architectures":["Qwen2ForCausalLM"],"vocab_size":100,"hidden_size":64,
            "intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,
            "rope_parameters":{"rope_theta":1000000.0,"rope_type":"linear","factor":2.0}}"#;
        let c = ModelConfig::from_hf_json(json).unwrap();
        assert_eq!(c.rope_theta, 1e6);
        assert_eq!(c.rope_scaling, RopeScaling::Linear { factor: 2.0 });
    }

    #[test]
    fn reads_llama3_and_yarn_rope_scaling_and_refuses_unknown_types() {
        let with = |scaling: &str| {
            ModelConfig::from_hf_json(&format!(
                r#"{{"architectures":["LlamaForCausalLM"],"vocab_size":100,"hidden_size":64,"intermediate_size":128,
                "num_hidden_layers":2,"num_attention_heads":4,"rope_theta":500000.0,"max_position_embeddings":131072,
                "rope_scaling":{scaling}}}"#
            ))
        };
        let c = with(r#"{"rope_type":"llama3","factor":8.0,"low_freq_factor":1.0,"high_freq_factor":4.0,"original_max_position_embeddings":8192}"#).unwrap();
        assert_eq!(
            c.rope_scaling,
            RopeScaling::Llama3 {
                factor: 8.0,
                low_freq_factor: 1.0,
                high_freq_factor: 4.0,
                original_max_position: 8192
            }
        );
        let c = with(r#"{"type":"yarn","factor":4.0,"original_max_position_embeddings":32768}"#).unwrap();
        assert!(matches!(
            c.rope_scaling,
            RopeScaling::Yarn { factor: 4.0, original_max_position: 32768, beta_fast: 32.0, beta_slow: 1.0, .. }
        ));
        assert_eq!(c.rope_scaling.attn_factor(), RopeScaling::yarn_mscale(4.0));
        assert_eq!(with(r#"{"rope_type":"default"}"#).unwrap().rope_scaling, RopeScaling::None);
        for (bad, says) in [
            (r#"{"rope_type":"dynamic","factor":2.0}"#, "'dynamic' is not supported"),
            (r#"{"rope_type":"llama3","factor":8.0}"#, "low_freq_factor is missing"),
            (r#"{"rope_type":"yarn","factor":4.0}"#, "needs original_max_position_embeddings"),
            (r#"{"rope_type":"yarn","factor":4.0,"original_max_position_embeddings":4096,"mscale":0.7}"#, "DeepSeek"),
        ] {
            let e = with(bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn gemma3_configs_are_read_or_refused_by_name() {
        let with = |extra: &str| {
            ModelConfig::from_hf_json(&format!(
                r#"{{"architectures":["Gemma3ForCausalLM"],"vocab_size":100,"hidden_size":64,"intermediate_size":128,
                "num_hidden_layers":6,"num_attention_heads":4,"num_key_value_heads":1,"head_dim":16,
                "max_position_embeddings":32768,"sliding_window":512{extra}}}"#
            ))
        };
        let c = with(r#","rope_local_base_freq":10000.0,"sliding_window_pattern":6"#).unwrap();
        assert_eq!((c.arch, c.global_every, c.max_position, c.qk_norm), (Arch::Gemma3, 6, 32768, true));
        assert_eq!(c.sliding_window, Some(512));
        assert!(c.tie_embeddings);
        for (extra, says) in [
            (r#","final_logit_softcapping":30.0"#, "soft-capping"),
            (r#","hidden_activation":"gelu""#, "hidden_activation 'gelu'"),
            (r#","query_pre_attn_scalar":256"#, "query_pre_attn_scalar 256"),
            (
                r#","layer_types":["full_attention","sliding_attention","full_attention","sliding_attention","sliding_attention","full_attention"]"#,
                "layer_types",
            ),
        ] {
            let e = with(extra).unwrap_err().to_string();
            assert!(e.contains(says), "{extra}: {e}");
        }
    }

    #[test]
    fn mixture_of_experts_checkpoints_are_refused_by_name() {
        for (arch, key) in [("MixtralForCausalLM", "num_local_experts"), ("Qwen3MoeForCausalLM", "num_experts")] {
            let j = format!(
                r#"{{"architectures":["{arch}"],"vocab_size":10,"hidden_size":64,"intermediate_size":8,
                "num_hidden_layers":1,"num_attention_heads":4,"{key}":8}}"#
            );
            let e = ModelConfig::from_hf_json(&j).unwrap_err().to_string();
            assert!(e.contains(arch) && e.contains("GGUF"), "{e}");
        }
    }

    #[test]
    fn rejects_bad_configs() {
        assert!(matches!(ModelConfig::from_hf_json("{}"), Err(ModelError::Config(_))));
        let j = r#"{"architectures":["GPT2LMHeadModel"],"vocab_size":1,"hidden_size":1,"intermediate_size":1,"num_hidden_layers":1,"num_attention_heads":1}"#;
        assert!(matches!(ModelConfig::from_hf_json(j), Err(ModelError::UnsupportedArch(_))));
        let j = r#"{"architectures":["LlamaForCausalLM"],"vocab_size":10,"hidden_size":64,"intermediate_size":8,"num_hidden_layers":1,"num_attention_heads":3,"num_key_value_heads":2}"#;
        assert!(matches!(ModelConfig::from_hf_json(j), Err(ModelError::Config(_))));
        let j = r#"{"architectures":["LlamaForCausalLM"],"vocab_size":10,"hidden_size":64,"intermediate_size":8,"num_hidden_layers":100000,"num_attention_heads":4}"#;
        assert!(matches!(ModelConfig::from_hf_json(j), Err(ModelError::Config(_))));
    }
}
