//! The tiny-model cases of `kiln_models::testing::cases` (the list the CPU
//! runs in `kiln-models/tests/tiny_models.rs` and CUDA in `tiny-cases`) on
//! the first wgpu adapter: every architecture flag and weight format
//! against the float64 reference forward, chunked prefill and batching
//! against one pass, bad batches refused. In CI the adapter is Mesa's
//! lavapipe (Vulkan on the CPU). Cases that need a feature this backend
//! lacks (mixture of experts, LoRA) check that the model refuses to load.
#![cfg(feature = "wgpu")]

use std::path::Path;

use kiln_models::testing::cases::{self, Factory, Setup, BLOCKS};
use kiln_models::{RunOptions, Runner};
use kiln_wgpu::{WgpuBackend, WgpuOptions};

fn gpu(path: &Path, _exact: bool) -> Result<Runner<WgpuBackend>, String> {
    let opened = kiln_models::open(path).map_err(|e| e.to_string())?;
    let hints = opened.device_hints().map_err(|e| e.to_string())?;
    let opts = WgpuOptions { max_batch_tokens: 256, ..WgpuOptions::from_env() };
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

fn run(name: &str) {
    let case = cases::all::<WgpuBackend>().into_iter().find(|c| c.name == name).expect("a case of that name");
    let dir = tempfile::tempdir().unwrap();
    let make: &Factory<'_, WgpuBackend> = &gpu;
    let result = (case.run)(make, dir.path(), Setup::GPU);
    match case.needs.iter().find(|&&f| !WgpuBackend::supports_feature(f)) {
        None => {
            if let Err(e) = result {
                panic!("{name}: {e}");
            }
        }
        // Not implemented here: the case must fail (the model refuses to
        // load, or a step is refused), never pass by accident.
        Some(missing) => assert!(result.is_err(), "{name} passed without {missing:?}"),
    }
}

#[test]
fn llama_f32_matches_reference() {
    run("llama_f32_matches_reference");
}

#[test]
fn qwen2_and_qwen3_match_reference() {
    run("qwen2_and_qwen3_match_reference");
}

#[test]
fn quantized_formats_match_reference() {
    run("quantized_formats_match_reference");
}

#[test]
fn k_quant_formats_match_reference() {
    run("k_quant_formats_match_reference");
}

#[test]
fn chunked_prefill_and_decode_equal_one_pass() {
    run("chunked_prefill_and_decode_equal_one_pass");
}

#[test]
fn batch_of_sequences_equals_each_alone() {
    run("batch_of_sequences_equals_each_alone");
}

#[test]
fn bad_batches_are_errors() {
    run("bad_batches_are_errors");
}

#[test]
fn gemma3_matches_reference() {
    run("gemma3_matches_reference");
}

#[test]
fn moe_families_are_refused() {
    run("moe_families_match_reference");
}

#[test]
fn lora_is_refused() {
    run("lora_matches_reference");
}

/// Every case of the shared list is run above (a new case must be added).
#[test]
fn every_case_is_listed() {
    let src = include_str!("tiny_cases.rs");
    for c in cases::all::<WgpuBackend>() {
        let listed = src.contains(&format!("run(\"{}\")", c.name));
        let lora_or_moe = c.needs.iter().any(|f| matches!(f, kiln_backend::Feature::Lora | kiln_backend::Feature::Moe));
        assert!(listed || lora_or_moe, "the case {} is not run on wgpu", c.name);
    }
}
