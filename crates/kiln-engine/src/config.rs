//! Engine settings.

/// How the engine runs a model.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct EngineConfig {
    /// Kernel threads (defaults to the available cores).
    pub threads: usize,
    /// Keep each kernel thread on its own CPU (on by default; Linux, and only
    /// where the process may use exactly `threads` CPUs, as with the default
    /// thread count or a `taskset` made for it). Unpinned, a
    /// request after idle time can run up to twice as slow for its first
    /// milliseconds while the scheduler puts two kernel threads on one CPU
    /// (`kiln_kernels::ThreadPool::pinned`).
    pub pin_threads: bool,
    /// On CPUs with AVX-512 BF16, keep the KV cache in bf16 pairs and
    /// compute prompt attention with bf16 dot products straight on it (f32
    /// sums, as GPU flash attention does); on by default. Off: an f16 cache
    /// and f32 attention throughout. Decode rows use the f32 kernel either
    /// way (docs/architecture.md, numbers in BENCHMARKS.md §4).
    pub bf16_attention: bool,
    /// Caps the CPU kernels' instruction-set level (`None`: the CPU's best,
    /// or `KILN_CPU_ISA`); applied before the model loads, for the whole
    /// process ([`kiln_kernels::isa`]). A level the CPU lacks is an error.
    pub cpu_isa: Option<kiln_kernels::CpuIsa>,
    /// Context length. The default on the CPU is the model's trained
    /// context, limited by the memory its KV cache needs
    /// ([`crate::memory::plan`]); on a GPU, the trained context capped at
    /// [`DEFAULT_MAX_CTX`]. Never more than the trained context.
    pub max_ctx: Option<usize>,
    /// How the KV cache stores K (`f16`, `q8_0`, `q4_0`; default `f16`,
    /// which the CPU keeps as bf16 with `bf16_attention`).
    #[serde(with = "kv_type_serde")]
    pub cache_type_k: kiln_models::KvType,
    /// How the KV cache stores V.
    #[serde(with = "kv_type_serde")]
    pub cache_type_v: kiln_models::KvType,
    /// Tokens per KV block.
    pub block_size: usize,
    /// KV pool size in tokens (defaults to four times the context length,
    /// so several conversations run at once and their prefixes stay cached;
    /// memory is committed only as blocks are first used).
    pub kv_tokens: Option<usize>,
    /// Maximum prompt tokens computed per forward pass (chunked prefill).
    pub prefill_chunk: usize,
    /// Maximum sequences decoded together (continuous batching).
    pub max_running: usize,
    /// Automatic prefix caching (on by default).
    pub prefix_caching: bool,
    /// After a chat answer ends (at an end-of-turn token or its token
    /// limit), compute the chat template's opening of the next user turn in
    /// the background, so the follow-up that repeats the conversation only
    /// computes its new message (on by default; needs `prefix_caching`).
    pub next_turn_prefill: bool,
    /// How long the engine must stay idle after a chat answer before it
    /// does that, in ms (default 50: a person takes longer to answer; a
    /// request that comes sooner is never delayed by it).
    pub next_turn_idle_ms: u64,
    /// Bytes of host memory for the second KV tier: cached prefix blocks
    /// evicted from the KV pool are kept here and copied back on a later
    /// prefix hit instead of recomputed. 0 (the default) turns it off.
    pub kv_tier_bytes: usize,
    /// Refuse to load a model whose weights, full KV cache and tier need
    /// more memory than is available (on by default).
    pub check_memory: bool,
    /// Where the model runs.
    pub device: Device,
    /// How a GPU runs it (with `device` = `Cuda`; the ordinal and step
    /// size come from `device` and `prefill_chunk`).
    pub cuda: kiln_cuda::CudaOptions,
    /// Speculative decoding by prompt lookup (off by default; a request may
    /// turn it off for itself with [`crate::Params::speculative`]).
    #[serde(default)]
    pub spec: crate::SpecConfig,
    /// Speculative decoding with a draft model instead of prompt lookup: a
    /// smaller model with the same vocabulary (GGUF file or Hugging Face
    /// directory), loaded on the same device (needs `spec` on).
    #[serde(default)]
    pub draft_model: Option<std::path::PathBuf>,
    /// Leading tokens of each marked segment computed in the request
    /// rather than copied from the segment cache: they attend to the text
    /// before the segment, which a segment computed alone never saw, and
    /// restore most of the answer quality (docs/segment-cache.md). 0 copies
    /// whole segments; a number past a segment's length computes it whole.
    #[serde(default = "default_segment_recompute")]
    pub segment_recompute: usize,
    /// Most tokens of a request's head (its tokens before the first
    /// segment: system prompt, template) each of its segments is computed
    /// after, rather than alone from position 0. The segment's K/V then
    /// saw the same start of the text (the first token every later token
    /// attends to most) and the instructions, as in a full prefill; a
    /// segment is found again only after the same head. 0 computes
    /// segments alone (docs/segment-cache.md).
    #[serde(default = "default_segment_context")]
    pub segment_context: usize,
    /// Most segments one request may mark.
    #[serde(default = "default_max_segments")]
    pub max_segments: usize,
    /// Context shift (off by default; docs/long-context.md): a chat whose
    /// rendered prompt does not fit the context loses its oldest turns
    /// (the system prompt and the last message stay), and an answer that
    /// reaches the context drops half of the tokens after the kept head
    /// ([`crate::Params::num_keep`], default the system prompt) and goes on,
    /// the kept keys re-rotated. Off, both end as before: a prompt too long
    /// is refused, an answer stops with `finish_reason` `length`. Needs a
    /// 16-bit KV cache and a backend with `kv_shift` (checked at load).
    #[serde(default)]
    pub context_shift: bool,
    /// Keep every layer's whole context, also in sliding-window layers
    /// (Gemma 3's local layers, gpt-oss's even ones). Off (the default),
    /// those layers keep about a window per sequence in a pool of their
    /// own (docs/long-context.md): a long context takes a fraction of the
    /// KV memory. Context shift and the segment cache need it on (context
    /// shift turns it on).
    #[serde(default)]
    pub swa_full: bool,
    /// LoRA adapters registered at start, `(name, path)` (more can be
    /// loaded at run time: [`crate::EngineHandle::load_lora`]).
    pub loras: Vec<(String, std::path::PathBuf)>,
    /// LoRA adapters merged into the weights at load, `(path, scale)`,
    /// all together (`--lora-merge`).
    pub lora_merge: Vec<(std::path::PathBuf, f32)>,
}

/// Where a model runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Device {
    /// The CPU, with kiln's own kernels.
    #[default]
    Cpu,
    /// NVIDIA GPU number N (needs a build with `--features cuda`).
    Cuda(usize),
    /// wgpu adapter number N: Vulkan, Metal, DX12 or GL (needs a build
    /// with `--features wgpu`; `KILN_WGPU_BACKEND` picks the API).
    Wgpu(usize),
}

impl std::str::FromStr for Device {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "cpu" => Ok(Self::Cpu),
            "cuda" | "gpu" => Ok(Self::Cuda(0)),
            "wgpu" => Ok(Self::Wgpu(0)),
            d => match (d.strip_prefix("cuda:").map(str::parse), d.strip_prefix("wgpu:").map(str::parse)) {
                (Some(Ok(n)), _) => Ok(Self::Cuda(n)),
                (_, Some(Ok(n))) => Ok(Self::Wgpu(n)),
                _ => Err(format!("unknown device '{s}' (use cpu, cuda, cuda:N, wgpu or wgpu:N)")),
            },
        }
    }
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Cpu => f.write_str("cpu"),
            Self::Cuda(n) => write!(f, "cuda:{n}"),
            Self::Wgpu(n) => write!(f, "wgpu:{n}"),
        }
    }
}

/// Default prompt tokens per forward pass on a GPU: one 2048-token chunk
/// costs about as much per token as a bigger one, and far less than eight
/// 256-token steps.
pub const GPU_PREFILL_CHUNK: usize = 2048;

impl EngineConfig {
    /// The defaults for running on `device` (a larger prefill chunk on a GPU).
    pub fn for_device(device: Device) -> Self {
        let prefill_chunk = match device {
            Device::Cpu => Self::default().prefill_chunk,
            Device::Cuda(_) => GPU_PREFILL_CHUNK,
            // The portable kernels run one workgroup per output row and 8
            // input rows: a mid-sized chunk keeps the logits and scratch
            // buffers inside every adapter's binding limit.
            Device::Wgpu(_) => WGPU_PREFILL_CHUNK,
        };
        Self { device, prefill_chunk, ..Self::default() }
    }
}

/// Default prompt tokens per forward pass on a wgpu device.
pub const WGPU_PREFILL_CHUNK: usize = 512;

/// A KV type in configs by its name (`"q8_0"`).
mod kv_type_serde {
    use kiln_models::KvType;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(t: &KvType, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(t.name())
    }
    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<KvType, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Default context cap on a GPU when the model's own context is larger
/// (and on the CPU where the available memory cannot be read).
pub const DEFAULT_MAX_CTX: usize = 4096;

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            threads: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
            pin_threads: true,
            bf16_attention: true,
            cpu_isa: None,
            max_ctx: None,
            cache_type_k: kiln_models::KvType::F16,
            cache_type_v: kiln_models::KvType::F16,
            block_size: 16,
            kv_tokens: None,
            prefill_chunk: 256,
            max_running: 64,
            prefix_caching: true,
            next_turn_prefill: true,
            next_turn_idle_ms: 50,
            kv_tier_bytes: 0,
            check_memory: true,
            device: Device::Cpu,
            cuda: kiln_cuda::CudaOptions::default(),
            spec: crate::SpecConfig::default(),
            draft_model: None,
            loras: Vec::new(),
            lora_merge: Vec::new(),
            segment_recompute: DEFAULT_SEGMENT_RECOMPUTE,
            segment_context: DEFAULT_SEGMENT_CONTEXT,
            max_segments: DEFAULT_MAX_SEGMENTS,
            context_shift: false,
            swa_full: false,
        }
    }
}

/// Default [`EngineConfig::segment_recompute`].
pub const DEFAULT_SEGMENT_RECOMPUTE: usize = 16;
/// Default [`EngineConfig::segment_context`].
pub const DEFAULT_SEGMENT_CONTEXT: usize = 64;
/// Default [`EngineConfig::max_segments`].
pub const DEFAULT_MAX_SEGMENTS: usize = 64;

fn default_segment_recompute() -> usize {
    DEFAULT_SEGMENT_RECOMPUTE
}
fn default_segment_context() -> usize {
    DEFAULT_SEGMENT_CONTEXT
}
fn default_max_segments() -> usize {
    DEFAULT_MAX_SEGMENTS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_parse_and_print() {
        assert_eq!("cpu".parse(), Ok(Device::Cpu));
        assert_eq!("CUDA".parse(), Ok(Device::Cuda(0)));
        assert_eq!("cuda:3".parse(), Ok(Device::Cuda(3)));
        assert!("cuda:x".parse::<Device>().is_err());
        assert!("metal".parse::<Device>().is_err());
        assert_eq!(Device::Cuda(1).to_string(), "cuda:1");
        assert_eq!("wgpu".parse(), Ok(Device::Wgpu(0)));
        assert_eq!("WGPU:2".parse(), Ok(Device::Wgpu(2)));
        assert!("wgpu:".parse::<Device>().is_err());
        assert_eq!(Device::Wgpu(1).to_string(), "wgpu:1");
        assert_eq!(EngineConfig::for_device(Device::Wgpu(0)).prefill_chunk, WGPU_PREFILL_CHUNK);
        assert_eq!(EngineConfig::for_device(Device::Cuda(0)).prefill_chunk, GPU_PREFILL_CHUNK);
        assert_eq!(EngineConfig::for_device(Device::Cpu), EngineConfig::default());
        let c = EngineConfig { device: Device::Cuda(2), ..EngineConfig::default() };
        let back: EngineConfig = serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
        assert_eq!(back.device, Device::Cuda(2));
    }
}
