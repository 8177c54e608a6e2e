//! The tiny-model cases of `kiln_models::testing::cases` on a wgpu adapter,
//! as one binary for machines without Rust (the GPU machine: NVIDIA's
//! Vulkan driver). `tests/tiny_cases.rs` runs the same list in CI on
//! lavapipe. Exits non-zero when a case fails; cases that need a feature
//! this backend lacks are reported as skipped.
//!
//! `wgpu-tiny-cases [CASE...]` (all by default); `KILN_WGPU_BACKEND` picks
//! the API, `KILN_WGPU_ADAPTER=N` the adapter (`kiln list-devices`).

use std::process::ExitCode;

use kiln_backend::ModelHints;
use kiln_models::testing::cases;
use kiln_wgpu::{WgpuBackend, WgpuOptions};

fn wgpu(hints: &ModelHints, _exact: bool) -> Result<WgpuBackend, String> {
    let ordinal = match std::env::var("KILN_WGPU_ADAPTER") {
        Ok(s) => s.parse().map_err(|_| format!("KILN_WGPU_ADAPTER={s} is not a number"))?,
        Err(_) => 0,
    };
    let opts = WgpuOptions { ordinal, max_batch_tokens: 256, ..WgpuOptions::from_env() };
    WgpuBackend::open(&opts, hints).map_err(|e| e.to_string())
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
    cases::run_command("wgpu", &*cases::device_factory(wgpu), kiln_wgpu::supports_feature, &only)
}
