//! Writes a random-weight GGUF that llama.cpp loads too (a byte-level BPE
//! tokenizer of 263 tokens, ChatML template): the mixtures of experts
//! Qwen3-MoE (`qwen3moe`), Mixtral (`llama` with experts) and gpt-oss
//! (`gpt-oss`: sinks, biases, a sliding window of `--window` on even
//! layers, YaRN over an original context of 32), and dense Gemma 3
//! (`gemma3`: local layers with a window of `--window`, every sixth layer
//! global), for checks against llama.cpp's logits (`scripts/compare-moe.sh`),
//! CUDA against the CPU (`scripts/gpu/window-check.sh`) and benchmarks.
//!
//! `tiny-gguf --arch qwen3moe|mixtral|gpt-oss|gemma3 --out OUT.gguf [--type Q8_0]
//!  [--layers 2] [--hidden 256] [--heads 4] [--kv-heads 2] [--experts 8]
//!  [--used 2] [--expert-ff 256] [--ctx 512] [--window 8] [--seed 1]`
//!
//! A dense model's feed-forward width is `--expert-ff`. Weights are uniform
//! random, rounded through `--type`; routers are f32.

use kiln_gguf::GgmlType;
use kiln_models::testing::{tiny_tokenizer_metadata, tiny_weights, write_gguf, TinySpec};
use kiln_models::Arch;

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1).cloned())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let num = |name: &str, default: usize| -> Result<usize, String> {
        arg(&args, name).map_or(Ok(default), |v| v.parse().map_err(|_| format!("{name}: not a number: {v}")))
    };
    let arch = match arg(&args, "--arch").as_deref() {
        Some("qwen3moe") => Arch::Qwen3Moe,
        Some("mixtral") => Arch::Llama,
        Some("gpt-oss") => Arch::GptOss,
        Some("gemma3") => Arch::Gemma3,
        other => return Err(format!("--arch qwen3moe|mixtral|gpt-oss|gemma3, got {other:?}").into()),
    };
    let out = arg(&args, "--out").ok_or("--out OUT.gguf is required")?;
    let ty_name = arg(&args, "--type").unwrap_or_else(|| "Q8_0".into());
    let ty = (0..64)
        .filter_map(GgmlType::from_id)
        .find(|t| t.name().eq_ignore_ascii_case(&ty_name))
        .ok_or(format!("unknown type {ty_name}"))?;
    let (vocab, md) = tiny_tokenizer_metadata();
    let spec = TinySpec {
        arch,
        ty,
        vocab,
        hidden: num("--hidden", 256)?,
        layers: num("--layers", 2)?,
        heads: num("--heads", 4)?,
        kv_heads: num("--kv-heads", 2)?,
        ff: num("--expert-ff", 256)?,
        ctx: num("--ctx", 512)?,
        tied: arch == Arch::Gemma3,
        seed: num("--seed", 1)? as u64,
        moe: (arch != Arch::Gemma3).then_some((num("--experts", 8)?, num("--used", 2)?)),
        window: if matches!(arch, Arch::GptOss | Arch::Gemma3) { num("--window", 8)? } else { 0 },
    };
    write_gguf(&spec, &tiny_weights(&spec), out.as_ref(), &md)?;
    eprintln!("wrote {out}: {spec:?}");
    Ok(())
}
