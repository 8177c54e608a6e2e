//! The memory check before a model loads: plan the context and the KV pool
//! from the model's trained context, the flags, the KV cache types and what
//! memory is left after the weights ([`plan`]); estimate what the engine will
//! hold (weights, KV cache at full use, host KV tier) and compare it with
//! what the machine has available, so a model that cannot fit fails with a
//! clear error instead of the OS killing the process halfway through.

use std::path::Path;

use kiln_models::{kv_cache_bytes_per_token, GgufSource, KvType, ModelConfig, ModelError, ModelFormat};

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

/// The context and KV pool a model runs with, decided before anything is
/// allocated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvPlan {
    /// Context length.
    pub max_ctx: usize,
    /// KV pool size in tokens (at least one context).
    pub kv_tokens: usize,
    /// How K is stored.
    pub type_k: KvType,
    /// How V is stored.
    pub type_v: KvType,
    /// KV bytes of one token over every layer that keeps the whole
    /// context, K and V.
    pub bytes_per_token: usize,
    /// Bytes of the sliding-window layers' own pool (0: none; see
    /// [`EngineConfig::swa_full`]).
    pub window_bytes: u64,
}

impl KvPlan {
    /// KV bytes of one full context.
    pub fn context_bytes(&self) -> u64 {
        (self.max_ctx as u64).saturating_mul(self.bytes_per_token as u64) + self.window_bytes
    }
    /// KV bytes of the whole pool in use (and the window pool).
    pub fn pool_bytes(&self) -> u64 {
        (self.kv_tokens as u64).saturating_mul(self.bytes_per_token as u64) + self.window_bytes
    }
}

/// Plans the context and KV pool of a model of `model_cfg` on the CPU, with
/// `free` bytes left for the KV cache after the weights and the host tier
/// (`None`: unknown).
///
/// - `--ctx-size` (capped at the trained context) must fit one context in
///   `free`, or [`EngineError::ContextTooLarge`] says how much it needs.
/// - Without it: the trained context where one fits, else the longest
///   that does (whole blocks); [`DEFAULT_MAX_CTX`] caps it where `free` is
///   unknown.
/// - The pool: `--kv-cache-tokens` (at least one context), else four
///   contexts where they fit, else as many tokens as fit (at least one
///   context); memory is committed only as blocks are used.
pub fn plan(model_cfg: &ModelConfig, cfg: &EngineConfig, free: Option<u64>) -> Result<KvPlan> {
    let (type_k, type_v) = (cfg.cache_type_k, cfg.cache_type_v);
    let (bytes_per_token, window_bytes) = kv_costs(model_cfg, cfg);
    let bs = cfg.block_size.max(1);
    let trained = model_cfg.max_position.max(1);
    let free = free.map(|f| f.saturating_sub(window_bytes));
    let fit = free.map(|f| (f / bytes_per_token as u64).min(usize::MAX as u64) as usize / bs * bs);
    if let Some(n) = cfg.max_ctx.filter(|&n| n > trained) {
        tracing::warn!("--ctx-size {n} is past the model's trained context: using {trained}");
    }
    let max_ctx = match (cfg.max_ctx, fit) {
        (Some(n), _) => kiln_models::context_length(model_cfg, Some(n)),
        (None, Some(fit)) => trained.min(fit).max(bs.min(trained)),
        (None, None) => trained.min(DEFAULT_MAX_CTX),
    };
    if let (Some(free), Some(fit)) = (free, fit) {
        if max_ctx > fit {
            return Err(EngineError::ContextTooLarge {
                ctx: max_ctx,
                needed: max_ctx as u64 * bytes_per_token as u64,
                available: free,
                type_k,
                type_v,
            });
        }
    }
    let kv_tokens = match cfg.kv_tokens {
        Some(t) => t.max(max_ctx),
        None => (4 * max_ctx).min(fit.unwrap_or(usize::MAX)).max(max_ctx),
    };
    Ok(KvPlan { max_ctx, kv_tokens, type_k, type_v, bytes_per_token, window_bytes })
}

/// The sliding-window layers' own KV pool, where the engine keeps one.
pub(crate) struct WindowPlan {
    /// How many layers are window layers.
    pub(crate) layers: usize,
    /// Blocks of the pool.
    pub(crate) blocks: usize,
}

/// The window pool of `model_cfg` under `cfg` for a context of `ctx` tokens
/// beside a main pool of `pool_tokens`: `None` with `--swa-full`, with
/// context shift (which moves whole rows), or when no layer's window is
/// shorter than the context. The one decision
/// the engine's load and the memory estimate both take.
pub(crate) fn window_plan(
    model_cfg: &ModelConfig,
    cfg: &EngineConfig,
    ctx: usize,
    pool_tokens: usize,
) -> Option<WindowPlan> {
    if cfg.swa_full || cfg.context_shift {
        return None;
    }
    let (window, layers) = kiln_models::window_layers(model_cfg, ctx)?;
    let blocks =
        kiln_models::window_pool_blocks(window, cfg.block_size.max(1), cfg.max_running, cfg.prefill_chunk, pool_tokens);
    Some(WindowPlan { layers: layers.len(), blocks })
}

/// KV bytes per token of the layers that keep the whole context, and the
/// bytes of the sliding-window layers' pool where they get one (as the
/// engine sizes it for the trained context: an upper bound).
pub(crate) fn kv_costs(model_cfg: &ModelConfig, cfg: &EngineConfig) -> (usize, u64) {
    let all = kv_cache_bytes_per_token(model_cfg, cfg.cache_type_k, cfg.cache_type_v).max(1);
    let trained = model_cfg.max_position.max(1);
    let Some(wp) = window_plan(model_cfg, cfg, trained, cfg.kv_tokens.unwrap_or(4 * trained)) else {
        return (all, 0);
    };
    let per_layer = all / model_cfg.num_layers.max(1);
    let full = (model_cfg.num_layers - wp.layers) * per_layer;
    (full.max(1), (wp.blocks * cfg.block_size.max(1) * per_layer * wp.layers) as u64)
}

/// Estimates the memory of `path` under `cfg` from its metadata alone (the
/// context planned as if the available memory were unknown).
pub fn estimate(path: &Path, cfg: &EngineConfig) -> Result<MemoryEstimate> {
    let (model_cfg, gguf) = read_config(path)?;
    let weights = weight_bytes(path, gguf.is_some())?;
    let (draft_weights, draft_per_token) = draft_cost(cfg)?;
    let plan = plan(&model_cfg, cfg, None)?;
    Ok(MemoryEstimate {
        weights: weights + draft_weights,
        kv_cache: plan.pool_bytes() + plan.kv_tokens as u64 * draft_per_token,
        kv_tier: cfg.kv_tier_bytes as u64,
    })
}

/// What a draft model adds ([`EngineConfig::draft_model`]): its weights,
/// and its KV bytes per token (its pool has as many tokens as the model's).
fn draft_cost(cfg: &EngineConfig) -> Result<(u64, u64)> {
    match &cfg.draft_model {
        Some(d) => {
            let (draft_cfg, g) = read_config(d)?;
            let per_token = kv_cache_bytes_per_token(&draft_cfg, cfg.cache_type_k, cfg.cache_type_v);
            Ok((weight_bytes(d, g.is_some())?, per_token as u64))
        }
        None => Ok((0, 0)),
    }
}

/// Bytes of a model's weights on disk (0 where they cannot be read: the
/// load that follows says why).
pub(crate) fn weight_file_bytes(path: &Path) -> usize {
    let gguf = matches!(kiln_models::detect_format(path), Ok(ModelFormat::Gguf));
    weight_bytes(path, gguf).unwrap_or(0) as usize
}

/// Device memory the adapters of `--lora` take on a GPU that keeps their
/// factors in f16 (kiln-cuda), left free when the KV pool sizes itself by
/// the free memory: twice their files' bytes (an upper bound: 16-bit
/// factors take their file's bytes, f32 half, 8-bit under twice). A path
/// that cannot be read counts 0 (its load says why).
pub fn lora_device_bytes(list: &[(String, std::path::PathBuf)]) -> usize {
    let file = |p: &Path| if p.is_dir() { weight_bytes(p, false) } else { file_len(p) };
    list.iter().map(|(_, p)| 2 * file(p).unwrap_or(0) as usize).sum()
}

/// Plans the KV cache of `path` under `cfg` against the available memory
/// ([`plan`]) and checks the whole estimate (weights, the pool when full,
/// the tier) against it: [`EngineError::ContextTooLarge`] or
/// [`EngineError::InsufficientMemory`] when it cannot fit.
pub fn check_plan(path: &Path, cfg: &EngineConfig) -> Result<(MemoryEstimate, KvPlan)> {
    let (model_cfg, gguf) = read_config(path)?;
    let (draft_weights, draft_per_token) = draft_cost(cfg)?;
    let weights = weight_bytes(path, gguf.is_some())? + draft_weights;
    let available = available_bytes();
    let tier = cfg.kv_tier_bytes as u64;
    if let Some(available) = available.filter(|&a| weights.saturating_add(tier) > a) {
        // Not even the weights and the tier fit: say so before any context.
        let estimate = MemoryEstimate { weights, kv_cache: 0, kv_tier: tier };
        return Err(EngineError::InsufficientMemory { estimate, available });
    }
    // A draft model's pool has as many tokens: the model's share of the room.
    let (per_token, window_bytes) = kv_costs(&model_cfg, cfg);
    let per_token = per_token as u64;
    let room = available.map(|a| {
        (a - weights - tier).saturating_sub(window_bytes) / (per_token + draft_per_token) * per_token + window_bytes
    });
    let plan = plan(&model_cfg, cfg, room)?;
    let kv_cache = plan.pool_bytes() + plan.kv_tokens as u64 * draft_per_token;
    let est = MemoryEstimate { weights, kv_cache, kv_tier: cfg.kv_tier_bytes as u64 };
    if let Some(available) = available.filter(|&a| est.total() > a) {
        return Err(EngineError::InsufficientMemory { estimate: est, available });
    }
    Ok((est, plan))
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
    check_plan(path, cfg).map(|(est, _)| est)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lora_device_bytes_count_files_and_peft_directories_twice() {
        let dir = tempfile::tempdir().unwrap();
        let gguf = dir.path().join("a.gguf");
        std::fs::write(&gguf, vec![0u8; 1000]).unwrap();
        let peft = dir.path().join("peft");
        std::fs::create_dir(&peft).unwrap();
        std::fs::write(peft.join("adapter_model.safetensors"), vec![0u8; 300]).unwrap();
        std::fs::write(peft.join("adapter_config.json"), b"{}").unwrap();
        let list = |ps: &[&Path]| ps.iter().map(|p| ("x".to_string(), p.to_path_buf())).collect::<Vec<_>>();
        assert_eq!(lora_device_bytes(&list(&[&gguf])), 2000);
        // a PEFT directory counts its safetensors only
        assert_eq!(lora_device_bytes(&list(&[&gguf, &peft])), 2600);
        // a missing path counts nothing (its load reports it)
        assert_eq!(lora_device_bytes(&list(&[&dir.path().join("missing.gguf")])), 0);
        assert_eq!(lora_device_bytes(&[]), 0);
    }

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

    fn tiny() -> (tempfile::TempDir, std::path::PathBuf, ModelConfig) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tiny.gguf");
        kiln_models::testing::write_tiny_chat_model(&path, kiln_gguf::GgmlType::Q8_0, 256).unwrap();
        let (cfg, _) = read_config(&path).unwrap();
        (dir, path, cfg)
    }

    #[test]
    fn window_layers_count_a_window_pool_not_the_context() {
        let (_dir, _path, model) = tiny();
        // Five of six layers local, with a window of 16 positions.
        let model = ModelConfig { num_layers: 6, ..model }.with_gemma3_layers(Some(16), 6, 10_000.0);
        let all = kv_cache_bytes_per_token(&model, KvType::F16, KvType::F16);
        let cfg = EngineConfig::default();
        let p = plan(&model, &cfg, Some(1 << 40)).unwrap();
        assert_eq!(p.bytes_per_token, all / 6);
        // Never more than the pool would hold with every layer whole.
        assert!(p.window_bytes > 0 && p.window_bytes <= (p.kv_tokens * all) as u64, "{p:?}");
        let long = ModelConfig { max_position: 32768, ..model.clone() };
        let p = plan(&long, &cfg, Some(1 << 40)).unwrap();
        assert!(
            p.window_bytes * 4 < (p.max_ctx * all) as u64,
            "at 32k the window pool is a fraction of one context: {p:?}"
        );
        // --swa-full and context shift keep every layer whole.
        for cfg in [
            EngineConfig { swa_full: true, ..Default::default() },
            EngineConfig { context_shift: true, ..Default::default() },
        ] {
            let p = plan(&model, &cfg, Some(1 << 40)).unwrap();
            assert_eq!((p.bytes_per_token, p.window_bytes), (all, 0));
        }
    }

    #[test]
    fn the_default_context_is_the_trained_one_limited_by_memory() {
        let (_dir, _path, model) = tiny();
        let trained = model.max_position;
        let cfg = EngineConfig::default();
        let f16 = kv_cache_bytes_per_token(&model, KvType::F16, KvType::F16) as u64;
        // Plenty of memory: the trained context, and four of them in the pool.
        let p = plan(&model, &cfg, Some(1 << 40)).unwrap();
        assert_eq!((p.max_ctx, p.kv_tokens), (trained, 4 * trained));
        assert_eq!(p.context_bytes(), trained as u64 * f16);
        // Room for 100 tokens: the longest context of whole blocks that fits,
        // and a pool of one context.
        let p = plan(&model, &cfg, Some(100 * f16)).unwrap();
        assert_eq!((p.max_ctx, p.kv_tokens), (96, 96));
        // A quantized cache fits a longer context in the same memory.
        let q8 = EngineConfig { cache_type_k: KvType::Q8_0, cache_type_v: KvType::Q8_0, ..cfg.clone() };
        let p = plan(&model, &q8, Some(100 * f16)).unwrap();
        assert_eq!(p.bytes_per_token as u64 * 64, f16 * 34, "34 bytes per 32 values instead of 64");
        assert_eq!(p.max_ctx, 176);
        let q4 = EngineConfig { cache_type_k: KvType::Q4_0, cache_type_v: KvType::Q4_0, ..cfg.clone() };
        assert_eq!(plan(&model, &q4, None).unwrap().bytes_per_token as u64 * 64, f16 * 18);
        // Memory unknown: the trained context capped at DEFAULT_MAX_CTX.
        assert_eq!(plan(&model, &cfg, None).unwrap().max_ctx, trained.min(DEFAULT_MAX_CTX));
    }

    #[test]
    fn a_context_that_does_not_fit_is_refused_with_what_it_needs() {
        let (_dir, _path, model) = tiny();
        let f16 = kv_cache_bytes_per_token(&model, KvType::F16, KvType::F16) as u64;
        let cfg = EngineConfig { max_ctx: Some(200), ..Default::default() };
        match plan(&model, &cfg, Some(100 * f16)) {
            Err(e @ EngineError::ContextTooLarge { ctx: 200, .. }) => {
                let msg = e.to_string();
                assert!(msg.contains("200-token context") && msg.contains("f16/f16"), "{msg}");
                assert!(msg.contains("--ctx-size") && msg.contains("--cache-type-k q8_0"), "{msg}");
            }
            other => panic!("expected ContextTooLarge, got {other:?}"),
        }
        // The same context in q4_0 fits.
        let q4 = EngineConfig { cache_type_k: KvType::Q4_0, cache_type_v: KvType::Q4_0, ..cfg.clone() };
        assert_eq!(plan(&model, &q4, Some(100 * f16)).unwrap().max_ctx, 200);
        // Past the trained context, the trained one.
        let long = EngineConfig { max_ctx: Some(1 << 20), ..Default::default() };
        assert_eq!(plan(&model, &long, Some(1 << 40)).unwrap().max_ctx, model.max_position);
        // An explicit pool is at least one context.
        let pool = EngineConfig { kv_tokens: Some(10), max_ctx: Some(64), ..Default::default() };
        assert_eq!(plan(&model, &pool, None).unwrap().kv_tokens, 64);
    }
}
