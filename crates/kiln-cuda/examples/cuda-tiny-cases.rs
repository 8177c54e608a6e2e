//! The tiny-model cases of `kiln_models::testing::cases` (the list that
//! `kiln-models`' `tests/tiny_models.rs` runs on the CPU in CI) run on the
//! GPU: every architecture flag and weight format against the float64
//! reference forward, chunked prefill and batching against one pass, bad
//! batches refused. Exits non-zero when a case fails; cases that need a
//! feature this backend lacks are reported as skipped.
//!
//! Then `quantized_kv_matches_cpu` (`kiln_models::testing::cases::kv_quant`):
//! q8_0 and q4_0 KV caches, K and V chosen apart, against the CPU's.
//!
//! `cuda-tiny-cases [CASE...]` (all by default) on the GPU machine;
//! `KILN_CUDA=KEY=VALUE,...` runs them with those CUDA settings.

use std::process::ExitCode;

use kiln_backend::ModelHints;
use kiln_cuda::{CudaBackend, CudaOptions};
use kiln_models::testing::cases::{self, kv_quant};

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
    let kv_only = only.iter().any(|o| o == kv_quant::NAME);
    let rest: Vec<String> = only.iter().filter(|o| *o != kv_quant::NAME).cloned().collect();
    // Whether the backend implements a feature is asked without opening a
    // GPU: the answer is the backend's, whatever the device.
    let listed = if kv_only && rest.is_empty() {
        ExitCode::SUCCESS
    } else {
        cases::run_command("CUDA", &*cases::device_factory(cuda), CudaBackend::supports_feature, &rest)
    };
    if !only.is_empty() && !kv_only {
        return listed;
    }
    let dir = std::env::temp_dir().join(format!("kiln-cuda-kv-quant-{}", std::process::id()));
    let result = std::fs::create_dir_all(&dir)
        .map_err(|e| e.to_string())
        .and_then(|()| kv_quant::check(&cuda, &dir, cases::Setup::GPU));
    let _ = std::fs::remove_dir_all(&dir);
    match result {
        Ok(lines) => {
            for l in lines {
                println!("  {l}");
            }
            println!("test {} ... ok", kv_quant::NAME);
            listed
        }
        Err(e) => {
            println!("test {} ... FAILED: {e}", kv_quant::NAME);
            ExitCode::FAILURE
        }
    }
}
