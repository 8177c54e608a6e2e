//! The tiny-model cases of `kiln_models::testing::cases` (the list that
//! `kiln-models`' `tests/tiny_models.rs` runs on the CPU in CI) run on the
//! GPU: every architecture flag and weight format against the float64
//! reference forward, chunked prefill and batching against one pass, bad
//! batches refused. Exits non-zero when a case fails.
//!
//! `tiny-cases [CASE...]` (all by default) on the GPU machine;
//! `KILN_CUDA=KEY=VALUE,...` runs them with those CUDA settings.

use std::path::Path;
use std::process::ExitCode;

use kiln_cuda::{CudaBackend, CudaOptions};
use kiln_models::testing::cases::{self, Factory, Setup, BLOCKS};
use kiln_models::{RunOptions, Runner};

fn gpu(path: &Path, exact: bool) -> Result<Runner<CudaBackend>, String> {
    let opened = kiln_models::open(path).map_err(|e| e.to_string())?;
    let hints = opened.device_hints().map_err(|e| e.to_string())?;
    let mut opts = CudaOptions { max_batch_tokens: 256, ..Default::default() };
    for kv in std::env::var("KILN_CUDA").unwrap_or_default().split(',').filter(|s| !s.is_empty()) {
        opts.set(kv)?;
    }
    opts.quantized &= !exact;
    let be = CudaBackend::open(&opts, &hints).map_err(|e| e.to_string())?;
    let bs = Setup::GPU.block_size;
    let run = RunOptions {
        max_ctx: BLOCKS * bs,
        block_size: bs,
        kv_blocks: Some(BLOCKS),
        tier_slots: 0,
        fast_kv: false,
        ..RunOptions::default()
    };
    Runner::load(be, &opened, &run).map_err(|e| e.to_string())
}

/// Whether the CUDA backend implements `f` (asked without opening a GPU:
/// the answer is the backend's, whatever the device).
fn cuda_supports(f: kiln_backend::Feature) -> bool {
    kiln_cuda::CudaBackend::supports_feature(f)
}

fn main() -> ExitCode {
    let only: Vec<String> = std::env::args().skip(1).collect();
    let dir = std::env::temp_dir().join(format!("kiln-tiny-cases-{}", std::process::id()));
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("error: {}: {e}", dir.display());
        return ExitCode::FAILURE;
    }
    let make: &Factory<'_, CudaBackend> = &gpu;
    let (mut passed, mut failed) = (0, 0);
    for case in cases::all::<CudaBackend>() {
        if !only.is_empty() && !only.iter().any(|o| o == case.name) {
            continue;
        }
        if let Some(missing) = case.needs.iter().find(|&&f| !cuda_supports(f)) {
            println!("test {} ... skipped: the CUDA backend has no {missing:?} yet", case.name);
            continue;
        }
        match (case.run)(make, &dir, Setup::GPU) {
            Ok(()) => {
                passed += 1;
                println!("test {} ... ok", case.name);
            }
            Err(e) => {
                failed += 1;
                println!("test {} ... FAILED: {e}", case.name);
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    println!("{passed} passed, {failed} failed");
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
