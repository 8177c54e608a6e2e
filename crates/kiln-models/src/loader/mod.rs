//! Model files to weights: GGUF and Hugging Face safetensors directories.
//!
//! Both formats are exposed as a [`TensorSource`] under one canonical naming
//! scheme (GGUF's: `blk.N.attn_q.weight`); the safetensors source maps HF
//! names into it. All checkpoint quirks live here, not in model files.

mod gguf;
mod safetensors;

pub use self::gguf::GgufSource;
pub use self::safetensors::SafetensorsSource;

use std::path::Path;

use crate::config::Arch;
use crate::error::Result;
use crate::weights::RawTensor;

/// Where a model's tensors come from.
pub trait TensorSource {
    /// The tensor with this canonical (GGUF-style) name, if present.
    fn get(&self, name: &str) -> Result<Option<RawTensor>>;
    /// The file or directory, for error messages.
    fn path(&self) -> &Path;
    /// Looks up a required tensor.
    fn require(&self, name: &str) -> Result<RawTensor> {
        self.get(name)?.ok_or_else(|| crate::error::ModelError::MissingTensor {
            path: self.path().to_path_buf(),
            name: name.to_string(),
        })
    }
}

/// Maps a canonical tensor name to its Hugging Face name in a checkpoint of
/// `arch` (Gemma 3 names its four norms its own way).
pub(crate) fn hf_name(canonical: &str, arch: Arch) -> Option<String> {
    let fixed = match canonical {
        "token_embd.weight" => Some("model.embed_tokens.weight"),
        "output_norm.weight" => Some("model.norm.weight"),
        "output.weight" => Some("lm_head.weight"),
        _ => None,
    };
    if let Some(f) = fixed {
        return Some(f.to_string());
    }
    let rest = canonical.strip_prefix("blk.")?;
    let (layer, part) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let (stem, suffix) = part.rsplit_once('.')?;
    let gemma = arch == Arch::Gemma3;
    let hf = match stem {
        "attn_norm" => "input_layernorm",
        "ffn_norm" if gemma => "pre_feedforward_layernorm",
        "post_attention_norm" if gemma => "post_attention_layernorm",
        "post_ffw_norm" if gemma => "post_feedforward_layernorm",
        "ffn_norm" => "post_attention_layernorm",
        "attn_q" => "self_attn.q_proj",
        "attn_k" => "self_attn.k_proj",
        "attn_v" => "self_attn.v_proj",
        "attn_output" => "self_attn.o_proj",
        "attn_q_norm" => "self_attn.q_norm",
        "attn_k_norm" => "self_attn.k_norm",
        "ffn_gate" => "mlp.gate_proj",
        "ffn_up" => "mlp.up_proj",
        "ffn_down" => "mlp.down_proj",
        _ => return None,
    };
    Some(format!("model.layers.{layer}.{hf}.{suffix}"))
}

/// The Hugging Face names a canonical tensor name may have in a BERT-family
/// checkpoint (bare, or under the `bert.` / `roberta.` prefix of the
/// task models; the classification head as BERT's pooler and classifier or
/// RoBERTa's head).
pub(crate) fn hf_encoder_names(canonical: &str) -> Vec<String> {
    let bare: Vec<String> = match canonical {
        "token_embd.weight" => vec!["embeddings.word_embeddings.weight".into()],
        "position_embd.weight" => vec!["embeddings.position_embeddings.weight".into()],
        "token_types.weight" => vec!["embeddings.token_type_embeddings.weight".into()],
        "token_embd_norm.weight" => vec!["embeddings.LayerNorm.weight".into(), "emb_ln.weight".into()],
        "token_embd_norm.bias" => vec!["embeddings.LayerNorm.bias".into(), "emb_ln.bias".into()],
        "cls.weight" | "cls.bias" => {
            let s = &canonical[4..];
            vec![format!("pooler.dense.{s}"), format!("classifier.dense.{s}")]
        }
        "cls.output.weight" | "cls.output.bias" => {
            let s = &canonical[11..];
            vec![format!("classifier.{s}"), format!("classifier.out_proj.{s}")]
        }
        _ => {
            let Some((layer, part)) = canonical.strip_prefix("blk.").and_then(|r| r.split_once('.')) else {
                return Vec::new();
            };
            let Some((stem, suffix)) = part.rsplit_once('.') else {
                return Vec::new();
            };
            // BERT's names, then nomic-bert's (`encoder.layers`, fused QKV,
            // `fc11` the SwiGLU value, `fc12` its gate).
            let (bert, nomic) = match stem {
                "attn_q" => (Some("attention.self.query"), None),
                "attn_k" => (Some("attention.self.key"), None),
                "attn_v" => (Some("attention.self.value"), None),
                "attn_qkv" => (None, Some("attn.Wqkv")),
                "attn_output" => (Some("attention.output.dense"), Some("attn.out_proj")),
                "attn_output_norm" => (Some("attention.output.LayerNorm"), Some("norm1")),
                "ffn_up" => (Some("intermediate.dense"), Some("mlp.fc11")),
                "ffn_gate" => (None, Some("mlp.fc12")),
                "ffn_down" => (Some("output.dense"), Some("mlp.fc2")),
                "layer_output_norm" => (Some("output.LayerNorm"), Some("norm2")),
                _ => return Vec::new(),
            };
            let bert = bert.map(|h| format!("encoder.layer.{layer}.{h}.{suffix}"));
            bert.into_iter().chain(nomic.map(|h| format!("encoder.layers.{layer}.{h}.{suffix}"))).collect()
        }
    };
    let mut all = Vec::with_capacity(bare.len() * 3);
    for prefix in ["", "bert.", "roberta."] {
        all.extend(bare.iter().map(|b| format!("{prefix}{b}")));
    }
    all
}

/// What kind of model a path holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelFormat {
    /// A single GGUF file.
    Gguf,
    /// A Hugging Face directory with config.json and safetensors.
    Safetensors,
}

/// Detects the format of a model path.
pub fn detect_format(path: &Path) -> Result<ModelFormat> {
    if path.is_dir() {
        if path.join("config.json").is_file() {
            return Ok(ModelFormat::Safetensors);
        }
        return Err(crate::error::ModelError::Format {
            path: path.to_path_buf(),
            msg: "directory has no config.json".into(),
        });
    }
    let mut magic = [0u8; 4];
    let read = std::fs::File::open(path).and_then(|mut f| std::io::Read::read_exact(&mut f, &mut magic));
    match read {
        Ok(()) if &magic == b"GGUF" => Ok(ModelFormat::Gguf),
        Ok(()) => Err(crate::error::ModelError::Format {
            path: path.to_path_buf(),
            msg: "not a GGUF file (bad magic) nor a model directory".into(),
        }),
        Err(e) => Err(crate::error::ModelError::Io { path: path.to_path_buf(), source: e }),
    }
}

#[cfg(test)]
mod tests {
    use super::{hf_name, Arch};

    #[test]
    fn maps_names() {
        let l = Arch::Llama;
        assert_eq!(hf_name("blk.3.attn_q.bias", l).as_deref(), Some("model.layers.3.self_attn.q_proj.bias"));
        assert_eq!(hf_name("blk.12.ffn_down.weight", l).as_deref(), Some("model.layers.12.mlp.down_proj.weight"));
        assert_eq!(hf_name("output.weight", l).as_deref(), Some("lm_head.weight"));
        assert_eq!(hf_name("blk.x.attn_q.weight", l), None);
        assert_eq!(
            hf_name("blk.0.ffn_norm.weight", l).as_deref(),
            Some("model.layers.0.post_attention_layernorm.weight")
        );
        let g = Arch::Gemma3;
        assert_eq!(
            hf_name("blk.0.ffn_norm.weight", g).as_deref(),
            Some("model.layers.0.pre_feedforward_layernorm.weight")
        );
        assert_eq!(
            hf_name("blk.0.post_attention_norm.weight", g).as_deref(),
            Some("model.layers.0.post_attention_layernorm.weight")
        );
        assert_eq!(
            hf_name("blk.0.post_ffw_norm.weight", g).as_deref(),
            Some("model.layers.0.post_feedforward_layernorm.weight")
        );
        assert_eq!(hf_name("blk.0.post_ffw_norm.weight", l), None);
    }

    #[test]
    fn maps_encoder_names() {
        use super::hf_encoder_names;
        let n = hf_encoder_names("blk.2.attn_output_norm.bias");
        assert_eq!(n[0], "encoder.layer.2.attention.output.LayerNorm.bias");
        assert!(n.contains(&"roberta.encoder.layer.2.attention.output.LayerNorm.bias".to_string()));
        assert!(hf_encoder_names("cls.output.weight").contains(&"classifier.out_proj.weight".to_string()));
        assert!(hf_encoder_names("blk.2.nonsense.weight").is_empty());
    }
}
