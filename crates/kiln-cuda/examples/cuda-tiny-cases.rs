//! The tiny-model cases of `kiln_models::testing::cases` (the list that
//! `kiln-models`' `tests/tiny_models.rs` runs on the CPU in CI) run on the
//! GPU: every architecture flag and weight format against the float64
//! reference forward, chunked prefill and batching against one pass, bad
//! batches refused. Exits non-zero when a case fails; cases that need a
//! feature this backend lacks are reported as skipped.
//!
//! `cuda-tiny-cases [CASE...]` (all by default) on the GPU machine;
//! `KILN_CUDA=KEY=VALUE,...` runs them with those CUDA settings.

use std::process::ExitCode;

use kiln_backend::ModelHints;
use kiln_cuda::{CudaBackend, CudaOptions};
use kiln_models::testing::cases;

fn cuda(hints: &ModelHints, exact: bool) -> Result<CudaBackend, String> {
    let mut opts = CudaOptions { max_batch_tokens: 256, ..Default::default() };
    for kv in std::env::var("KILN_CUDA").unwrap_or_default().split(',').filter(|s| !s.is_empty()) {
        opts.set(kv)?;
    }
    opts.quantized &= !exact;
    CudaBackend::open(&opts, hints).map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    let only: Vec<String> = std::env::args().skip(1).collect();
    // Whether the backend implements a feature is asked without opening a
    // GPU: the answer is the backend's, whatever the device.
    cases::run_command("CUDA", &*cases::device_factory(cuda), CudaBackend::supports_feature, &only)
}
