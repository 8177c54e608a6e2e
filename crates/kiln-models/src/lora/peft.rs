//! PEFT directories: `adapter_config.json` (`r`, `lora_alpha`,
//! `target_modules`, `use_rslora`) and `adapter_model.safetensors` with
//! tensors named `base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight`
//! (`A`: `[r, in]`) and `...lora_B.weight` (`B`: `[out, r]`), in Hugging
//! Face's row order.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use super::{lora_err, FilePair, LoraAdapter, Proj, RawFactor};
use crate::config::ModelConfig;
use crate::error::Result;
use crate::weights::SharedBytes;

/// The fields of `adapter_config.json` kiln reads; any other that would
/// change the result is refused.
#[derive(Debug, Deserialize)]
struct PeftConfig {
    #[serde(default)]
    peft_type: Option<String>,
    r: usize,
    lora_alpha: f32,
    #[serde(default)]
    use_rslora: bool,
    #[serde(default)]
    use_dora: bool,
    #[serde(default)]
    fan_in_fan_out: bool,
    #[serde(default)]
    bias: Option<String>,
    #[serde(default)]
    target_modules: Option<serde_json::Value>,
    #[serde(default)]
    modules_to_save: Option<serde_json::Value>,
    #[serde(default)]
    alpha_pattern: Option<serde_json::Map<String, serde_json::Value>>,
}

const KNOWN_MODULES: [&str; 7] = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"];

/// Reads a PEFT directory and checks it against a model of `cfg`.
pub fn read(dir: &Path, cfg: &ModelConfig) -> Result<LoraAdapter> {
    let cfg_path = dir.join("adapter_config.json");
    let text = std::fs::read_to_string(&cfg_path).map_err(|e| lora_err(dir, &format!("adapter_config.json: {e}")))?;
    let pc: PeftConfig =
        serde_json::from_str(&text).map_err(|e| lora_err(dir, &format!("adapter_config.json: {e}")))?;
    check_config(dir, &pc)?;
    let st_path = dir.join("adapter_model.safetensors");
    if !st_path.is_file() {
        let hint = if dir.join("adapter_model.bin").is_file() {
            " (adapter_model.bin is a pickle, which kiln does not read: save with safe_serialization=True)"
        } else {
            ""
        };
        return Err(lora_err(dir, &format!("no adapter_model.safetensors{hint}")));
    }
    let file = std::fs::File::open(&st_path).map_err(|e| lora_err(&st_path, &e.to_string()))?;
    // SAFETY: read-only and private to this process; as with the model
    // files (kiln-gguf), an adapter file is not rewritten in place while it
    // is read. The mapping lives with the adapter (its factors are read
    // from it when attached, right after the load).
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| lora_err(&st_path, &e.to_string()))?;
    let map: std::sync::Arc<memmap2::Mmap> = std::sync::Arc::new(map);
    let st = safetensors::SafeTensors::deserialize(&map).map_err(|e| lora_err(&st_path, &e.to_string()))?;
    let mut pairs: BTreeMap<(usize, Proj), FilePair> = BTreeMap::new();
    for (name, t) in st.tensors() {
        let (layer, proj, is_a) = parse_name(&name).ok_or_else(|| {
            lora_err(
                &st_path,
                &format!(
                    "tensor '{name}' is not a LoRA factor of a projection kiln applies (q, k, v, o, gate, up, down)"
                ),
            )
        })?;
        let shape = t.shape().to_vec();
        let ty = match t.dtype() {
            safetensors::Dtype::F32 => kiln_gguf::GgmlType::F32,
            safetensors::Dtype::F16 => kiln_gguf::GgmlType::F16,
            safetensors::Dtype::BF16 => kiln_gguf::GgmlType::BF16,
            other => {
                return Err(lora_err(&st_path, &format!("tensor '{name}': dtype {other:?} (F32, F16, BF16 are read)")))
            }
        };
        if shape.len() != 2 {
            return Err(lora_err(&st_path, &format!("tensor '{name}': shape {shape:?} is not 2-D")));
        }
        // The factor stays in the mapping: safetensors hands out slices of
        // the bytes it was given, so its offset is the pointers' distance.
        let at = (t.data().as_ptr() as usize).checked_sub(map.as_ptr() as usize);
        let bytes = at
            .and_then(|at| SharedBytes::new(map.clone(), at, t.data().len()))
            .ok_or_else(|| lora_err(&st_path, &format!("tensor '{name}': data outside the file")))?
            .with_mapped(true);
        let vals = RawFactor { ty, bytes };
        let e = pairs.entry((layer, proj)).or_insert_with(|| FilePair {
            a: None,
            b: None,
            name: format!("layers.{layer}.{}", proj.hf_module()),
        });
        if is_a {
            e.a = Some((shape, vals));
        } else {
            e.b = Some((shape, vals));
        }
    }
    let (alpha, rslora) = (pc.lora_alpha, pc.use_rslora);
    let scale = move |r: usize| if rslora { alpha / (r as f32).sqrt() } else { alpha / r as f32 };
    let ad = LoraAdapter::from_pairs(dir, "peft", cfg, pairs, &scale, false)?;
    if ad.targets.values().any(|f| f.rank() != pc.r) && pc.r != 0 {
        // rank_pattern may give modules other ranks; the shapes decide.
        tracing::debug!(path = %dir.display(), "adapter ranks differ from r = {}", pc.r);
    }
    Ok(ad)
}

fn check_config(dir: &Path, pc: &PeftConfig) -> Result<()> {
    let refuse = |m: &str| Err(lora_err(dir, &format!("adapter_config.json: {m}")));
    if let Some(t) = &pc.peft_type {
        if !t.eq_ignore_ascii_case("lora") {
            return refuse(&format!("peft_type {t}: only LORA adapters are supported"));
        }
    }
    if pc.r == 0 {
        return refuse("r is 0");
    }
    if pc.use_dora {
        return refuse("use_dora: DoRA adapters are not supported");
    }
    if pc.fan_in_fan_out {
        return refuse("fan_in_fan_out: transposed (Conv1D) adapters are not supported");
    }
    if pc.bias.as_deref().is_some_and(|b| b != "none") {
        return refuse("bias: adapters that train biases are not supported");
    }
    if pc.alpha_pattern.as_ref().is_some_and(|m| !m.is_empty()) {
        return refuse("alpha_pattern: per-module alphas are not supported");
    }
    if pc.modules_to_save.as_ref().is_some_and(|v| v.as_array().is_some_and(|a| !a.is_empty())) {
        return refuse("modules_to_save: adapters that replace whole modules are not supported");
    }
    if let Some(serde_json::Value::Array(mods)) = &pc.target_modules {
        for m in mods.iter().filter_map(|m| m.as_str()) {
            if !KNOWN_MODULES.contains(&m) && m != "all-linear" {
                return refuse(&format!("target module '{m}' is not one kiln applies ({})", KNOWN_MODULES.join(", ")));
            }
        }
    }
    Ok(())
}

/// `(layer, projection, is A)` of a PEFT tensor name.
fn parse_name(name: &str) -> Option<(usize, Proj, bool)> {
    let name = name.replace(".default.", ".");
    let (rest, is_a) = if let Some(r) = name.strip_suffix(".lora_A.weight") {
        (r, true)
    } else {
        (name.strip_suffix(".lora_B.weight")?, false)
    };
    let at = rest.find("layers.")?;
    let (layer, module) = rest[at + "layers.".len()..].split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let leaf = module.rsplit('.').next()?;
    let proj = Proj::from_hf_leaf(leaf)?;
    (module == proj.hf_module()).then_some((layer, proj, is_a))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(
            parse_name("base_model.model.model.layers.12.self_attn.q_proj.lora_A.weight"),
            Some((12, Proj::Q, true))
        );
        assert_eq!(
            parse_name("base_model.model.model.layers.0.mlp.down_proj.lora_B.weight"),
            Some((0, Proj::Down, false))
        );
        assert_eq!(
            parse_name("base_model.model.model.layers.3.mlp.up_proj.lora_A.default.weight"),
            Some((3, Proj::Up, true))
        );
        assert_eq!(parse_name("base_model.model.model.embed_tokens.lora_embedding_A"), None);
        assert_eq!(parse_name("base_model.model.model.layers.0.self_attn.q_proj.lora_magnitude_vector"), None);
    }
}
