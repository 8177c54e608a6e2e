//! Step timings below the engine, for `kiln bench --step-rows`: one
//! sequence at a given context, stepped with `r` new rows at once, as a
//! decode step (one row, sampled where the device samples) or a
//! speculative verification (every row's logits, as the engine asks for
//! them). What verification costs next to a decode step decides what
//! speculation can gain.

use std::path::Path;
use std::time::Instant;

use kiln_backend::{Backend, Draw, KvMemory};
use kiln_models::{ForwardBatch, LogitsWant, RunOptions, Runner};

use crate::{Device, EngineConfig, Result};

/// The median time of one step of `rows` rows, per entry of `rows`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepTime {
    /// Rows in the step.
    pub rows: usize,
    /// Median milliseconds per step.
    pub ms: f64,
}

/// Loads the model at `path` as `cfg` says (device, threads, CUDA
/// settings), computes a `context`-token prompt, then times `iters` steps
/// of each row count in `rows` at that context (after 3 untimed ones).
pub fn step_times(
    path: &Path,
    cfg: &EngineConfig,
    context: usize,
    rows: &[usize],
    iters: usize,
) -> Result<Vec<StepTime>> {
    let opened = kiln_models::open(path)?;
    let most = rows.iter().copied().max().unwrap_or(1).max(1);
    let block_size = cfg.block_size.max(1);
    let need = context + most + 1;
    let run = RunOptions {
        max_ctx: need,
        block_size,
        kv_blocks: Some(need.div_ceil(block_size)),
        tier_slots: 0,
        fast_kv: cfg.bf16_attention,
        type_k: cfg.cache_type_k,
        type_v: cfg.cache_type_v,
        window_blocks: None,
    };
    if kiln_models::context_length(&opened.config, Some(need)) < need {
        return Err(crate::EngineError::InvalidRequest(format!(
            "a context of {context} tokens and {most} rows does not fit the model's context"
        )));
    }
    match cfg.device {
        Device::Cpu => {
            let threads = cfg.threads.max(1);
            let pool = if cfg.pin_threads {
                kiln_kernels::ThreadPool::pinned(threads)
            } else {
                kiln_kernels::ThreadPool::new(threads)
            };
            let be = kiln_kernels::backend::CpuBackend::new(pool, Default::default());
            let runner = Runner::load(be, &opened, &run)?;
            runner.backend().enter_engine_thread();
            time(runner, context, rows, iters)
        }
        Device::Cuda(ordinal) => {
            let opts =
                kiln_cuda::CudaOptions { ordinal, max_batch_tokens: cfg.prefill_chunk.max(most), ..cfg.cuda.clone() };
            let be = kiln_cuda::CudaBackend::open(&opts, &opened.device_hints()?)?;
            time(Runner::load(be, &opened, &run)?, context, rows, iters)
        }
        Device::Wgpu(ordinal) => {
            let opts = crate::handle::wgpu_options(ordinal, cfg.prefill_chunk.max(most));
            let be = kiln_wgpu::WgpuBackend::open(&opts, &opened.device_hints()?)?;
            time(Runner::load(be, &opened, &run)?, context, rows, iters)
        }
    }
}

fn time<B: Backend>(mut runner: Runner<B>, context: usize, rows: &[usize], iters: usize) -> Result<Vec<StepTime>> {
    let block_size = runner.kv().block_size();
    let table: Vec<u32> = (0..runner.kv().num_blocks() as u32).collect();
    let vocab = runner.config().vocab_size as u32;
    let token = |i: usize| (i as u32 * 7919 + 13) % vocab;
    let (mut batch, mut picks, mut logits) = (ForwardBatch::new(), Vec::new(), Vec::new());
    // The context, in chunks of 512.
    for start in (0..context).step_by(512) {
        let chunk: Vec<u32> = (start..(start + 512).min(context)).map(token).collect();
        batch.clear();
        batch.push_seq(&chunk, start, &table, block_size, LogitsWant::None)?;
        runner.forward(&batch, &[], &mut picks, &mut logits)?;
    }
    let device = runner.backend().samples_on_device();
    let mut out = Vec::with_capacity(rows.len());
    for &r in rows {
        let r = r.max(1);
        let tokens: Vec<u32> = (context..context + r).map(token).collect();
        batch.clear();
        let want = if r == 1 { LogitsWant::Last } else { LogitsWant::All };
        batch.push_seq(&tokens, context, &table, block_size, want)?;
        // A decode row is sampled on the device where it can be; verified
        // rows come back as logits.
        let draws: Vec<Option<Draw>> = match (device, r) {
            (true, 1) => vec![Some(Draw::GREEDY)],
            (true, _) => vec![None; r],
            (false, _) => Vec::new(),
        };
        let mut ms = Vec::with_capacity(iters);
        for i in 0..iters + 3 {
            let t0 = Instant::now();
            runner.forward(&batch, &draws, &mut picks, &mut logits)?;
            if i >= 3 {
                ms.push(t0.elapsed().as_secs_f64() * 1000.0);
            }
        }
        ms.sort_by(f64::total_cmp);
        out.push(StepTime { rows: r, ms: ms.get(ms.len() / 2).copied().unwrap_or(f64::NAN) });
    }
    Ok(out)
}
