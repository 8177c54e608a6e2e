//! `kiln bench`: how fast kiln is, measured the way users would see it.
//!
//! * `kiln bench [MODEL]` drives the engine directly: for each prompt length
//!   it runs warm-up requests and then `--iterations` fixed-length
//!   generations (EOS ignored) on fresh random prompts, and reports TTFT,
//!   prefill and decode tok/s, inter-token latency percentiles, decode
//!   ms/token as the context grows, peak RSS, and decode speed as a fraction
//!   of the memory-bandwidth limit. `--json`, `--csv`, `--plot DIR`.
//! * `kiln bench serve --url URL` drives any OpenAI-compatible server with
//!   concurrent streaming clients.
//!
//! See docs/benchmarks.md for the full guide.

mod bandwidth;
mod embed;
mod engine;
mod lora;
mod peer;
mod plot;
mod report;
mod segments;
mod serve;
mod stats;
mod system;
mod workload;

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use kiln_engine::{EngineConfig, EngineHandle};
use kiln_models::ModelConfig;

use engine::Shape;
use report::RunMeta;

/// Arguments of `kiln bench`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct BenchArgs {
    #[command(subcommand)]
    mode: Option<Mode>,
    #[command(flatten)]
    engine: EngineBenchArgs,
}

#[derive(Debug, Subcommand)]
enum Mode {
    /// Load-test an OpenAI-compatible server (kiln, llama-server, vLLM ...).
    Serve(serve::ServeBenchArgs),
    /// Load-test a server's `/v1/embeddings` (kiln, llama-server --embedding ...).
    Embed(embed::EmbedBenchArgs),
    /// The segment cache on a RAG workload: time to first token and answer
    /// agreement with full prefill, per segment recompute value.
    Segments(Box<segments::SegmentBenchArgs>),
}

/// Arguments of engine-direct `kiln bench`.
#[derive(Debug, Args)]
struct EngineBenchArgs {
    /// Model: `smollm2` (default), `hf:org/repo[:file]`, or a local path.
    #[arg(default_value = "smollm2")]
    model: String,
    /// Prompt lengths in tokens, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "128,512,2048")]
    prompt_lens: Vec<usize>,
    /// Generated tokens per request (EOS ignored).
    #[arg(long, default_value_t = 128)]
    gen_len: usize,
    /// Measured iterations per configuration.
    #[arg(long, default_value_t = 10)]
    iterations: usize,
    /// Unmeasured warm-up requests per configuration.
    #[arg(long, default_value_t = 1)]
    warmup: usize,
    /// Requests run at once in each iteration (continuous batching); the
    /// numbers are per stream.
    #[arg(long, default_value_t = 1)]
    streams: usize,
    /// Kernel threads (default: all cores).
    #[arg(long, env = "KILN_THREADS")]
    threads: Option<usize>,
    /// Device: `cpu`, `cuda[:N]` (a build with `--features cuda`) or
    /// `wgpu[:N]` (a build with `--features wgpu`).
    #[arg(long, default_value = "cpu")]
    device: kiln_engine::Device,
    /// A CUDA setting, `KEY=VALUE` (repeatable; as `kiln run --cuda`).
    #[arg(long = "cuda", value_name = "KEY=VALUE", env = "KILN_CUDA", value_delimiter = ',')]
    cuda: Vec<String>,
    /// Prompt tokens computed per forward pass (default: the engine's).
    #[arg(long)]
    prefill_chunk: Option<usize>,
    /// Let the OS move kernel threads between CPUs (pinned by default).
    #[arg(long)]
    no_pin_threads: bool,
    /// An f16 KV cache and f32 attention throughout (by default, where the
    /// CPU has AVX-512 BF16, the cache holds bf16 and prompt attention uses
    /// bf16 dot products).
    #[arg(long)]
    f32_attention: bool,
    #[command(flatten)]
    kv_cache: crate::args::KvCacheArgs,
    /// Context length (default: the longest prompt plus generation, at
    /// least 4096; as `kiln run --ctx-size`).
    #[arg(long = "ctx-size")]
    ctx_size: Option<usize>,
    /// Cap the CPU kernels' instruction set (as `kiln run --cpu-isa`).
    #[arg(long, env = "KILN_CPU_ISA", value_name = "LEVEL")]
    cpu_isa: Option<kiln_engine::CpuIsa>,
    /// Seed of the random prompts and the sampler.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Speculative decoding (as `kiln run --draft ngram|MODEL`). The random
    /// prompts do not repeat: with `ngram` this measures what speculation
    /// costs where it cannot help.
    #[arg(long, value_name = "ngram|MODEL")]
    draft: Option<String>,
    /// Most tokens proposed per step with `--draft`.
    #[arg(long, default_value_t = 8)]
    draft_max: usize,
    /// Instead of generations: time single forward steps of one sequence
    /// with this many new rows (comma separated, e.g. 1,5,9) at
    /// `--step-context` tokens; a step of more than one row returns every
    /// row's logits, as speculative verification does. Prints each step's
    /// median ms and its cost in one-row steps.
    #[arg(long, value_delimiter = ',')]
    step_rows: Vec<usize>,
    /// Context of the `--step-rows` steps.
    #[arg(long, default_value_t = 512)]
    step_context: usize,
    /// Context depths at which to also measure decode ms/token with a short
    /// generation (`--sweep-gen` tokens), comma separated, e.g. 128,1024,2048.
    #[arg(long, value_delimiter = ',')]
    ctx_sweep: Vec<usize>,
    /// Tokens generated at each context-sweep depth.
    #[arg(long, default_value_t = 32)]
    sweep_gen: usize,
    /// Iterations at each context-sweep depth.
    #[arg(long, default_value_t = 3)]
    sweep_iterations: usize,
    /// Skip the memory-bandwidth measurement (and the limit column).
    #[arg(long)]
    no_bandwidth: bool,
    /// Size of each bandwidth buffer in MiB (must exceed the caches).
    #[arg(long, default_value_t = 256)]
    bandwidth_mib: usize,
    /// Print JSON (one object per configuration) on stdout; the table goes to stderr.
    #[arg(long, conflicts_with = "csv")]
    json: bool,
    /// Print CSV on stdout; the table goes to stderr.
    #[arg(long)]
    csv: bool,
    /// Write plots (PNG and SVG) into this directory.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Constrain every generation: `json` (any object) or a JSON schema
    /// file (structured-output cost; give a schema that can run as long as
    /// `--gen-len`, such as an open-ended array: benches/data/json-array-schema.json).
    #[arg(long, value_name = "json|SCHEMA.json")]
    constrain: Option<PathBuf>,
    /// llama-bench JSON (`-o json`) of a peer on the same model and threads:
    /// prints kiln/peer ratios and draws the peer on the plots.
    #[arg(long)]
    peer_json: Option<PathBuf>,
    /// A LoRA adapter, `PATH[:SCALE]` (a PEFT directory or a GGUF LoRA
    /// file); repeatable. Every configuration then runs twice, on the base
    /// model and with the adapters (request k of an iteration uses adapter
    /// k mod n), side by side, and each adapter's load time is reported.
    #[arg(long = "lora", value_name = "PATH[:SCALE]")]
    lora: Vec<String>,
}

/// Runs `kiln bench`.
pub fn run(a: BenchArgs) -> Result<()> {
    match a.mode {
        Some(Mode::Serve(s)) => serve::run(s),
        Some(Mode::Embed(e)) => embed::run(e),
        Some(Mode::Segments(s)) => segments::run(*s),
        None => run_engine(a.engine),
    }
}

fn shapes(a: &EngineBenchArgs) -> Result<Vec<Shape>> {
    if a.prompt_lens.is_empty() || a.prompt_lens.contains(&0) {
        bail!("--prompt-lens must list positive lengths");
    }
    if a.gen_len < 2 || a.iterations == 0 || a.streams == 0 {
        bail!("--gen-len must be at least 2 (decode excludes the first token), --iterations and --streams at least 1");
    }
    let mut v: Vec<Shape> = a
        .prompt_lens
        .iter()
        .map(|&p| Shape { prompt: p, gen: a.gen_len, iterations: a.iterations, sweep: false })
        .collect();
    if !a.ctx_sweep.is_empty() {
        if a.sweep_gen < 2 || a.ctx_sweep.contains(&0) {
            bail!("--ctx-sweep depths must be positive and --sweep-gen at least 2");
        }
        v.extend(a.ctx_sweep.iter().map(|&d| Shape {
            prompt: d,
            gen: a.sweep_gen,
            iterations: a.sweep_iterations.max(1),
            sweep: true,
        }));
    }
    Ok(v)
}

/// The engine settings the flags name that both `--step-rows` and the
/// generation runs take: device, CUDA settings, threads, pinning, the
/// attention precision, the instruction-set cap and the KV cache types.
fn base_config(a: &EngineBenchArgs) -> Result<EngineConfig> {
    let mut cfg = EngineConfig::for_device(a.device);
    for kv in &a.cuda {
        cfg.cuda.set(kv).map_err(anyhow::Error::msg)?;
    }
    if let Some(c) = a.prefill_chunk {
        cfg.prefill_chunk = c.max(1);
    }
    if let Some(t) = a.threads {
        cfg.threads = t.max(1);
    }
    cfg.pin_threads = !a.no_pin_threads;
    cfg.bf16_attention = !a.f32_attention;
    cfg.cpu_isa = a.cpu_isa;
    a.kv_cache.apply(&mut cfg);
    Ok(cfg)
}

/// `--step-rows`: one-sequence step times at a fixed context.
fn step_rows(a: &EngineBenchArgs, path: &Path) -> Result<()> {
    if a.draft.is_some() || !a.lora.is_empty() || a.streams > 1 {
        bail!("--step-rows times bare forward steps: --draft, --lora and --streams do not apply");
    }
    let cfg = base_config(a)?;
    let iters = a.iterations.max(5) * 4;
    let kv = format!("{}/{}", cfg.cache_type_k, cfg.cache_type_v);
    eprintln!(
        "{}: steps of one sequence at {} tokens of context on {}, KV cache {kv}",
        a.model, a.step_context, a.device
    );
    let times = kiln_engine::probe::step_times(path, &cfg, a.step_context, &a.step_rows, iters)?;
    let one = times.iter().find(|t| t.rows == 1).map(|t| t.ms);
    if a.json {
        for t in &times {
            let ratio = one.map(|o| t.ms / o);
            let rec = serde_json::json!({"model": a.model, "device": a.device.to_string(), "context": a.step_context,
                "kv_cache": kv, "rows": t.rows, "ms": t.ms, "x_one_row": ratio});
            println!("{rec}");
        }
    }
    eprintln!("| rows | ms/step (median of {iters}) | x one-row step |");
    eprintln!("| --- | --- | --- |");
    for t in &times {
        let ratio = one.map_or("-".into(), |o| format!("{:.2}", t.ms / o));
        eprintln!("| {} | {:.3} | {ratio} |", t.rows, t.ms);
    }
    Ok(())
}

/// FLOPs of the matmuls per token (2 per multiply-add), attention excluded.
fn flops_per_token(c: &ModelConfig) -> f64 {
    matmul_flops(c.num_layers, c.hidden_size, c.q_dim(), c.kv_dim(), c.intermediate_size, c.vocab_size)
}

/// 2 x (per layer: Q, K, V, O and the three MLP matrices; plus the output head).
fn matmul_flops(layers: usize, hidden: usize, q: usize, kv: usize, ff: usize, vocab: usize) -> f64 {
    let (h, q, kv, ff) = (hidden as f64, q as f64, kv as f64, ff as f64);
    let per_layer = h * (q + 2.0 * kv) + q * h + 3.0 * h * ff;
    2.0 * (layers as f64 * per_layer + vocab as f64 * h)
}

fn run_engine(a: EngineBenchArgs) -> Result<()> {
    let shapes = shapes(&a)?;
    if cfg!(debug_assertions) {
        eprintln!("warning: this kiln is a debug build; build with `cargo build --release` for meaningful numbers");
    }
    let path = crate::models::resolve(&a.model)?;
    if !a.step_rows.is_empty() {
        return step_rows(&a, &path);
    }
    let gpu = a.device != kiln_engine::Device::Cpu;
    let mut cfg = base_config(&a)?;
    crate::args::set_draft(&mut cfg, a.draft.as_deref(), a.draft_max)?;
    let needed = shapes.iter().map(|s| s.prompt + s.gen + 1).max().unwrap_or(1);
    cfg.max_ctx = Some(a.ctx_size.unwrap_or(needed.max(kiln_engine::DEFAULT_MAX_CTX)));
    let machine = system::Machine::now();
    // The host memory bandwidth bounds CPU decoding only.
    let bandwidth = (!a.no_bandwidth && !gpu).then(|| {
        eprintln!("measuring memory bandwidth ({} threads, 2 x {} MiB)...", cfg.threads, a.bandwidth_mib);
        bandwidth::measure(cfg.threads, a.bandwidth_mib, 5)
    });
    let handle = EngineHandle::start(&path, cfg.clone()).with_context(|| format!("loading {}", path.display()))?;
    let info = handle.info().clone();
    let mut meta = RunMeta {
        model: a.model.clone(),
        backend: if gpu { format!("kiln-{}", a.device) } else { "kiln-cpu".into() },
        threads: info.threads,
        pinned_threads: info.pinned_threads,
        attention: if gpu {
            "-"
        } else if info.bf16_attention {
            "bf16"
        } else {
            "f32"
        },
        cpu_isa: info.cpu_isa.map_or("-", |l| l.name()),
        kv_cache: info.kv_types(),
        prefill_chunk: cfg.prefill_chunk,
        seed: a.seed,
        streams: a.streams.max(1),
        weight_bytes_per_token: info.weight_bytes_per_token,
        kv_bytes_per_token: info.kv_bytes_per_token(),
        flops_per_token: flops_per_token(&info.config),
        machine,
        bandwidth,
    };
    let constraint = match a.constrain.as_deref() {
        None => None,
        Some(p) if p.as_os_str() == "json" => Some(kiln_grammar::Constraint::JsonObject),
        Some(p) => {
            let text = std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            let schema = serde_json::from_str(&text).with_context(|| format!("{} is not JSON", p.display()))?;
            Some(kiln_grammar::Constraint::JsonSchema(schema))
        }
    };
    if let Some(c) = &constraint {
        handle.check_constraint(c)?;
        eprintln!("every generation is constrained ({})", a.constrain.as_deref().unwrap_or(Path::new("")).display());
    }
    let loras = lora::load(&handle, &a.lora)?;
    let (results, with_lora) = if loras.adapters.is_empty() {
        (engine::run_all(&handle, &shapes, (a.warmup, a.streams), a.seed, constraint.as_ref(), &[])?, Vec::new())
    } else {
        // Base and adapters alternate iteration by iteration on the same
        // prompts (a noisy machine's drift moves both alike).
        let arms: [&[_]; 2] = [&[], &loras.adapters];
        let mut r = engine::run_arms(&handle, &shapes, (a.warmup, a.streams), a.seed, constraint.as_ref(), &arms)?;
        let with = r.pop().unwrap_or_default();
        (r.pop().unwrap_or_default(), with)
    };
    handle.shutdown();
    // This kind of VM has slow and fast memory phases: sample the bandwidth
    // again after the runs and keep the better of the two, so the limit stays
    // an upper bound.
    if let Some(before) = meta.bandwidth {
        meta.bandwidth = Some(before.best_with(bandwidth::measure(cfg.threads, a.bandwidth_mib, 5)));
    }
    let table = report::table(&meta, &results);
    let peer = a.peer_json.as_deref().map(peer::load).transpose()?;
    let ratios = peer.as_ref().map(|p| peer::ratio_table(p, &results));
    if a.json || a.csv {
        eprint!("{table}");
        if let Some(r) = &ratios {
            eprint!("{r}");
        }
        if a.json {
            println!("{}", serde_json::to_string_pretty(&report::to_json(&meta, &results))?);
        } else {
            print!("{}", report::to_csv(&meta, &results));
        }
    } else {
        print!("{table}");
        if let Some(r) = &ratios {
            print!("{r}");
        }
    }
    if !with_lora.is_empty() {
        let meta = RunMeta { backend: format!("{} + LoRA", meta.backend), ..meta.clone() };
        let text = format!(
            "\nwith the adapters:\n{}{}",
            report::table(&meta, &with_lora),
            lora::summary(&loras, &results, &with_lora)
        );
        if a.json || a.csv {
            eprint!("{text}");
        } else {
            print!("{text}");
        }
    }
    if let Some(dir) = &a.plot {
        let written = plot::write_all(dir, &meta, &results, peer.as_ref())?;
        for w in written {
            eprintln!("wrote {}", w.display());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use kiln_engine::KvType;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(subcommand)]
        cmd: Top,
    }
    #[derive(Debug, Subcommand)]
    enum Top {
        Bench(BenchArgs),
    }

    fn parse(args: &[&str]) -> Result<BenchArgs> {
        let mut v = vec!["kiln", "bench"];
        v.extend_from_slice(args);
        let Top::Bench(b) = Cli::try_parse_from(v)?.cmd;
        Ok(b)
    }

    #[test]
    fn defaults_follow_the_issue() -> Result<()> {
        let b = parse(&[])?;
        assert!(b.mode.is_none());
        let e = &b.engine;
        assert_eq!((e.model.as_str(), e.gen_len, e.iterations, e.seed), ("smollm2", 128, 10, 42));
        assert_eq!(e.prompt_lens, vec![128, 512, 2048]);
        assert_eq!(shapes(e)?.len(), 3);
        Ok(())
    }

    #[test]
    fn step_rows_take_the_cache_types_and_refuse_what_they_cannot_time() -> Result<()> {
        let b = parse(&["--step-rows", "1", "--cache-type-k", "q8_0", "--cache-type-v", "q4_0", "--threads", "3"])?;
        let c = base_config(&b.engine)?;
        assert_eq!((c.cache_type_k, c.cache_type_v, c.threads), (KvType::Q8_0, KvType::Q4_0, 3));
        let b = parse(&["--step-rows", "1", "--streams", "4"])?;
        let e = step_rows(&b.engine, Path::new("/nonexistent.gguf")).unwrap_err().to_string();
        assert!(e.contains("--streams"), "{e}");
        Ok(())
    }

    #[test]
    fn model_sweep_and_serve_parse() -> Result<()> {
        let b = parse(&["/tmp/m.gguf", "--prompt-lens", "8,16", "--ctx-sweep", "32,64", "--json"])?;
        assert_eq!(b.engine.model, "/tmp/m.gguf");
        let s = shapes(&b.engine)?;
        assert_eq!(s.len(), 4);
        assert!(s[2].sweep && s[2].prompt == 32 && s[2].gen == 32);
        let b = parse(&["serve", "--url", "http://x:1", "--concurrency", "4"])?;
        assert!(matches!(b.mode, Some(Mode::Serve(_))));
        assert!(parse(&["--prompt-lens", "0"]).ok().map(|b| shapes(&b.engine).is_err()).unwrap_or(false));
        assert!(parse(&["--json", "--csv"]).is_err());
        Ok(())
    }

    #[test]
    fn devices_are_checked_clearly() -> Result<()> {
        assert!(parse(&["--device", "metal"]).is_err(), "unknown devices are refused by the parser");
        if !kiln_cuda_available() {
            let b = parse(&["--device", "cuda", "--no-bandwidth"])?;
            let err = run(b).err().map(|e| format!("{e:#}")).unwrap_or_default();
            assert!(err.contains("built without CUDA support"), "{err}");
        }
        Ok(())
    }

    fn kiln_cuda_available() -> bool {
        cfg!(feature = "cuda")
    }

    #[test]
    fn flops_count_matmuls() {
        // SmolLM2-135M: 30 layers, 576 wide, 9 heads x 64, 3 KV heads, 1536 MLP, 49152 vocab: ~134M matmul params.
        let f = matmul_flops(30, 576, 576, 192, 1536, 49152);
        let params = 30.0 * (576.0 * (576.0 + 384.0) + 576.0 * 576.0 + 3.0 * 576.0 * 1536.0) + 49152.0 * 576.0;
        assert_eq!(f, 2.0 * params);
        assert!((f / 2e6 - 134.0).abs() < 1.0, "{f}");
    }

    /// The whole engine-direct path on a tiny random model: one iteration,
    /// tiny lengths, JSON/CSV/plots written, no prefix-cache hits.
    #[test]
    fn smoke_on_a_tiny_model() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let model = dir.path().join("tiny.gguf");
        kiln_models::testing::write_tiny_chat_model(&model, kiln_gguf::GgmlType::F32, 256)?;
        let h =
            EngineHandle::start(&model, EngineConfig { threads: 1, max_ctx: Some(256), ..EngineConfig::default() })?;
        let shapes = [
            Shape { prompt: 8, gen: 4, iterations: 2, sweep: false },
            Shape { prompt: 40, gen: 4, iterations: 1, sweep: false },
            Shape { prompt: 64, gen: 3, iterations: 1, sweep: true },
        ];
        let results = engine::run_all(&h, &shapes, (1, 1), 42, None, &[])?;
        // Concurrent streams: one sample per stream, none from the prefix
        // cache (another seed: this engine has cached the prompts above).
        let together = engine::run_all(&h, &shapes[..1], (1, 3), 43, None, &[])?;
        assert_eq!(together[0].decode_tok_s.n, 2 * 3);
        assert_eq!((together[0].cached_tokens_max, together[0].gen_tokens_min), (0, 4));
        assert_eq!(results.len(), 3);
        for r in &results {
            assert_eq!(r.cached_tokens_max, 0, "a measured prompt hit the prefix cache");
            assert_eq!(r.gen_tokens_min, r.shape.gen, "EOS must be ignored");
            assert!(r.ttft_ms.p50 > 0.0 && r.prefill_tok_s.p50 > 0.0 && r.decode_tok_s.p50 > 0.0, "{r:?}");
            assert_eq!(r.itl_ms.n, r.shape.iterations * (r.shape.gen - 1));
        }
        // The CLI path end to end (table on stdout, plots on disk).
        let plots = dir.path().join("plots");
        let (m, p) = (model.to_string_lossy().to_string(), plots.to_string_lossy().to_string());
        let args = [
            "--prompt-lens",
            "8,16",
            "--gen-len",
            "3",
            "--iterations",
            "1",
            "--threads",
            "1",
            "--bandwidth-mib",
            "4",
            "--ctx-sweep",
            "24",
            "--plot",
        ];
        let mut v: Vec<&str> = vec![m.as_str()];
        v.extend_from_slice(&args);
        v.push(p.as_str());
        run(parse(&v)?)?;
        assert!(plots.join("ms_per_token_vs_context.svg").exists() && plots.join("tok_s_vs_prompt.png").exists());
        Ok(())
    }
}
