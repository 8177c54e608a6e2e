//! The memory check before a model loads: estimate what the engine will
//! hold (weights, KV cache at full use, host KV tier) and compare it with
//! what the machine has available, so a model that cannot fit fails with a
//! clear error instead of the OS killing the process halfway through.

use std::path::Path;

use kiln_models::{kv_bytes_per_token, GgufSource, ModelConfig, ModelError, ModelFormat};

use crate::{EngineConfig, EngineError, Result, DEFAULT_MAX_CTX};

/// What a model will need, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryEstimate {
    /// Weights (resident once packed for the kernels).
    pub weights: u64,
    /// The KV cache when every block is in use.
    pub kv_cache: u64,
    /// The host KV tier when full.
    pub kv_tier: u64,
}

impl MemoryEstimate {
    /// Everything together.
    pub fn total(&self) -> u64 {
        self.weights + self.kv_cache + self.kv_tier
    }
}

fn file_len(p: &Path) -> Result<u64> {
    std::fs::metadata(p)
        .map(|m| m.len())
        .map_err(|e| EngineError::Model(ModelError::Io { path: p.to_path_buf(), source: e }))
}

/// Whether kiln can load the model at `path`: its format, architecture and
/// configuration are read and checked (no weights), so listings show only
/// what can be served. The error says why not.
pub fn probe(path: &Path) -> Result<ModelConfig> {
    read_config(path).map(|(cfg, _)| cfg)
}

/// A model's configuration (and, for GGUF, its parsed file) without loading
/// any weights.
pub(crate) fn read_config(path: &Path) -> Result<(ModelConfig, Option<kiln_gguf::GgufFile>)> {
    match kiln_models::detect_format(path)? {
        ModelFormat::Gguf => {
            let src = GgufSource::open(path)?;
            Ok((src.config()?, Some(src.file().clone())))
        }
        ModelFormat::Safetensors => Ok((kiln_models::hf_config(path)?, None)),
    }
}

/// Bytes of weights on disk: the GGUF file, or every `*.safetensors` file of the directory.
fn weight_bytes(path: &Path, gguf: bool) -> Result<u64> {
    if gguf {
        return file_len(path);
    }
    let entries = std::fs::read_dir(path)
        .map_err(|e| EngineError::Model(ModelError::Io { path: path.to_path_buf(), source: e }))?;
    let mut total = 0;
    for e in entries.flatten() {
        if e.path().extension().is_some_and(|x| x == "safetensors") {
            total += file_len(&e.path())?;
        }
    }
    Ok(total)
}

/// Estimates the memory of `path` under `cfg` from its metadata alone.
pub fn estimate(path: &Path, cfg: &EngineConfig) -> Result<MemoryEstimate> {
    let (model_cfg, gguf) = read_config(path)?;
    let weights = weight_bytes(path, gguf.is_some())?;
    let max_ctx = kiln_models::context_length(&model_cfg, Some(cfg.max_ctx.unwrap_or(DEFAULT_MAX_CTX)));
    let kv_tokens = cfg.kv_tokens.unwrap_or(4 * max_ctx).max(max_ctx) as u64;
    // A draft model: its weights, and a KV pool of as many blocks.
    let (draft_weights, draft_kv) = match &cfg.draft_model {
        Some(d) => {
            let (draft_cfg, g) = read_config(d)?;
            (weight_bytes(d, g.is_some())?, kv_bytes_per_token(&draft_cfg) as u64)
        }
        None => (0, 0),
    };
    Ok(MemoryEstimate {
        weights: weights + draft_weights,
        kv_cache: kv_tokens.saturating_mul(kv_bytes_per_token(&model_cfg) as u64 + draft_kv),
        kv_tier: cfg.kv_tier_bytes as u64,
    })
}

/// Bytes of a model's weights on disk (0 where they cannot be read: the
/// load that follows says why).
pub(crate) fn weight_file_bytes(path: &Path) -> usize {
    let gguf = matches!(kiln_models::detect_format(path), Ok(ModelFormat::Gguf));
    weight_bytes(path, gguf).unwrap_or(0) as usize
}

/// Memory the process can still take: the kernel's `MemAvailable`, and the
/// cgroup limit minus its usage when one is set (the smaller of the two).
/// `None` where this cannot be read (not Linux).
pub fn available_bytes() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))?
        .split_whitespace()
        .next()?
        .parse::<u64>()
        .ok()?;
    let mut avail = kib * 1024;
    let read = |p: &str| std::fs::read_to_string(p).ok().and_then(|s| s.trim().parse::<u64>().ok());
    if let (Some(max), Some(cur)) = (read("/sys/fs/cgroup/memory.max"), read("/sys/fs/cgroup/memory.current")) {
        avail = avail.min(max.saturating_sub(cur));
    }
    Some(avail)
}

/// Fails with [`EngineError::InsufficientMemory`] when the estimate exceeds
/// what is available.
pub fn check(path: &Path, cfg: &EngineConfig) -> Result<MemoryEstimate> {
    let est = estimate(path, cfg)?;
    if let Some(available) = available_bytes() {
        if est.total() > available {
            return Err(EngineError::InsufficientMemory { estimate: est, available });
        }
    }
    Ok(est)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estimate_counts_weights_kv_and_tier() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tiny.gguf");
        let spec = kiln_models::testing::write_tiny_chat_model(&path, kiln_gguf::GgmlType::Q8_0, 256).unwrap();
        let cfg = EngineConfig { kv_tokens: Some(1024), kv_tier_bytes: 1 << 20, ..Default::default() };
        let e = estimate(&path, &cfg).unwrap();
        assert_eq!(e.weights, std::fs::metadata(&path).unwrap().len());
        // 2 layers x K and V x 2 KV heads x 16 dims x 2 bytes per token.
        let per_token = (2 * spec.layers * spec.kv_heads * spec.head_dim() * 2) as u64;
        assert_eq!(e.kv_cache, 1024 * per_token);
        assert_eq!(e.kv_tier, 1 << 20);
        assert!(check(&path, &cfg).is_ok(), "a tiny model fits");
        // A KV cache larger than any machine's memory is refused before anything is allocated.
        let huge = EngineConfig { kv_tier_bytes: usize::MAX / 2, ..cfg };
        match check(&path, &huge) {
            Err(EngineError::InsufficientMemory { estimate, available }) => {
                assert!(estimate.total() > available);
                let msg = EngineError::InsufficientMemory { estimate, available }.to_string();
                assert!(msg.contains("GiB are available") && msg.contains("--kv-tier-mib"), "{msg}");
            }
            other => panic!("expected InsufficientMemory, got {other:?}"),
        }
    }
}
