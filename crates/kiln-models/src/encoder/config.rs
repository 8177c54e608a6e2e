//! The configuration of an encoder model, from a Hugging Face `config.json`
//! or GGUF metadata.

use kiln_backend::Act;
use serde::Deserialize;

use crate::config::Arch;
use crate::error::{ModelError, Result};

/// Everything an encoder's forward pass needs to know about its shape.
#[derive(Debug, Clone, PartialEq)]
pub struct EncoderConfig {
    /// Family ([`Arch::Bert`] or [`Arch::NomicBert`]).
    pub arch: Arch,
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Model width.
    pub hidden_size: usize,
    /// Feed-forward width.
    pub intermediate_size: usize,
    /// Layers.
    pub num_layers: usize,
    /// Attention heads.
    pub num_heads: usize,
    /// Longest input (learned positions, or the trained length of rotary ones).
    pub max_position: usize,
    /// Token types (segments) the embedding knows (BERT: 2; XLM-R: 1).
    pub type_vocab_size: usize,
    /// LayerNorm epsilon.
    pub layer_norm_eps: f32,
    /// The feed-forward activation.
    pub act: Act,
    /// Rows of the learned position table before position 0 (RoBERTa
    /// counts positions from `pad_token_id + 1`; GGUF converters drop them).
    pub position_offset: usize,
    /// Rotary positions with this base instead of learned ones (nomic-bert).
    pub rope_theta: Option<f32>,
    /// Q, K, V, the output and the feed-forward products have biases.
    pub biases: bool,
    /// Tokens of the RoBERTa pair format (`<s> a </s></s> b </s>`) rather
    /// than BERT's (`[CLS] a [SEP] b [SEP]` with token types).
    pub roberta_pairs: bool,
}

impl EncoderConfig {
    /// Dimension of one head.
    pub fn head_dim(&self) -> usize {
        self.hidden_size.checked_div(self.num_heads).unwrap_or(0)
    }

    /// The attention layers' heads.
    pub fn attn_shape(&self) -> kiln_backend::AttnShape {
        let hd = self.head_dim();
        kiln_backend::AttnShape {
            num_heads: self.num_heads,
            num_kv_heads: self.num_heads,
            head_dim: hd,
            scale: 1.0 / (hd.max(1) as f32).sqrt(),
        }
    }

    /// Checks the invariants the forward pass relies on.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(ModelError::Config(m));
        if !self.arch.is_encoder() {
            return bad(format!("{:?} is not an encoder", self.arch));
        }
        let limits = [
            ("hidden_size", self.hidden_size, 1 << 16),
            ("intermediate_size", self.intermediate_size, 1 << 18),
            ("num_hidden_layers", self.num_layers, 1024),
            ("num_attention_heads", self.num_heads, 1024),
            ("vocab_size", self.vocab_size, 1 << 22),
            ("max_position_embeddings", self.max_position, 1 << 20),
            ("type_vocab_size", self.type_vocab_size, 16),
        ];
        for (name, v, max) in limits {
            if v == 0 && name != "type_vocab_size" {
                return bad(format!("{name} is 0"));
            }
            if v > max {
                return bad(format!("{name} = {v} exceeds the supported maximum {max}"));
            }
        }
        if !self.hidden_size.is_multiple_of(self.num_heads) || !self.head_dim().is_multiple_of(2) {
            return bad(format!("hidden_size {} does not split into {} even heads", self.hidden_size, self.num_heads));
        }
        if !(self.layer_norm_eps.is_finite() && self.layer_norm_eps >= 0.0) {
            return bad(format!("layer_norm_eps {} out of range", self.layer_norm_eps));
        }
        if self.rope_theta.is_some_and(|t| !(t.is_finite() && t > 0.0)) {
            return bad("rotary base out of range".into());
        }
        if self.position_offset > 16 {
            return bad(format!("position offset {} out of range", self.position_offset));
        }
        Ok(())
    }

    /// Builds the configuration from a Hugging Face `config.json`.
    pub fn from_hf_json(json: &str) -> Result<Self> {
        let names: HfNames = serde_json::from_str(json).map_err(|e| ModelError::Config(format!("config.json: {e}")))?;
        let name = names.architectures.first().cloned().or(names.model_type).unwrap_or_default();
        if Arch::parse(&name)? == Arch::NomicBert {
            return Self::from_nomic_json(json);
        }
        let hf: HfEncoder = serde_json::from_str(json).map_err(|e| ModelError::Config(format!("config.json: {e}")))?;
        let arch = Arch::parse(&name)?;
        if arch != Arch::Bert {
            return Err(ModelError::Config(format!("config.json: {name} is not an encoder")));
        }
        if let Some(p) = hf.position_embedding_type.as_deref().filter(|p| *p != "absolute") {
            return Err(ModelError::Config(format!("config.json: position_embedding_type '{p}' is not supported")));
        }
        let act = match hf.hidden_act.as_deref().unwrap_or("gelu") {
            "gelu" => Act::GeluErf,
            "gelu_new" | "gelu_pytorch_tanh" => Act::GeluTanh,
            other => return Err(ModelError::Config(format!("config.json: hidden_act '{other}' is not supported"))),
        };
        let model_type = hf.model_type.as_deref().unwrap_or_default();
        let roberta = model_type.contains("roberta") || name.contains("Roberta");
        let cfg = Self {
            arch,
            vocab_size: hf.vocab_size,
            hidden_size: hf.hidden_size,
            intermediate_size: hf.intermediate_size,
            num_layers: hf.num_hidden_layers,
            num_heads: hf.num_attention_heads,
            max_position: hf.max_position_embeddings.unwrap_or(512),
            type_vocab_size: hf.type_vocab_size.unwrap_or(2),
            layer_norm_eps: hf.layer_norm_eps.unwrap_or(1e-12),
            act,
            position_offset: if roberta { hf.pad_token_id.unwrap_or(1) + 1 } else { 0 },
            rope_theta: None,
            biases: true,
            roberta_pairs: roberta,
        };
        let cfg = Self { max_position: cfg.max_position.saturating_sub(cfg.position_offset), ..cfg };
        cfg.validate()?;
        Ok(cfg)
    }

    /// nomic-bert's `config.json` (GPT-2-style names: `n_embd`, `n_head`,
    /// ...): rotary positions over whole heads in halves, SwiGLU, post-norm,
    /// no biases. Anything else it can say (mixture-of-experts layers,
    /// pre-norm, interleaved or partial or scaled rotary, biases, RMSNorm)
    /// is refused by name rather than run wrong.
    fn from_nomic_json(json: &str) -> Result<Self> {
        let hf: HfNomic = serde_json::from_str(json).map_err(|e| ModelError::Config(format!("config.json: {e}")))?;
        let refuse =
            |what: &str| Err(ModelError::Config(format!("config.json: nomic-bert with {what} is not supported")));
        if hf.moe_every_n_layers.unwrap_or(0) > 0 {
            return refuse("mixture-of-experts layers");
        }
        if hf.prenorm || hf.use_rms_norm || hf.rotary_emb_interleaved || hf.rotary_scaling_factor.is_some() {
            return refuse("pre-norm, RMSNorm, interleaved or scaled rotary positions");
        }
        if hf.rotary_emb_fraction.is_some_and(|f| f != 1.0) {
            return refuse("rotary positions on part of each head");
        }
        if hf.qkv_proj_bias || hf.mlp_fc1_bias || hf.mlp_fc2_bias {
            return refuse("biases");
        }
        let act = hf.activation_function.as_deref().unwrap_or("swiglu");
        if act != "swiglu" {
            return refuse(&format!("activation '{act}'"));
        }
        let cfg = Self {
            arch: Arch::NomicBert,
            vocab_size: hf.vocab_size,
            hidden_size: hf.n_embd,
            intermediate_size: hf.n_inner.unwrap_or(4 * hf.n_embd),
            num_layers: hf.n_layer,
            num_heads: hf.n_head,
            max_position: hf.max_trained_positions.or(hf.n_positions).unwrap_or(2048),
            type_vocab_size: hf.type_vocab_size.unwrap_or(2),
            layer_norm_eps: hf.layer_norm_epsilon.unwrap_or(1e-12),
            act: Act::Swiglu,
            position_offset: 0,
            rope_theta: Some(hf.rotary_emb_base.unwrap_or(1000.0)),
            biases: false,
            roberta_pairs: false,
        };
        cfg.validate()?;
        Ok(cfg)
    }

    /// Builds the configuration from GGUF metadata (`bert`, `nomic-bert`, as
    /// llama.cpp's converter writes them; XLM-RoBERTa is `bert` with a `t5`
    /// tokenizer and its position table already starting at position 0).
    pub fn from_gguf(meta: &kiln_gguf::Metadata, vocab_size: usize, type_vocab_size: usize) -> Result<Self> {
        let bad = |e: kiln_gguf::GgufError| ModelError::Config(format!("GGUF metadata: {e}"));
        let arch = Arch::parse(meta.arch().map_err(bad)?)?;
        let get = |k: &str| -> Result<usize> { Ok(meta.arch_u32(k).map_err(bad)? as usize) };
        let nomic = arch == Arch::NomicBert;
        let cfg = Self {
            arch,
            vocab_size,
            hidden_size: get("embedding_length")?,
            intermediate_size: get("feed_forward_length")?,
            num_layers: get("block_count")?,
            num_heads: get("attention.head_count")?,
            max_position: get("context_length")?,
            type_vocab_size,
            layer_norm_eps: meta.opt_arch_f32("attention.layer_norm_epsilon").map_err(bad)?.unwrap_or(1e-12),
            act: if nomic { Act::Swiglu } else { Act::GeluErf },
            position_offset: 0,
            rope_theta: nomic.then(|| meta.opt_arch_f32("rope.freq_base").ok().flatten().unwrap_or(1000.0)),
            biases: !nomic,
            // llama.cpp's converter writes XLM-RoBERTa as `bert` with its
            // SentencePiece Unigram vocabulary: that pairs `<s> a </s></s> b </s>`.
            roberta_pairs: meta.opt_str("tokenizer.ggml.model").ok().flatten() == Some("t5"),
        };
        cfg.validate()?;
        Ok(cfg)
    }
}

/// The fields of a BERT-family `config.json` kiln reads.
#[derive(Debug, Deserialize)]
struct HfEncoder {
    model_type: Option<String>,
    vocab_size: usize,
    hidden_size: usize,
    intermediate_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    max_position_embeddings: Option<usize>,
    type_vocab_size: Option<usize>,
    layer_norm_eps: Option<f32>,
    hidden_act: Option<String>,
    pad_token_id: Option<usize>,
    position_embedding_type: Option<String>,
}

/// What a `config.json` says the model is.
#[derive(Debug, Deserialize)]
struct HfNames {
    #[serde(default)]
    architectures: Vec<String>,
    model_type: Option<String>,
}

/// The fields of a nomic-bert `config.json` kiln reads (the flags it
/// refuses default to the values it runs).
#[derive(Debug, Deserialize)]
struct HfNomic {
    vocab_size: usize,
    n_embd: usize,
    n_head: usize,
    n_layer: usize,
    n_inner: Option<usize>,
    n_positions: Option<usize>,
    max_trained_positions: Option<usize>,
    type_vocab_size: Option<usize>,
    layer_norm_epsilon: Option<f32>,
    activation_function: Option<String>,
    rotary_emb_base: Option<f32>,
    rotary_emb_fraction: Option<f32>,
    #[serde(default)]
    rotary_emb_interleaved: bool,
    rotary_scaling_factor: Option<f32>,
    #[serde(default)]
    prenorm: bool,
    #[serde(default)]
    use_rms_norm: bool,
    #[serde(default)]
    qkv_proj_bias: bool,
    #[serde(default)]
    mlp_fc1_bias: bool,
    #[serde(default)]
    mlp_fc2_bias: bool,
    moe_every_n_layers: Option<usize>,
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINILM: &str = r#"{"architectures":["BertModel"],"hidden_act":"gelu","hidden_size":384,
        "intermediate_size":1536,"layer_norm_eps":1e-12,"max_position_embeddings":512,"model_type":"bert",
        "num_attention_heads":12,"num_hidden_layers":6,"pad_token_id":0,"position_embedding_type":"absolute",
        "type_vocab_size":2,"vocab_size":30522}"#;

    #[test]
    fn reads_minilm() {
        let c = EncoderConfig::from_hf_json(MINILM).unwrap();
        assert_eq!((c.arch, c.hidden_size, c.num_layers, c.head_dim(), c.max_position), (Arch::Bert, 384, 6, 32, 512));
        assert_eq!((c.act, c.position_offset, c.roberta_pairs), (Act::GeluErf, 0, false));
    }

    #[test]
    fn reads_xlm_roberta_positions() {
        let j = MINILM
            .replace("BertModel", "XLMRobertaModel")
            .replace("\"bert\"", "\"xlm-roberta\"")
            .replace("\"pad_token_id\":0", "\"pad_token_id\":1")
            .replace("512", "514");
        let c = EncoderConfig::from_hf_json(&j).unwrap();
        assert_eq!((c.position_offset, c.max_position, c.roberta_pairs), (2, 512, true));
    }

    #[test]
    fn refuses_what_it_cannot_run() {
        for (from, to, says) in [
            ("\"gelu\"", "\"relu\"", "hidden_act 'relu'"),
            ("\"absolute\"", "\"relative_key\"", "relative_key"),
            ("\"num_attention_heads\":12", "\"num_attention_heads\":7", "even heads"),
            ("\"vocab_size\":30522", "\"vocab_size\":0", "vocab_size is 0"),
        ] {
            let e = EncoderConfig::from_hf_json(&MINILM.replace(from, to)).unwrap_err().to_string();
            assert!(e.contains(says), "{to}: {e}");
        }
    }
}
