//! The tiny-model cases of `kiln_models::testing::cases` (the list the CPU
//! runs in `kiln-models/tests/tiny_models.rs`, and the `cuda-tiny-cases`
//! and `wgpu-tiny-cases` examples on a GPU) on the first wgpu adapter:
//! every architecture flag and weight format against the float64
//! reference forward, chunked prefill and batching against one pass, bad
//! batches refused. In CI the adapter is Mesa's lavapipe (Vulkan on the
//! CPU). Cases that need a feature this backend lacks (mixture of
//! experts, LoRA, gpt-oss) check that the model refuses to load or a step
//! is refused. Where a case decodes over K-quant weights, it takes the
//! integer-dot products whatever the matrices' size (`kernels.rs` checks
//! both decode paths of every K-quant operation against the CPU).
#![cfg(feature = "wgpu")]

use kiln_backend::ModelHints;
use kiln_models::testing::cases::{self, Setup};
use kiln_wgpu::{WgpuBackend, WgpuOptions};

fn wgpu(hints: &ModelHints, _exact: bool) -> Result<WgpuBackend, String> {
    let opts = WgpuOptions { max_batch_tokens: 256, dot_from: Some(0), ..WgpuOptions::from_env() };
    WgpuBackend::open(&opts, hints).map_err(|e| e.to_string())
}

fn run(name: &str) {
    let make = cases::device_factory(wgpu);
    if let Err(e) = cases::check(name, &*make, Setup::GPU, kiln_wgpu::supports_feature) {
        panic!("{e}");
    }
}

kiln_models::tiny_case_tests!(run);
