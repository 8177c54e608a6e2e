//! Starting an engine and talking to it.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use kiln_core::kv::KvManager;
use kiln_core::sample::Sampler;
use kiln_core::sched::{SchedConfig, Scheduler};

use kiln_backend::{Backend as DeviceBackend, KvMemory};
use kiln_core::stop::StopMatcher;
use kiln_core::{StreamEvent, Timings, TokenId};
use kiln_kernels::ThreadPool;
use kiln_kernels::{CpuBackend, CpuOptions};
use kiln_models::{ForwardBatch, ModelConfig, ModelFormat, RunOptions, Runner};
use kiln_tokenize::{ChatContext, ChatTemplate, IncrementalDetokenizer, Tokenizer};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};
use tokio::sync::Notify;

use crate::event_tx::EventTx;

use crate::config::{Device, EngineConfig};
use crate::engine_loop::{Command, EngineLoop};
use crate::error::{EngineError, Result};
use crate::request::{Params, Prompt, Request};
use crate::sequence::Sequence;
use crate::stats::{EngineStats, EngineStatsCell};

/// Tokens a context shift keeps at least when the request names no
/// `num_keep`: the first tokens of a sequence draw much of every later
/// token's attention (StreamingLLM's "attention sinks"); dropping them
/// wrecks the text that follows.
const SINK_TOKENS: usize = 4;

/// Static facts about a loaded model.
#[derive(Debug, Clone)]
pub struct ModelInfo {
    /// Where it was loaded from.
    pub path: std::path::PathBuf,
    /// File format.
    pub format: ModelFormat,
    /// Shape.
    pub config: ModelConfig,
    /// Context length in use.
    pub max_ctx: usize,
    /// KV cache capacity in tokens.
    pub kv_tokens: usize,
    /// Tokens per KV block.
    pub kv_block_size: usize,
    /// Capacity of the host KV tier in tokens (0: no tier).
    pub kv_tier_tokens: usize,
    /// Weight bytes read per decoded token.
    pub weight_bytes_per_token: usize,
    /// Kernel threads.
    pub threads: usize,
    /// Whether the kernel threads are pinned to their CPUs
    /// ([`EngineConfig::pin_threads`], and the CPUs allowed it).
    pub pinned_threads: bool,
    /// Whether prompt attention uses bf16 dot products
    /// ([`EngineConfig::bf16_attention`], and the CPU has AVX-512 BF16).
    pub bf16_attention: bool,
    /// The CPU kernels' instruction-set level (`None` on a GPU).
    pub cpu_isa: Option<kiln_kernels::CpuIsa>,
    /// How the KV cache stores K.
    pub cache_type_k: kiln_models::KvType,
    /// How the KV cache stores V.
    pub cache_type_v: kiln_models::KvType,
    /// Whether the model ships its own chat template (otherwise ChatML is used).
    pub has_chat_template: bool,
    /// Where the model runs.
    pub device: Device,
    /// Why requests with segments are refused here (`None`: the segment
    /// cache works: docs/segment-cache.md).
    pub segments_unsupported: Option<String>,
    /// Context shift is on ([`EngineConfig::context_shift`]): a chat longer
    /// than the context loses its oldest turns, an answer that reaches the
    /// context goes on after dropping old tokens.
    pub context_shift: bool,
    /// The sliding-window layers' own pool: their window in positions and
    /// the pool's size in tokens (`None`: every layer keeps the whole
    /// context).
    pub kv_window: Option<(usize, usize)>,
}

impl ModelInfo {
    /// The KV cache's types as `K/V` (`bf16` for an f16 side the CPU's bf16
    /// attention keeps as bf16; one name when both sides agree).
    pub fn kv_types(&self) -> String {
        let name = |t: kiln_models::KvType| match t {
            kiln_models::KvType::F16 if self.bf16_attention => "bf16",
            t => t.name(),
        };
        format!("{}/{}", name(self.cache_type_k), name(self.cache_type_v))
    }
    /// KV bytes of one token over every layer, K and V.
    pub fn kv_bytes_per_token(&self) -> usize {
        kiln_models::kv_cache_bytes_per_token(&self.config, self.cache_type_k, self.cache_type_v)
    }
    /// The window, the window pool's tokens ([`ModelInfo::kv_window`])
    /// and the number of window layers.
    fn window_split(&self) -> Option<(usize, usize, usize)> {
        let (w, pool) = self.kv_window?;
        let (_, layers) = kiln_models::window_layers(&self.config, self.max_ctx)?;
        Some((w, pool, layers.len()))
    }
    /// KV bytes of `tokens` tokens of one context, and of the pool of
    /// `kv_tokens` when full, with the window pool counted once.
    pub fn kv_bytes(&self, tokens: usize) -> u64 {
        let per_layer = self.kv_bytes_per_token() as u64 / self.config.num_layers.max(1) as u64;
        match self.window_split() {
            None => tokens as u64 * self.kv_bytes_per_token() as u64,
            Some((w, _, n)) => {
                let full = (self.config.num_layers - n) as u64;
                // One sequence's window layers hold its window (and a block).
                let win = tokens.min(w + self.kv_block_size) as u64;
                per_layer * (full * tokens as u64 + n as u64 * win)
            }
        }
    }
    /// The line printed at load: `KV cache: q8_0/q8_0, 32768 tokens, 1.2 GiB`
    /// (the context, and the bytes of one full context; the pool of
    /// `kv_tokens` follows, and the sliding-window layers' pool).
    pub fn kv_summary(&self) -> String {
        let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
        let per_layer = self.kv_bytes_per_token() as u64 / self.config.num_layers.max(1) as u64;
        let mut line = format!(
            "KV cache: {}, {} tokens, {:.2} GiB",
            self.kv_types(),
            self.max_ctx,
            gib(self.kv_bytes(self.max_ctx))
        );
        match self.window_split() {
            None => {
                line += &format!(
                    " (pool of {} tokens: {:.2} GiB when full)",
                    self.kv_tokens,
                    gib(self.kv_tokens as u64 * self.kv_bytes_per_token() as u64)
                )
            }
            Some((w, pool, n)) => {
                let full = (self.config.num_layers - n) as u64;
                line += &format!(
                    " ({} of {} layers attend to {w} positions and keep a window per sequence: {:.2} GiB with every layer whole; pool of {} tokens: {:.2} GiB, window pool: {:.2} GiB; --swa-full keeps them whole)",
                    n,
                    self.config.num_layers,
                    gib(self.max_ctx as u64 * self.kv_bytes_per_token() as u64),
                    self.kv_tokens,
                    gib(self.kv_tokens as u64 * per_layer * full),
                    gib(pool as u64 * per_layer * n as u64),
                );
            }
        }
        line
    }
}

struct Inner {
    backend: Backend,
    tokenizer: Arc<Tokenizer>,
    template: ChatTemplate,
    chat_ctx: ChatContext,
    grammars: Arc<crate::grammar::LazyGrammars>,
    info: ModelInfo,
    next_id: AtomicU64,
    stats: EngineStatsCell,
    /// Speculative decoding (requests get a drafter unless they opt out).
    spec: crate::SpecConfig,
    /// LoRA adapters by name.
    loras: crate::lora::Registry,
    /// [`EngineConfig::segment_recompute`].
    segment_recompute: usize,
    /// [`EngineConfig::segment_context`].
    segment_context: usize,
    /// [`EngineConfig::max_segments`].
    max_segments: usize,
}

/// Where the engine runs.
enum Backend {
    /// A thread of this process.
    Local { tx: Mutex<Sender<Command>>, thread: Mutex<Option<std::thread::JoinHandle<()>>> },
    /// A worker process (`kiln serve --isolate`).
    Worker(crate::worker::WorkerClient),
}

/// The front end of a model: what turns requests into token ids.
struct Frontend {
    tokenizer: Arc<Tokenizer>,
    template: ChatTemplate,
    chat_ctx: ChatContext,
    has_chat_template: bool,
    /// The template's tokens between an answer and the next user message.
    next_turn: Vec<TokenId>,
}

fn frontend(path: &Path, gguf: Option<&kiln_gguf::GgufFile>) -> Result<Frontend> {
    let tok_err = |e: kiln_tokenize::TokenizeError| EngineError::Tokenizer(e.to_string());
    let tokenizer = match gguf {
        Some(gguf) => Tokenizer::from_gguf_metadata(gguf.metadata()).map_err(tok_err)?,
        None => Tokenizer::from_hf_dir(path).map_err(tok_err)?,
    };
    let has_chat_template = tokenizer.chat_template().is_some();
    let template = match tokenizer.chat_template() {
        Some(src) => ChatTemplate::new(src).map_err(tok_err)?,
        None => {
            let t = ChatTemplate::fallback_for(|tok| tokenizer.token_id(tok).is_some());
            tracing::warn!("the model has no chat template; using the fallback for its vocabulary");
            t
        }
    };
    let chat_ctx = ChatContext {
        bos_token: tokenizer.bos_id().and_then(|id| tokenizer.token_text(id)).unwrap_or_default().to_string(),
        eos_token: tokenizer.eos_id().and_then(|id| tokenizer.token_text(id)).unwrap_or_default().to_string(),
        tools: None,
        vars: Default::default(),
    };
    // Special tokens in the opening are written as text, as in prompts.
    let next_turn =
        template.next_turn_opening(&chat_ctx).and_then(|text| tokenizer.encode(&text, false).ok()).unwrap_or_default();
    Ok(Frontend { tokenizer: Arc::new(tokenizer), template, chat_ctx, has_chat_template, next_turn })
}

/// Lets another thread cancel a request whose stream it does not own.
#[derive(Debug, Clone)]
pub struct CancelHandle(Arc<AtomicBool>);

impl CancelHandle {
    /// Asks the engine to stop the request.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// A running engine. Cheap to clone; the engine thread stops when the last
/// handle is dropped (or on [`EngineHandle::shutdown`]).
#[derive(Clone)]
pub struct EngineHandle {
    inner: Arc<Inner>,
}

/// The event stream of one request. Dropping it cancels the request: the
/// engine notices within one step and frees its KV blocks.
pub struct RequestStream {
    rx: UnboundedReceiver<StreamEvent>,
    ended: Arc<Notify>,
    cancel: Arc<AtomicBool>,
    remote: Option<crate::worker::RemoteCancel>,
    /// Prompt length in tokens.
    pub prompt_tokens: usize,
}

impl RequestStream {
    /// The next event (blocking); `None` after the last one.
    pub fn blocking_next(&mut self) -> Option<StreamEvent> {
        self.rx.blocking_recv()
    }
    /// The next event; `None` after the last one.
    pub async fn next(&mut self) -> Option<StreamEvent> {
        self.rx.recv().await
    }
    /// The next event if one is waiting: `Some(None)` after the last one,
    /// `None` when nothing has arrived yet.
    pub fn try_next(&mut self) -> Option<Option<StreamEvent>> {
        use tokio::sync::mpsc::error::TryRecvError;
        match self.rx.try_recv() {
            Ok(ev) => Some(Some(ev)),
            Err(TryRecvError::Disconnected) => Some(None),
            Err(TryRecvError::Empty) => None,
        }
    }
    /// Resolves once the engine is done with the request (its last event is
    /// sent), without waking for each event before that: a reader that
    /// gathers events over an interval waits on this and a timer, then takes
    /// what arrived with [`RequestStream::try_next`].
    pub async fn ended(&self) {
        self.ended.notified().await
    }
    /// Asks the engine to stop this request.
    pub fn cancel(&self) {
        self.cancel.store(true, Ordering::Relaxed);
        if let Some(r) = &self.remote {
            r.cancel();
        }
    }
    /// A handle that cancels this request from elsewhere.
    pub fn cancel_handle(&self) -> CancelHandle {
        CancelHandle(Arc::clone(&self.cancel))
    }
}

impl Drop for RequestStream {
    fn drop(&mut self) {
        self.cancel();
    }
}

/// A finished request, collected.
#[derive(Debug, Clone)]
pub struct Completion {
    /// The generated text.
    pub text: String,
    /// The generated tokens.
    pub tokens: Vec<TokenId>,
    /// Why it stopped.
    pub finish_reason: kiln_core::FinishReason,
    /// Timings and counts.
    pub timings: Timings,
}

/// Blocks the host KV tier holds: `--kv-tier-mib` over the bytes of one
/// block (none without prefix caching, which is what finds them again).
fn tier_blocks(cfg: &EngineConfig, model: &ModelConfig, block_size: usize) -> usize {
    if !cfg.prefix_caching {
        return 0;
    }
    let per_token = kiln_models::kv_cache_bytes_per_token(model, cfg.cache_type_k, cfg.cache_type_v);
    cfg.kv_tier_bytes / (per_token * block_size).max(1)
}

/// Opens the draft model of `cfg` for the model at `path` (`None` without one).
fn draft_for(
    path: &Path,
    cfg: &EngineConfig,
    opened: &kiln_models::OpenedModel,
) -> Result<Option<kiln_models::OpenedModel>> {
    let Some(draft) = &cfg.draft_model else { return Ok(None) };
    if !cfg.spec.enabled() {
        return Err(EngineError::InvalidRequest(
            "a draft model needs speculative decoding on (a draft length of 1 or more)".into(),
        ));
    }
    let vocab = frontend(path, opened.gguf.as_ref())?.tokenizer;
    Ok(Some(crate::draft::open(draft, opened, &vocab)?))
}

/// Device memory a draft model's backend takes beyond its weights and KV
/// (activations of its steps, cuBLAS workspace, the logits of its rows).
const DRAFT_GPU_BUFFERS: usize = 1536 << 20;

/// Most prompt rows the draft model catches up on in one step, over all
/// sequences: the prompt chunk, at most 512 (its steps' buffers are sized
/// for this plus one row per running sequence).
fn draft_catch_up(cfg: &EngineConfig) -> usize {
    cfg.prefill_chunk.clamp(1, 512)
}

/// The draft model's KV memory must have the model's blocks (one block
/// table addresses both).
fn check_draft_kv<B: kiln_backend::Backend>(target: &Runner<B>, draft: Option<&Runner<B>>) -> Result<()> {
    use kiln_backend::KvMemory;
    match draft {
        Some(d) if d.kv().num_blocks() < target.kv().num_blocks() => Err(EngineError::InvalidRequest(format!(
            "the draft model's KV cache holds {} blocks, the model's {}: not enough memory for both; lower --kv-cache-tokens",
            d.kv().num_blocks(),
            target.kv().num_blocks()
        ))),
        _ => Ok(()),
    }
}

/// Whether the draft model at `draft` can draft for the model at `path`
/// (a text generation model with the same vocabulary); the error says why
/// not. A server with one draft model and many models loads each model
/// the draft does not fit without it.
pub fn check_draft(path: &Path, draft: &Path) -> Result<()> {
    let opened = kiln_models::open(path)?;
    let vocab = frontend(path, opened.gguf.as_ref())?.tokenizer;
    crate::draft::open(draft, &opened, &vocab).map(drop)
}

/// How the draft model is placed: the target's context and block layout
/// (a sequence's block table addresses both KV memories), no host tier.
fn draft_run<B: kiln_backend::Backend>(run: &RunOptions, target: &Runner<B>) -> RunOptions {
    RunOptions { kv_blocks: Some(target.kv().num_blocks()), tier_slots: 0, window_blocks: None, ..*run }
}

impl EngineHandle {
    /// Loads a model (GGUF file or Hugging Face directory) and starts its engine thread.
    pub fn start(path: &Path, cfg: EngineConfig) -> Result<Self> {
        let block_size = cfg.block_size.max(1);
        let threads = cfg.threads.max(1);
        if cfg.device == Device::Cpu && cfg.cpu_isa.is_some() {
            // Before loading: the weights are repacked for the level.
            kiln_kernels::isa::set_cap(cfg.cpu_isa)?;
        }
        // The context and KV pool, planned (and on the CPU checked against
        // the available memory) before anything is allocated.
        let plan = if cfg.device == Device::Cpu && cfg.check_memory {
            Some(crate::memory::check_plan(path, &cfg)?.1)
        } else {
            None
        };
        let mut opened = kiln_models::open(path)?;
        if !cfg.lora_merge.is_empty() {
            let ad = crate::lora::read_stacked(&cfg.lora_merge, &opened.config)?;
            opened = opened.with_merged_lora(ad);
        }
        let draft = draft_for(path, &cfg, &opened)?;
        let plan = match plan {
            Some(p) => p,
            None => crate::memory::plan(&opened.config, &cfg, None)?,
        };
        let max_ctx = plan.max_ctx;
        let run = RunOptions {
            max_ctx,
            block_size,
            kv_blocks: cfg.kv_tokens.map(|t| t.max(max_ctx).div_ceil(block_size)),
            tier_slots: tier_blocks(&cfg, &opened.config, block_size),
            fast_kv: cfg.bf16_attention,
            type_k: cfg.cache_type_k,
            type_v: cfg.cache_type_v,
            window_blocks: crate::memory::window_plan(&opened.config, &cfg, max_ctx, plan.kv_tokens).map(|p| p.blocks),
        };
        match cfg.device {
            Device::Cpu => {
                let pool = if cfg.pin_threads { ThreadPool::pinned(threads) } else { ThreadPool::new(threads) };
                let pinned = pool.is_pinned();
                // Four contexts by default where they fit: memory is
                // committed only as blocks are used.
                let run = RunOptions { kv_blocks: Some(plan.kv_tokens.div_ceil(block_size)), ..run };
                let runner = Runner::load(CpuBackend::new(pool, CpuOptions::default()), &opened, &run)?;
                let bf16 = runner.kv().format_name() == "bf16-pairs";
                let draft = match draft {
                    Some(d) => {
                        let be = runner.backend().sharing_threads(CpuOptions::default());
                        Some(Runner::load(be, &d, &draft_run(&run, &runner))?)
                    }
                    None => None,
                };
                check_draft_kv(&runner, draft.as_ref())?;
                Self::spawn(path, &cfg, opened, runner, draft, (threads, pinned, bf16))?.with_loras(&cfg.loras)
            }
            Device::Cuda(ordinal) => {
                // The weights and KV pool are in device memory; the tier is host memory.
                if cfg.check_memory && run.tier_slots > 0 {
                    let tier = cfg.kv_tier_bytes as u64;
                    if let Some(available) = crate::memory::available_bytes().filter(|&a| tier > a) {
                        let estimate = crate::memory::MemoryEstimate { weights: 0, kv_cache: 0, kv_tier: tier };
                        return Err(EngineError::InsufficientMemory { estimate, available });
                    }
                }
                // The adapters registered at start are uploaded after the KV
                // pool took the free memory: their bytes are left free.
                let opts = kiln_cuda::CudaOptions {
                    ordinal,
                    max_batch_tokens: cfg.prefill_chunk.max(cfg.max_running).max(1),
                    reserve_bytes: cfg.cuda.reserve_bytes + crate::memory::lora_device_bytes(&cfg.loras),
                    ..cfg.cuda.clone()
                };
                // A draft model's weights, buffers and KV blocks are left
                // free when the model's KV pool takes what memory is left.
                let target_opts = match (&draft, &cfg.draft_model) {
                    (Some(d), Some(p)) => kiln_cuda::CudaOptions {
                        reserve_bytes: opts.reserve_bytes + 2 * crate::memory::weight_file_bytes(p) + DRAFT_GPU_BUFFERS,
                        kv_companion_block_bytes: kiln_models::kv_bytes_per_token(&d.config) * block_size,
                        ..opts.clone()
                    },
                    _ => opts.clone(),
                };
                let be = kiln_cuda::CudaBackend::open(&target_opts, &opened.device_hints()?)?;
                let runner = Runner::load(be, &opened, &run)?;
                let draft = match draft {
                    Some(d) => {
                        // Its steps: the catch-up rows and one row per sequence.
                        let rows = draft_catch_up(&cfg) + cfg.max_running.max(1);
                        let opts = kiln_cuda::CudaOptions { max_batch_tokens: rows, ..opts.clone() };
                        let be = kiln_cuda::CudaBackend::open(&opts, &d.device_hints()?)?;
                        Some(Runner::load(be, &d, &draft_run(&run, &runner))?)
                    }
                    None => None,
                };
                check_draft_kv(&runner, draft.as_ref())?;
                Self::spawn(path, &cfg, opened, runner, draft, (threads, false, false))?.with_loras(&cfg.loras)
            }
            Device::Wgpu(ordinal) => {
                let opts = wgpu_options(ordinal, cfg.prefill_chunk.max(cfg.max_running).max(1));
                let be = kiln_wgpu::WgpuBackend::open(&opts, &opened.device_hints()?)?;
                // Blocks for the planned tokens (the backend refuses more
                // than one binding holds, naming the limit).
                let run = RunOptions { kv_blocks: cfg.kv_tokens.map(|t| t.max(max_ctx).div_ceil(block_size)), ..run };
                let runner = Runner::load(be, &opened, &run)?;
                let draft = match draft {
                    Some(d) => {
                        let rows = draft_catch_up(&cfg) + cfg.max_running.max(1);
                        let be = kiln_wgpu::WgpuBackend::open(&wgpu_options(ordinal, rows), &d.device_hints()?)?;
                        Some(Runner::load(be, &d, &draft_run(&run, &runner))?)
                    }
                    None => None,
                };
                check_draft_kv(&runner, draft.as_ref())?;
                Self::spawn(path, &cfg, opened, runner, draft, (threads, false, false))?.with_loras(&cfg.loras)
            }
        }
    }

    /// Registers the adapters of `--lora NAME=PATH`.
    fn with_loras(self, list: &[(String, std::path::PathBuf)]) -> Result<Self> {
        for (name, path) in list {
            self.load_lora(name, path)?;
        }
        Ok(self)
    }

    /// Reads the LoRA adapter at `path` (a PEFT directory or a GGUF LoRA
    /// file), checks it against the model and registers it as `name`;
    /// requests already running are not disturbed. An error changes
    /// nothing.
    pub fn load_lora(&self, name: &str, path: &Path) -> Result<crate::LoraInfo> {
        self.load_lora_stack(name, &[(path.to_path_buf(), 1.0)])
    }

    /// [`EngineHandle::load_lora`] of several adapters applied together,
    /// each at its scale, registered as one (`kiln run --lora A --lora B`).
    pub fn load_lora_stack(&self, name: &str, list: &[(std::path::PathBuf, f32)]) -> Result<crate::LoraInfo> {
        let Backend::Local { tx, .. } = &self.inner.backend else {
            return Err(EngineError::InvalidRequest("LoRA adapters are not supported with --isolate".into()));
        };
        let reg = &self.inner.loras;
        let id = reg.reserve(name)?;
        let ad = crate::lora::read_stacked(list, &self.inner.info.config)?;
        let info = crate::lora::info_of(name, &ad);
        let (rtx, rrx) = std::sync::mpsc::channel();
        tx.lock()
            .map_err(|_| EngineError::Shutdown)?
            .send(Command::LoraAttach(id, Box::new(ad), rtx))
            .map_err(|_| EngineError::Shutdown)?;
        rrx.recv().map_err(|_| EngineError::Shutdown)?.map_err(|e| crate::lora::attach_error(e, &info))?;
        if let Err(e) = reg.insert(id, info.clone()) {
            let _ = self.detach(id);
            return Err(e);
        }
        Ok(info)
    }

    /// Unregisters the adapter `name` and frees its factors; refused while
    /// a request uses it ([`EngineError::LoraInUse`]).
    pub fn unload_lora(&self, name: &str) -> Result<()> {
        let id = self.inner.loras.remove(name)?;
        self.detach(id)
    }

    fn detach(&self, id: u32) -> Result<()> {
        let Backend::Local { tx, .. } = &self.inner.backend else { return Ok(()) };
        let (rtx, rrx) = std::sync::mpsc::channel();
        tx.lock()
            .map_err(|_| EngineError::Shutdown)?
            .send(Command::LoraDetach(id, rtx))
            .map_err(|_| EngineError::Shutdown)?;
        rrx.recv().map_err(|_| EngineError::Shutdown)?
    }

    /// The registered LoRA adapters, by name.
    pub fn loras(&self) -> Vec<crate::LoraInfo> {
        self.inner.loras.list()
    }

    /// Starts the engine thread over a loaded model, whatever its device.
    fn spawn<B: DeviceBackend + 'static>(
        path: &Path,
        cfg: &EngineConfig,
        opened: kiln_models::OpenedModel,
        runner: Runner<B>,
        draft: Option<Runner<B>>,
        (threads, pinned_threads, bf16_attention): (usize, bool, bool),
    ) -> Result<Self> {
        let block_size = cfg.block_size.max(1);
        let (format, gguf, max_ctx) = (opened.format, opened.gguf, runner.max_ctx());
        let num_blocks = runner.kv().num_blocks();
        let tier_blocks = runner.kv().tier_slots();
        let weight_bytes_per_token = runner.weight_bytes_per_token();
        let Frontend { tokenizer, template, chat_ctx, has_chat_template, next_turn } = frontend(path, gguf.as_ref())?;
        let config = runner.config().clone();
        let info = ModelInfo {
            path: path.to_path_buf(),
            format,
            config: config.clone(),
            max_ctx,
            kv_tokens: num_blocks * block_size,
            kv_tier_tokens: tier_blocks * block_size,
            weight_bytes_per_token,
            threads,
            pinned_threads,
            bf16_attention,
            cpu_isa: (cfg.device == Device::Cpu).then(kiln_kernels::CpuIsa::current),
            cache_type_k: cfg.cache_type_k,
            cache_type_v: cfg.cache_type_v,
            has_chat_template,
            device: cfg.device,
            segments_unsupported: runner.can_shift_kv(cfg.cache_type_k, cfg.cache_type_v).err().or_else(|| {
                runner.kv_window().map(|_| {
                    "the sliding-window layers keep only their window, not whole segments (start with --swa-full)"
                        .into()
                })
            }),
            kv_block_size: block_size,
            kv_window: runner.kv_window().map(|(w, blocks)| (w, blocks * block_size)),
            context_shift: cfg.context_shift,
        };
        tracing::info!(model = %path.display(), "{}", info.kv_summary());
        if cfg.context_shift {
            runner.can_shift_kv(cfg.cache_type_k, cfg.cache_type_v).map_err(|why| {
                EngineError::InvalidRequest(format!(
                    "--context-shift: {why} (use an f16 KV cache, or leave context shift off)"
                ))
            })?;
        }
        let stats = EngineStatsCell::default();
        let blocks = KvManager::with_tier(num_blocks, block_size, tier_blocks)
            .and_then(|m| match runner.kv_window() {
                Some((window, blocks)) => m.with_window(window, blocks),
                None => Ok(m),
            })
            .map_err(|e| EngineError::InvalidRequest(format!("KV cache: {e}")))?;
        let sched_cfg = SchedConfig {
            max_step_tokens: cfg.prefill_chunk.max(1),
            max_running: cfg.max_running.max(1),
            prefix_caching: cfg.prefix_caching,
        };
        let engine = EngineLoop {
            runner,
            block_size,
            sched: Scheduler::new(sched_cfg, blocks),
            batch: ForwardBatch::new(),
            logits: Vec::new(),
            draws: Vec::new(),
            picks: Vec::new(),
            eos: tokenizer.eos_ids().to_vec(),
            next_turn: crate::next_turn::NextTurn::new(
                if cfg.next_turn_prefill && cfg.prefix_caching { next_turn } else { Vec::new() },
                std::time::Duration::from_millis(cfg.next_turn_idle_ms),
                Arc::clone(&tokenizer),
            ),
            max_ctx,
            stop_ctx: if cfg.context_shift { usize::MAX } else { max_ctx },
            ctx_shift: cfg.context_shift.then(Default::default),
            seqs: Default::default(),
            work: Vec::new(),
            drafts: Default::default(),
            draft: draft.map(|r| crate::draft::DraftModel::new(r, draft_catch_up(cfg))),
            wants: Vec::new(),
            stats: stats.clone(),
            segments: crate::segments::Segments::new(Arc::clone(&tokenizer)),
            shifts: Vec::new(),
            window_table: Vec::new(),
        };
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("kiln-engine".into())
            .spawn(move || engine.run(rx))
            .map_err(|e| EngineError::InvalidRequest(format!("cannot start the engine thread: {e}")))?;
        Ok(Self {
            inner: Arc::new(Inner {
                backend: Backend::Local { tx: Mutex::new(tx), thread: Mutex::new(Some(thread)) },
                grammars: crate::grammar::LazyGrammars::new(Arc::clone(&tokenizer)),
                tokenizer,
                template,
                chat_ctx,
                info,
                next_id: AtomicU64::new(1),
                stats,
                spec: cfg.spec,
                loras: Default::default(),
                segment_recompute: cfg.segment_recompute,
                segment_context: cfg.segment_context,
                max_segments: cfg.max_segments,
            }),
        })
    }

    /// Loads a model in a worker process started by `spawn` (see
    /// [`crate::worker`]); this process keeps the tokenizer and chat
    /// template. A worker that dies is restarted; requests in flight end
    /// without `Done` and new ones fail with [`EngineError::Shutdown`] until
    /// it is back.
    pub fn start_isolated(path: &Path, cfg: EngineConfig, spawn: crate::worker::WorkerSpawn) -> Result<Self> {
        let (config, gguf) = crate::memory::read_config(path)?;
        let format = if gguf.is_some() { ModelFormat::Gguf } else { ModelFormat::Safetensors };
        let Frontend { tokenizer, template, chat_ctx, has_chat_template, .. } = frontend(path, gguf.as_ref())?;
        let (client, ready) = crate::worker::WorkerClient::start(spawn, path, &cfg)?;
        let info = ModelInfo {
            path: path.to_path_buf(),
            format,
            config,
            max_ctx: ready.max_ctx,
            kv_tokens: ready.kv_tokens,
            kv_tier_tokens: ready.kv_tier_tokens,
            kv_block_size: cfg.block_size.max(1),
            kv_window: ready.kv_window,
            weight_bytes_per_token: ready.weight_bytes_per_token,
            threads: cfg.threads.max(1),
            pinned_threads: ready.pinned_threads,
            bf16_attention: ready.bf16_attention,
            cpu_isa: ready.cpu_isa,
            cache_type_k: cfg.cache_type_k,
            cache_type_v: cfg.cache_type_v,
            has_chat_template,
            device: cfg.device,
            segments_unsupported: Some("the segment cache is not supported with --isolate yet".into()),
            context_shift: cfg.context_shift,
        };
        Ok(Self {
            inner: Arc::new(Inner {
                backend: Backend::Worker(client),
                grammars: crate::grammar::LazyGrammars::new(Arc::clone(&tokenizer)),
                tokenizer,
                template,
                chat_ctx,
                info,
                next_id: AtomicU64::new(1),
                stats: EngineStatsCell::default(),
                spec: cfg.spec,
                loras: Default::default(),
                segment_recompute: cfg.segment_recompute,
                segment_context: cfg.segment_context,
                max_segments: cfg.max_segments,
            }),
        })
    }

    /// The worker process's id, for an isolated engine whose worker is up.
    pub fn worker_pid(&self) -> Option<u32> {
        match &self.inner.backend {
            Backend::Worker(w) => w.pid(),
            Backend::Local { .. } => None,
        }
    }

    /// How many times the worker process was restarted after dying.
    pub fn worker_restarts(&self) -> u64 {
        match &self.inner.backend {
            Backend::Worker(w) => w.restarts(),
            Backend::Local { .. } => 0,
        }
    }

    /// Facts about the model.
    pub fn info(&self) -> &ModelInfo {
        &self.inner.info
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.inner.tokenizer
    }

    /// Live counters.
    pub fn stats(&self) -> EngineStats {
        match &self.inner.backend {
            Backend::Local { .. } => self.inner.stats.snapshot(),
            Backend::Worker(w) => w.stats(),
        }
    }

    /// Turns a prompt into token ids (chat template applied for messages).
    pub fn prompt_tokens(&self, prompt: &Prompt) -> Result<Vec<TokenId>> {
        let tok = &self.inner.tokenizer;
        let err = |e: kiln_tokenize::TokenizeError| EngineError::Tokenizer(e.to_string());
        match prompt {
            Prompt::Tokens(t) => {
                let vocab = self.inner.info.config.vocab_size;
                if let Some(bad) = t.iter().find(|&&id| id as usize >= vocab) {
                    return Err(EngineError::InvalidRequest(format!(
                        "token id {bad} is outside the vocabulary ({vocab} tokens)"
                    )));
                }
                Ok(t.clone())
            }
            Prompt::Text(s) => tok.encode(s, true).map_err(err),
            Prompt::Chat(chat) => self.rendered_chat_tokens(&self.render_chat(chat)?),
            Prompt::Segmented(_) => Ok(self.prompt_tokens_segmented(prompt)?.0),
        }
    }

    /// [`EngineHandle::prompt_tokens`], and where the segments of a
    /// [`Prompt::Segmented`] are in them (each tokenized alone; none for
    /// other prompts).
    pub fn prompt_tokens_segmented(&self, prompt: &Prompt) -> Result<(Vec<TokenId>, Vec<crate::SegmentSpan>)> {
        let Prompt::Segmented(sp) = prompt else { return Ok((self.prompt_tokens(prompt)?, Vec::new())) };
        match sp.prompt.as_ref() {
            Prompt::Chat(chat) => self.rendered_chat_tokens_segmented(&self.render_chat(chat)?, &sp.segments),
            Prompt::Segmented(_) => Err(EngineError::InvalidRequest("segments inside segments".into())),
            rest => {
                // The segments first (after BOS), then the rest.
                let mut text: String = (0..sp.segments.len()).map(crate::segment_marker).collect();
                let tail = match rest {
                    Prompt::Text(s) => s.clone(),
                    _ => String::new(),
                };
                text.push_str(&tail);
                let (mut tokens, spans) = self.marked_tokens(&text, &sp.segments, self.bos())?;
                if let Prompt::Tokens(t) = rest {
                    tokens.extend(self.prompt_tokens(&Prompt::Tokens(t.clone()))?);
                }
                Ok((tokens, spans))
            }
        }
    }

    /// [`EngineHandle::rendered_chat_tokens`] of a text whose
    /// [`crate::segment_marker`]s stand for `segments` (a chat rendered
    /// with a template of the caller's, such as a Modelfile's).
    pub fn rendered_chat_tokens_segmented(
        &self,
        text: &str,
        segments: &[String],
    ) -> Result<(Vec<TokenId>, Vec<crate::SegmentSpan>)> {
        let bos = if text.starts_with(&self.inner.chat_ctx.bos_token) { Vec::new() } else { self.bos() };
        self.marked_tokens(text, segments, bos)
    }

    /// BOS when the model wants one.
    fn bos(&self) -> Vec<TokenId> {
        let tok = &self.inner.tokenizer;
        if tok.adds_bos() && !self.inner.chat_ctx.bos_token.is_empty() {
            tok.bos_id().into_iter().collect()
        } else {
            Vec::new()
        }
    }

    fn marked_tokens(
        &self,
        text: &str,
        segments: &[String],
        bos: Vec<TokenId>,
    ) -> Result<(Vec<TokenId>, Vec<crate::SegmentSpan>)> {
        let tok = &self.inner.tokenizer;
        let encode = |s: &str| tok.encode(s, false).map_err(|e| EngineError::Tokenizer(e.to_string()));
        crate::segments::tokenize_marked(text, segments, bos, &encode)
    }

    /// Token ids of a conversation rendered by a chat template (the model's
    /// own, or another such as a Modelfile's): special tokens written as
    /// text are read as such, and BOS comes first if the model wants one and
    /// the template did not write it.
    pub fn rendered_chat_tokens(&self, text: &str) -> Result<Vec<TokenId>> {
        let tok = &self.inner.tokenizer;
        let add_bos = tok.adds_bos()
            && !self.inner.chat_ctx.bos_token.is_empty()
            && !text.starts_with(&self.inner.chat_ctx.bos_token);
        let mut ids = Vec::new();
        if add_bos {
            ids.extend(tok.bos_id());
        }
        ids.extend(tok.encode(text, false).map_err(|e| EngineError::Tokenizer(e.to_string()))?);
        Ok(ids)
    }

    /// Renders a conversation with the model's chat template (generation
    /// prompt added).
    pub fn render_chat(&self, chat: &crate::ChatPrompt) -> Result<String> {
        if chat.messages.is_empty() {
            return Err(EngineError::InvalidRequest("`messages` must not be empty".into()));
        }
        let ctx = ChatContext { tools: chat.tools.clone(), vars: chat.vars.clone(), ..self.inner.chat_ctx.clone() };
        self.inner.template.render(&chat.messages, true, &ctx).map_err(|e| EngineError::Tokenizer(e.to_string()))
    }

    /// Compiles `c` against the model's vocabulary (or finds it compiled):
    /// an invalid schema or grammar, or one the engine cannot enforce, is
    /// an error that says why.
    pub fn check_constraint(&self, c: &kiln_grammar::Constraint) -> Result<()> {
        self.inner.grammars.compile(c)?;
        Ok(())
    }

    /// With context shift on ([`EngineConfig::context_shift`]), fits a
    /// conversation to the context by dropping its oldest turns
    /// (whole turns; the system prompt and the last turn stay), leaving room for `min(max_tokens, context /
    /// 4)` tokens of answer; `render` turns a conversation into tokens
    /// (the model's template, or a Modelfile's). Fills `params`'
    /// `dropped_messages`, and `num_keep` when the request left it out (the
    /// system prompt's tokens, at least 4). Off, the conversation is
    /// rendered as is.
    ///
    /// # Errors
    /// What `render` returns, and [`EngineError::PromptTooLong`] when the
    /// system prompt and the last turn alone do not fit.
    pub fn fit_chat(
        &self,
        chat: &crate::ChatPrompt,
        params: &mut Params,
        render: &dyn Fn(&crate::ChatPrompt) -> Result<Vec<TokenId>>,
    ) -> Result<Vec<TokenId>> {
        let max_ctx = self.inner.info.max_ctx;
        if !self.inner.info.context_shift {
            return render(chat);
        }
        let reserve = params.stop.max_tokens.min(max_ctx / 4).max(1);
        let fit = crate::chat_fit::fit_chat(chat, max_ctx.saturating_sub(reserve), max_ctx, render)?;
        if fit.dropped > 0 {
            tracing::info!(
                dropped = fit.dropped,
                tokens = fit.tokens.len(),
                "context shift: dropped the {} oldest messages so the chat fits the {max_ctx}-token context",
                fit.dropped
            );
        }
        params.dropped_messages = fit.dropped;
        if params.num_keep.is_none() {
            let keep = if fit.system == 0 {
                self.bos().len()
            } else {
                let sys = crate::ChatPrompt { messages: chat.messages[..fit.system].to_vec(), ..chat.clone() };
                let head = render(&sys)?;
                head.iter().zip(&fit.tokens).take_while(|(a, b)| a == b).count()
            };
            params.num_keep = Some(keep.max(SINK_TOKENS).min(max_ctx.saturating_sub(4)));
        }
        Ok(fit.tokens)
    }

    /// The tokens a context shift keeps at the head: the request's
    /// `num_keep` (checked against the context), or the first
    /// [`SINK_TOKENS`].
    fn shift_keep(&self, params: &Params, tokens: &[TokenId]) -> Result<usize> {
        let max_ctx = self.inner.info.max_ctx;
        match params.num_keep {
            Some(n) if self.inner.info.context_shift && n > max_ctx.saturating_sub(4) => {
                Err(EngineError::InvalidRequest(format!(
                    "`num_keep` is {n}: at most the context less 4 tokens ({})",
                    max_ctx.saturating_sub(4)
                )))
            }
            Some(n) => Ok(n),
            None => Ok(SINK_TOKENS.min(tokens.len())),
        }
    }

    /// Submits a request; events arrive on the returned stream.
    pub fn submit(&self, req: Request) -> Result<RequestStream> {
        let mut params = req.params;
        if let (Prompt::Chat(chat), true) = (&req.prompt, self.inner.info.context_shift) {
            let tokens = self.fit_chat(chat, &mut params, &|c| self.rendered_chat_tokens(&self.render_chat(c)?))?;
            return self.submit_tokens(tokens, params);
        }
        let (tokens, segments) = self.prompt_tokens_segmented(&req.prompt)?;
        if !segments.is_empty() {
            params.segments = segments;
        }
        self.submit_tokens(tokens, params)
    }

    /// Submits already tokenized input ([`EngineHandle::submit`] is this
    /// after [`EngineHandle::prompt_tokens`]).
    pub fn submit_tokens(&self, tokens: Vec<TokenId>, params: Params) -> Result<RequestStream> {
        let info = &self.inner.info;
        if tokens.is_empty() {
            return Err(EngineError::InvalidRequest("the prompt is empty".into()));
        }
        if !params.segments.is_empty() {
            if let Some(why) = &info.segments_unsupported {
                return Err(EngineError::InvalidRequest(format!("segments: {why}")));
            }
            crate::segments::check_spans(&params.segments, tokens.len(), self.inner.max_segments, info.max_ctx)?;
        }
        if tokens.len() >= info.max_ctx {
            return Err(EngineError::PromptTooLong { prompt_tokens: tokens.len(), max_ctx: info.max_ctx });
        }
        let keep = self.shift_keep(&params, &tokens)?;
        if tokens.len() + 1 > info.kv_tokens {
            return Err(EngineError::KvCapacity { needed: tokens.len() + 1, capacity: info.kv_tokens });
        }
        let sampler = Sampler::new(&params.sampling)?;
        let lora = match &params.lora {
            Some(_) if matches!(self.inner.backend, Backend::Worker(_)) => {
                return Err(EngineError::InvalidRequest("LoRA adapters are not supported with --isolate".into()));
            }
            // Scale 0 is the base model (the name must still exist).
            Some(r) => Some(self.inner.loras.hold(r)?).filter(|_| r.scale != 0.0),
            None => None,
        };
        if let (Some(c), Backend::Worker(_)) = (&params.constraint, &self.inner.backend) {
            // The worker compiles it again (from its cache after the first time).
            self.check_constraint(c)?;
        }
        let (etx, erx) = unbounded_channel();
        let ended = Arc::new(Notify::new());
        let etx = EventTx::new(etx, ended.clone());
        let cancel = Arc::new(AtomicBool::new(false));
        let prompt_len = tokens.len();
        let tx = match &self.inner.backend {
            Backend::Local { tx, .. } => tx,
            Backend::Worker(w) => {
                let remote = w.submit(tokens, params, etx, cancel.clone())?;
                return Ok(RequestStream { rx: erx, ended, cancel, remote: Some(remote), prompt_tokens: prompt_len });
            }
        };
        let want_logprobs = params.sampling.logprobs || params.sampling.top_logprobs > 0;
        let matcher = match &params.constraint {
            Some(c) => Some(self.inner.grammars.compile(c)?.matcher()),
            None => None,
        };
        let drafter = self.drafter_for(&params);
        let seq = Sequence {
            id: self.inner.next_id.fetch_add(1, Ordering::Relaxed),
            prompt_len,
            generated: 0,
            sampler,
            matcher,
            stopper: StopMatcher::new(&params.stop.stop),
            stop: params.stop,
            detok: IncrementalDetokenizer::continuing(Arc::clone(&self.inner.tokenizer), true),
            want_logprobs,
            chat_turn: params.chat_turn,
            prefill_only: false,
            events: etx,
            cancel: cancel.clone(),
            timings: Timings {
                prompt_tokens: prompt_len,
                dropped_messages: params.dropped_messages,
                ..Default::default()
            },
            submitted: Instant::now(),
            first_token_at: None,
            finished: None,
            drafter,
            lora,
            segment_recompute: params.segment_recompute.unwrap_or(self.inner.segment_recompute),
            segment_context: params.segment_context.unwrap_or(self.inner.segment_context),
            segments: params.segments,
        };
        let tx = tx.lock().map_err(|_| EngineError::Shutdown)?;
        tx.send(Command::Submit(Box::new(seq), tokens, keep)).map_err(|_| EngineError::Shutdown)?;
        Ok(RequestStream { rx: erx, ended, cancel, remote: None, prompt_tokens: prompt_len })
    }

    /// A proposer for a request that speculates: the engine has speculation
    /// on, the request did not opt out, and no constraint masks its tokens
    /// (a mask is computed per position; it is not verified ahead).
    fn drafter_for(&self, params: &Params) -> Option<crate::spec::Drafter> {
        let spec = self.inner.spec;
        let wanted = spec.enabled() && params.speculative != Some(false) && params.constraint.is_none();
        wanted.then(|| crate::spec::Drafter::new(spec.max_draft))
    }

    /// Runs a request to completion and collects its output.
    pub fn generate(&self, req: Request) -> Result<Completion> {
        let mut stream = self.submit(req)?;
        let (mut text, mut tokens) = (String::new(), Vec::new());
        while let Some(ev) = stream.blocking_next() {
            match ev {
                StreamEvent::Token { token, text: t, .. } => {
                    tokens.push(token);
                    text.push_str(&t);
                }
                StreamEvent::Done { reason, text: t, timings } => {
                    text.push_str(&t);
                    return Ok(Completion { text, tokens, finish_reason: reason, timings });
                }
                StreamEvent::Error(e) => return Err(EngineError::InvalidRequest(e)),
            }
        }
        Err(EngineError::Shutdown)
    }

    /// Stops the engine (thread or worker process) after failing queued and
    /// running requests.
    pub fn shutdown(&self) {
        self.inner.stop();
    }
}

impl Inner {
    fn stop(&self) {
        match &self.backend {
            Backend::Local { tx, thread } => {
                if let Ok(tx) = tx.lock() {
                    let _ = tx.send(Command::Shutdown);
                }
                if let Some(t) = thread.lock().ok().and_then(|mut g| g.take()) {
                    let _ = t.join();
                }
            }
            Backend::Worker(w) => w.shutdown(),
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.stop();
    }
}

/// How the engine opens wgpu adapter `ordinal` for steps of `rows` rows
/// (the API from `KILN_WGPU_BACKEND`).
pub(crate) fn wgpu_options(ordinal: usize, rows: usize) -> kiln_wgpu::WgpuOptions {
    kiln_wgpu::WgpuOptions { ordinal, max_batch_tokens: rows, ..kiln_wgpu::WgpuOptions::from_env() }
}
