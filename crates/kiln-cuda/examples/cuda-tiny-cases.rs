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
//! Then `moe_device_route_equals_host`: mixture-of-experts prompt steps
//! routed and grouped on the device give the logits of the host's routing
//! (up to the routing weights' rounding), with each tile size of the
//! grouped products.
//!
//! `cuda-tiny-cases [CASE...]` (all by default) on the GPU machine;
//! `KILN_CUDA=KEY=VALUE,...` runs them with those CUDA settings.

use std::process::ExitCode;

use kiln_backend::ModelHints;
use kiln_cuda::{CudaBackend, CudaOptions};
use kiln_models::testing::cases::{self, kv_quant};

fn cuda(hints: &ModelHints, exact: bool) -> Result<CudaBackend, String> {
    cuda_with(hints, exact, &[])
}

/// [`cuda`] with `more` settings after `KILN_CUDA`'s.
fn cuda_with(hints: &ModelHints, exact: bool, more: &[&str]) -> Result<CudaBackend, String> {
    let mut opts = CudaOptions { max_batch_tokens: 256, ..Default::default() };
    let env = std::env::var("KILN_CUDA").unwrap_or_default();
    for kv in env.split(',').filter(|s| !s.is_empty()).chain(more.iter().copied()) {
        opts.set(kv)?;
    }
    opts.quantized &= !exact;
    CudaBackend::open(&opts, hints).map_err(|e| e.to_string())
}

/// The name of the routing check.
const MOE_ROUTE: &str = "moe_device_route_equals_host";

/// Device routing against host routing, for each tile size.
fn moe_route(dir: &std::path::Path) -> Result<Vec<String>, String> {
    let mut lines = Vec::new();
    for tile in ["auto", "16", "64"] {
        let t = format!("moe-tile={tile}");
        let dev = cases::device_factory(move |h: &ModelHints, e| cuda_with(h, e, &["moe-route=device", &t]));
        let t = format!("moe-tile={tile}");
        let host = cases::device_factory(move |h: &ModelHints, e| cuda_with(h, e, &["moe-route=host", &t]));
        for l in cases::moe_configs_agree(&*dev, &*host, dir)? {
            lines.push(format!("tile {tile}: {l}"));
        }
    }
    Ok(lines)
}

fn main() -> ExitCode {
    let only: Vec<String> = std::env::args().skip(1).collect();
    let route_only = only.iter().any(|o| o == MOE_ROUTE);
    let only: Vec<String> = only.into_iter().filter(|o| o != MOE_ROUTE).collect();
    let mut failed = false;
    if route_only || only.is_empty() {
        let dir = std::env::temp_dir().join(format!("kiln-cuda-moe-route-{}", std::process::id()));
        let result = std::fs::create_dir_all(&dir).map_err(|e| e.to_string()).and_then(|()| moe_route(&dir));
        let _ = std::fs::remove_dir_all(&dir);
        match result {
            Ok(lines) => {
                lines.iter().for_each(|l| println!("  {l}"));
                println!("test {MOE_ROUTE} ... ok");
            }
            Err(e) => {
                println!("test {MOE_ROUTE} ... FAILED: {e}");
                failed = true;
            }
        }
    }
    let rest = if route_only && only.is_empty() { ExitCode::SUCCESS } else { the_rest(&only) };
    if failed {
        ExitCode::FAILURE
    } else {
        rest
    }
}

/// The shared cases named in `only` (all when empty) and the KV check.
fn the_rest(only: &[String]) -> ExitCode {
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
