//! llama.cpp's GGUF LoRA files (`convert_lora_to_gguf.py`): metadata
//! `general.type = adapter`, `adapter.type = lora`, `adapter.lora.alpha`,
//! and tensors `blk.N.attn_q.weight.lora_a` (`A`, GGUF dims `[in, r]`) and
//! `.lora_b` (`B`, dims `[r, out]`). The scale is `alpha/r`, or 1 when
//! alpha is 0 or absent, as llama.cpp computes it. A llama-architecture
//! file has Q/K rows in the converter's rotary-pair order.

use std::collections::BTreeMap;
use std::path::Path;

use kiln_gguf::GgufFile;

use super::{lora_err, FilePair, LoraAdapter, Proj, RawFactor};
use crate::config::{Arch, ModelConfig};
use crate::error::Result;
use crate::weights::SharedBytes;

/// Reads a GGUF LoRA file and checks it against a model of `cfg`.
pub fn read(path: &Path, cfg: &ModelConfig) -> Result<LoraAdapter> {
    let file = GgufFile::open(path).map_err(|e| lora_err(path, &e.to_string()))?;
    let md = file.metadata();
    let text = |k: &str| md.opt_str(k).ok().flatten().map(str::to_string);
    match text("general.type").as_deref() {
        Some("adapter") => {}
        other => {
            return Err(lora_err(path, &format!("general.type is {other:?}, not \"adapter\": not a LoRA file")));
        }
    }
    match text("adapter.type").as_deref() {
        Some("lora") => {}
        other => return Err(lora_err(path, &format!("adapter.type is {other:?}: only \"lora\" adapters are read"))),
    }
    if md.contains_key("adapter.alora.invocation_tokens") {
        return Err(lora_err(path, "activated LoRA (adapter.alora.invocation_tokens) is not supported"));
    }
    let arch_name = text("general.architecture").unwrap_or_default();
    let arch = Arch::parse(&arch_name).map_err(|_| lora_err(path, &format!("architecture '{arch_name}'")))?;
    if arch != cfg.arch {
        return Err(lora_err(path, &format!("the adapter is for {arch:?}, the model is {:?}", cfg.arch)));
    }
    let alpha = md.opt_f32("adapter.lora.alpha").map_err(|e| lora_err(path, &e.to_string()))?.unwrap_or(0.0);
    let mut pairs: BTreeMap<(usize, Proj), FilePair> = BTreeMap::new();
    for info in file.tensors() {
        let name = info.name.as_str();
        let parsed = parse_name(name).ok_or_else(|| {
            lora_err(
                path,
                &format!("tensor '{name}' is not a LoRA factor of a projection kiln applies (attn_q/k/v/output, ffn_gate/up/down)"),
            )
        })?;
        let (layer, proj, is_a) = parsed;
        // GGUF dims are innermost first; shapes here are row-major.
        let shape: Vec<usize> = info.dims.iter().rev().map(|&d| d as usize).collect();
        if shape.len() != 2 {
            return Err(lora_err(path, &format!("tensor '{name}': shape {shape:?} is not 2-D")));
        }
        let data = file.tensor_bytes_arc(info);
        let len = data.len();
        let bytes = SharedBytes::new(std::sync::Arc::new(data), 0, len)
            .ok_or_else(|| lora_err(path, &format!("tensor '{name}': data outside the file")))?
            .with_mapped(file.is_mapped());
        let vals = RawFactor { ty: info.ty, bytes };
        let e = pairs.entry((layer, proj)).or_insert_with(|| FilePair {
            a: None,
            b: None,
            name: format!("blk.{layer}.{}.weight", proj.gguf_stem()),
        });
        if is_a {
            e.a = Some((shape, vals));
        } else {
            e.b = Some((shape, vals));
        }
    }
    let scale = move |r: usize| if alpha != 0.0 { alpha / r as f32 } else { 1.0 };
    LoraAdapter::from_pairs(path, "gguf", cfg, pairs, &scale, arch == Arch::Llama)
}

/// `(layer, projection, is A)` of a GGUF LoRA tensor name.
fn parse_name(name: &str) -> Option<(usize, Proj, bool)> {
    let (rest, is_a) = if let Some(r) = name.strip_suffix(".weight.lora_a") {
        (r, true)
    } else {
        (name.strip_suffix(".weight.lora_b")?, false)
    };
    let (layer, stem) = rest.strip_prefix("blk.")?.split_once('.')?;
    Some((layer.parse().ok()?, Proj::from_gguf_stem(stem)?, is_a))
}
