//! Flags shared by the commands that generate text.

use clap::Args;
use kiln_core::{SamplingParams, StopParams};
use kiln_engine::{EngineConfig, KvType};

/// The KV cache's types and layout (shared by the commands that load a model and by `kiln bench`).
#[derive(Debug, Clone, Copy, Args)]
pub struct KvCacheArgs {
    /// How the KV cache stores keys: `f16` (bf16 where the CPU's bf16
    /// attention runs), `q8_0` (about half the memory) or `q4_0` (about a
    /// quarter); as llama.cpp's `-ctk`, which is accepted too.
    #[arg(long = "cache-type-k", env = "KILN_CACHE_TYPE_K", value_name = "TYPE", default_value = "f16")]
    pub cache_type_k: KvType,
    /// How the KV cache stores values (as `--cache-type-k`; `-ctv` too).
    #[arg(long = "cache-type-v", env = "KILN_CACHE_TYPE_V", value_name = "TYPE", default_value = "f16")]
    pub cache_type_v: KvType,
    /// Keep the whole context in sliding-window layers too (Gemma 3's
    /// local layers, gpt-oss's even ones). By default they keep about a
    /// window per sequence, a fraction of the KV memory at long contexts
    /// (docs/long-context.md); the segment cache needs this flag.
    #[arg(long, env = "KILN_SWA_FULL")]
    pub swa_full: bool,
}

impl KvCacheArgs {
    /// Sets the cache types of `c`.
    pub fn apply(&self, c: &mut EngineConfig) {
        c.cache_type_k = self.cache_type_k;
        c.cache_type_v = self.cache_type_v;
        c.swa_full = self.swa_full;
    }
}

/// llama.cpp's multi-letter short flags, rewritten to kiln's long ones
/// before parsing (`-ctk q8_0`, `-ctv=q4_0`).
pub fn llama_aliases(args: impl IntoIterator<Item = std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    const MAP: [(&str, &str); 2] = [("-ctk", "--cache-type-k"), ("-ctv", "--cache-type-v")];
    args.into_iter()
        .map(|a| {
            let Some(s) = a.to_str() else { return a };
            for (short, long) in MAP {
                if s == short {
                    return long.into();
                }
                if let Some(v) = s.strip_prefix(short).and_then(|r| r.strip_prefix('=')) {
                    return format!("{long}={v}").into();
                }
            }
            a
        })
        .collect()
}

/// Engine flags.
#[derive(Debug, Clone, Args)]
pub struct EngineArgs {
    /// Kernel threads (default: all cores).
    #[arg(long, env = "KILN_THREADS")]
    pub threads: Option<usize>,
    /// Let the OS move kernel threads between CPUs (by default each stays on
    /// its own CPU where there are enough: requests after idle time start faster).
    #[arg(long)]
    pub no_pin_threads: bool,
    /// Keep the KV cache in f16 and compute attention in f32 throughout (by
    /// default, where the CPU has AVX-512 BF16, the cache holds bf16 and
    /// prompt attention uses bf16 dot products with f32 sums).
    #[arg(long)]
    pub f32_attention: bool,
    /// Cap the CPU kernels' instruction set: `scalar`, `avx2`, `avx2-vnni` or
    /// `avx512` (default: the best this CPU has; asking for one it lacks is an error).
    #[arg(long, env = "KILN_CPU_ISA", value_name = "LEVEL")]
    pub cpu_isa: Option<kiln_engine::CpuIsa>,
    /// Context length (default: the model's trained context where its KV
    /// cache fits in the available memory, else the longest that fits; on a
    /// GPU, capped at 4096). A context whose KV cache does not fit is an error.
    #[arg(long = "ctx-size", env = "KILN_CTX_SIZE")]
    pub ctx_size: Option<usize>,
    #[command(flatten)]
    pub kv_cache: KvCacheArgs,
    /// Prompt tokens computed per forward pass (chunked prefill; default 256, 2048 on a GPU).
    #[arg(long, env = "KILN_PREFILL_CHUNK")]
    pub prefill_chunk: Option<usize>,
    /// Most sequences decoded together (continuous batching; default 64).
    #[arg(long, env = "KILN_MAX_RUNNING")]
    pub max_running: Option<usize>,
    /// KV cache size in tokens, shared by all sequences (default: 4 × context).
    #[arg(long, env = "KILN_KV_CACHE_TOKENS")]
    pub kv_cache_tokens: Option<usize>,
    /// Turn automatic prefix caching off (every prompt is computed in full).
    #[arg(long)]
    pub no_prefix_cache: bool,
    /// Do not prefill the chat template's opening of the next user turn after
    /// a chat answer ends (by default the follow-up finds it cached).
    #[arg(long)]
    pub no_next_turn_prefill: bool,
    /// Host memory (MiB) for a second KV tier: cached prefixes evicted from the
    /// KV cache are kept there and copied back instead of recomputed (default 0: off).
    #[arg(long, env = "KILN_KV_TIER_MIB", default_value_t = 0)]
    pub kv_tier_mib: usize,
    /// Where the model runs: `cpu`, `cuda` or `cuda:N` (CUDA needs a build with
    /// `--features cuda`; its KV cache then defaults to the free GPU memory),
    /// `wgpu` or `wgpu:N` (Vulkan, Metal, DX12 or GL: a build with `--features
    /// wgpu`; `KILN_WGPU_BACKEND` picks the API; `kiln list-devices` numbers them).
    #[arg(long, env = "KILN_DEVICE", default_value = "cpu")]
    pub device: kiln_engine::Device,
    /// A CUDA setting, `KEY=VALUE` (repeatable; `--cuda help` lists them):
    /// for checks and A/B runs, the defaults are the fastest measured.
    #[arg(long = "cuda", value_name = "KEY=VALUE", env = "KILN_CUDA", value_delimiter = ',')]
    pub cuda: Vec<String>,
    /// Speculative decoding: `ngram` proposes the tokens that followed the
    /// latest earlier occurrence of the last few tokens (prompt lookup);
    /// a model (catalogue name, GGUF file or HF directory) with the same
    /// vocabulary drafts them instead. Proposals are verified in one pass;
    /// the output is the same as without it.
    #[arg(long, env = "KILN_DRAFT", value_name = "ngram|MODEL")]
    pub draft: Option<String>,
    /// Most tokens proposed per step with `--draft`.
    #[arg(long, env = "KILN_DRAFT_MAX", default_value_t = 8)]
    pub draft_max: usize,
    /// Leading tokens of each marked segment computed in the request rather
    /// than copied from the segment cache (they restore the attention to
    /// the text before the segment; docs/segment-cache.md).
    #[arg(long, env = "KILN_SEGMENT_RECOMPUTE", default_value_t = kiln_engine::DEFAULT_SEGMENT_RECOMPUTE)]
    pub segment_recompute: usize,
    /// Most tokens of a request's head (before its first segment) each
    /// segment is computed after; 0 computes segments alone
    /// (docs/segment-cache.md).
    #[arg(long, env = "KILN_SEGMENT_CONTEXT", default_value_t = kiln_engine::DEFAULT_SEGMENT_CONTEXT)]
    pub segment_context: usize,
    /// Most segments one request may mark.
    #[arg(long, env = "KILN_MAX_SEGMENTS", default_value_t = kiln_engine::DEFAULT_MAX_SEGMENTS)]
    pub max_segments: usize,
    /// Context shift: a chat longer than the context loses its oldest turns
    /// (the system prompt and the last message stay), and an answer that
    /// reaches the context drops half of the tokens after the system prompt
    /// (Ollama's `num_keep`) and goes on (docs/long-context.md). Off: a
    /// prompt too long is a 400, an answer stops at the context. Needs an
    /// f16 KV cache.
    #[arg(long, env = "KILN_CONTEXT_SHIFT")]
    pub context_shift: bool,
}

impl EngineArgs {
    /// The engine configuration these flags describe (an invalid `--cuda`
    /// setting is an error that names it).
    pub fn config(&self) -> anyhow::Result<EngineConfig> {
        let mut c = EngineConfig::for_device(self.device);
        for kv in &self.cuda {
            if kv == "help" {
                let keys: Vec<String> =
                    kiln_engine::CudaOptions::KEYS.iter().map(|(k, what)| format!("  {k}: {what}")).collect();
                anyhow::bail!("--cuda KEY=VALUE settings:\n{}", keys.join("\n"));
            }
            c.cuda.set(kv).map_err(anyhow::Error::msg)?;
        }
        if let Some(t) = self.threads {
            c.threads = t.max(1);
        }
        c.pin_threads = !self.no_pin_threads;
        c.bf16_attention = !self.f32_attention;
        c.cpu_isa = self.cpu_isa;
        c.max_ctx = self.ctx_size;
        if self.ctx_size == Some(0) {
            anyhow::bail!("--ctx-size must be at least 1");
        }
        self.kv_cache.apply(&mut c);
        if let Some(n) = self.prefill_chunk {
            c.prefill_chunk = n.max(1);
        }
        if let Some(n) = self.max_running {
            c.max_running = n.max(1);
        }
        c.kv_tokens = self.kv_cache_tokens;
        c.prefix_caching = !self.no_prefix_cache;
        c.next_turn_prefill = !self.no_next_turn_prefill;
        c.kv_tier_bytes = self.kv_tier_mib.saturating_mul(1 << 20);
        set_draft(&mut c, self.draft.as_deref(), self.draft_max)?;
        c.segment_recompute = self.segment_recompute;
        c.segment_context = self.segment_context;
        c.max_segments = self.max_segments;
        c.context_shift = self.context_shift;
        Ok(c)
    }
}

/// Sets the speculation settings of `--draft` and `--draft-max`: `ngram`,
/// a draft model (resolved, and fetched if it is a catalogue name), or off.
pub fn set_draft(c: &mut EngineConfig, draft: Option<&str>, max: usize) -> anyhow::Result<()> {
    (c.spec, c.draft_model) = match draft {
        None | Some("off" | "none") => (kiln_engine::SpecConfig::default(), None),
        Some(_) if !(1..=64).contains(&max) => anyhow::bail!("--draft-max must be between 1 and 64, got {max}"),
        Some("ngram") => (kiln_engine::SpecConfig::ngram(max), None),
        Some(model) => {
            let path = crate::models::resolve(model)
                .map_err(|e| anyhow::anyhow!("--draft {model}: not `ngram`, and not a model: {e:#}"))?;
            (kiln_engine::SpecConfig::ngram(max), Some(path))
        }
    };
    Ok(())
}

/// LoRA flags of `run` and `chat`.
#[derive(Debug, Clone, Args)]
pub struct LoraArgs {
    /// A LoRA adapter (a PEFT directory or a llama.cpp GGUF LoRA file) with
    /// an optional scale, e.g. `--lora ./sql-lora:0.8`; repeat it to apply
    /// several together.
    #[arg(long = "lora", value_name = "PATH[:SCALE]")]
    pub lora: Vec<String>,
    /// Merge the `--lora` adapters into the weights at load (dequantized to
    /// f32) instead of applying them unmerged each step.
    #[arg(long, requires = "lora")]
    pub lora_merge: bool,
}

impl LoraArgs {
    /// The adapters as (path, scale).
    pub fn list(&self) -> Vec<(std::path::PathBuf, f32)> {
        self.lora.iter().map(|s| kiln_engine::lora::parse_path_scale(s)).collect()
    }

    /// Applies the flags: merged adapters go into `cfg` before the engine
    /// starts; unmerged ones are registered on `engine` afterwards
    /// ([`LoraArgs::attach`]).
    pub fn configure(&self, cfg: &mut EngineConfig) {
        if self.lora_merge {
            cfg.lora_merge = self.list();
        }
    }

    /// Registers the unmerged adapters as one; returns what requests name.
    pub fn attach(&self, engine: &kiln_engine::EngineHandle) -> anyhow::Result<Option<kiln_engine::LoraRequest>> {
        if self.lora.is_empty() || self.lora_merge {
            return Ok(None);
        }
        let t0 = std::time::Instant::now();
        let info = engine.load_lora_stack("cli", &self.list())?;
        tracing::info!(rank = info.rank, ms = t0.elapsed().as_secs_f64() * 1e3, "LoRA adapter loaded");
        Ok(Some(kiln_engine::LoraRequest::new("cli")))
    }
}

/// Sampling and stopping flags.
#[derive(Debug, Clone, Args)]
pub struct SampleArgs {
    /// Maximum tokens to generate.
    #[arg(short = 'n', long, default_value_t = 256)]
    pub max_tokens: usize,
    /// Temperature (0 = greedy).
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub temperature: f32,
    /// Top-k (0 = off).
    #[arg(long, default_value_t = 0)]
    pub top_k: usize,
    /// Top-p (1 = off).
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f32,
    /// Min-p (0 = off).
    #[arg(long, default_value_t = 0.0)]
    pub min_p: f32,
    /// Repetition penalty (1 = off).
    #[arg(long, default_value_t = 1.0)]
    pub repeat_penalty: f32,
    /// Tokens the repetition penalty looks back over.
    #[arg(long, default_value_t = 64)]
    pub repeat_last_n: usize,
    /// Presence penalty.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub presence_penalty: f32,
    /// Frequency penalty.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub frequency_penalty: f32,
    /// Random seed (default: random).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Stop string (repeatable).
    #[arg(long)]
    pub stop: Vec<String>,
    /// Keep generating past end-of-sequence tokens.
    #[arg(long)]
    pub ignore_eos: bool,
}

impl SampleArgs {
    /// Sampling parameters.
    pub fn sampling(&self) -> SamplingParams {
        SamplingParams {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repetition_penalty: self.repeat_penalty,
            repeat_last_n: self.repeat_last_n,
            presence_penalty: self.presence_penalty,
            frequency_penalty: self.frequency_penalty,
            seed: self.seed,
            ..Default::default()
        }
    }
    /// Stop parameters.
    pub fn stop(&self) -> StopParams {
        StopParams {
            max_tokens: self.max_tokens,
            stop: self.stop.clone(),
            ignore_eos: self.ignore_eos,
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod kv_flag_tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        engine: EngineArgs,
    }

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        let argv = std::iter::once("kiln").chain(args.iter().copied()).map(std::ffi::OsString::from);
        Cli::try_parse_from(llama_aliases(argv))
    }

    #[test]
    fn cache_types_parse_with_long_and_llama_cpp_flags() {
        let c = parse(&[]).unwrap().engine.config().unwrap();
        assert_eq!((c.cache_type_k, c.cache_type_v), (KvType::F16, KvType::F16));
        let c = parse(&["--cache-type-k", "q8_0", "--cache-type-v", "q4_0"]).unwrap().engine.config().unwrap();
        assert_eq!((c.cache_type_k, c.cache_type_v), (KvType::Q8_0, KvType::Q4_0));
        let c = parse(&["-ctk", "q4_0", "-ctv=q8_0", "--ctx-size", "32768"]).unwrap().engine.config().unwrap();
        assert_eq!((c.cache_type_k, c.cache_type_v, c.max_ctx), (KvType::Q4_0, KvType::Q8_0, Some(32768)));
        // bf16 names the 16-bit cache too (the CPU's bf16 attention keeps it so).
        let c = parse(&["-ctk", "bf16"]).unwrap().engine.config().unwrap();
        assert_eq!(c.cache_type_k, KvType::F16);
    }

    #[test]
    fn bad_cache_types_and_contexts_are_clear_errors() {
        let e = parse(&["--cache-type-k", "q5_1"]).unwrap_err().to_string();
        assert!(e.contains("unknown KV cache type 'q5_1' (use f16, q8_0 or q4_0)"), "{e}");
        let e = parse(&["-ctv", "int8"]).unwrap_err().to_string();
        assert!(e.contains("--cache-type-v") && e.contains("'int8'"), "{e}");
        let e = parse(&["--ctx-size", "0"]).unwrap().engine.config().unwrap_err().to_string();
        assert!(e.contains("--ctx-size must be at least 1"), "{e}");
        // Other arguments that merely start like the aliases are left alone.
        let args = llama_aliases(["-ctkx", "x-ctk"].map(std::ffi::OsString::from));
        assert_eq!(args, ["-ctkx", "x-ctk"].map(std::ffi::OsString::from));
    }
}
