//! The tiny-model cases of `kiln_models::testing::cases` on a wgpu adapter,
//! as one binary for machines without Rust (the GPU machine: NVIDIA's
//! Vulkan driver). `tests/tiny_cases.rs` runs the same list in CI on
//! lavapipe. Exits non-zero when a case fails; cases that need a feature
//! this backend lacks are reported as skipped.
//!
//! `tiny-cases [CASE...]` (all by default); `KILN_WGPU_BACKEND` picks the
//! API, `KILN_WGPU_ADAPTER=N` the adapter (`kiln list-devices`).

use std::path::Path;
use std::process::ExitCode;

use kiln_models::testing::cases::{self, Factory, Setup, BLOCKS};
use kiln_models::{RunOptions, Runner};
use kiln_wgpu::{WgpuBackend, WgpuOptions};

fn gpu(path: &Path, _exact: bool) -> Result<Runner<WgpuBackend>, String> {
    let opened = kiln_models::open(path).map_err(|e| e.to_string())?;
    let hints = opened.device_hints().map_err(|e| e.to_string())?;
    let ordinal = match std::env::var("KILN_WGPU_ADAPTER") {
        Ok(s) => s.parse().map_err(|_| format!("KILN_WGPU_ADAPTER={s} is not a number"))?,
        Err(_) => 0,
    };
    let opts = WgpuOptions { ordinal, max_batch_tokens: 256, ..WgpuOptions::from_env() };
    let be = WgpuBackend::open(&opts, &hints).map_err(|e| e.to_string())?;
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

fn main() -> ExitCode {
    let only: Vec<String> = std::env::args().skip(1).collect();
    match kiln_wgpu::list_adapters(std::env::var("KILN_WGPU_BACKEND").ok().as_deref()) {
        Ok(list) => list.iter().for_each(|a| println!("{a}")),
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    }
    let dir = std::env::temp_dir().join(format!("kiln-wgpu-tiny-cases-{}", std::process::id()));
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("error: {}: {e}", dir.display());
        return ExitCode::FAILURE;
    }
    let make: &Factory<'_, WgpuBackend> = &gpu;
    let (mut passed, mut failed) = (0, 0);
    for case in cases::all::<WgpuBackend>() {
        if !only.is_empty() && !only.iter().any(|o| o == case.name) {
            continue;
        }
        if let Some(missing) = case.needs.iter().find(|&&f| !WgpuBackend::supports_feature(f)) {
            println!("test {} ... skipped: the wgpu backend has no {missing:?} yet", case.name);
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
