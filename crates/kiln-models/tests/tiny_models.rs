//! End-to-end checks of the model layer on tiny random models generated here,
//! on the CPU backend: the shared case list of `kiln_models::testing::cases`
//! (every architecture flag, several weight formats, against a plain dense
//! reference; chunked prefill, batching and decode against one-pass
//! prefill; bad batches), which `kiln-cuda`'s `tiny-cases` runs on a GPU.

use std::path::Path;

use kiln_gguf::GgmlType;
use kiln_kernels::ops::RopeStyle;
use kiln_models::testing::cases::{self, Factory, Setup, BLOCKS};
use kiln_models::testing::{tiny_weights, write_gguf, TinySpec};
use kiln_models::{load, Arch, LoadOptions};

fn cpu(path: &Path, exact: bool) -> Result<kiln_models::Runner<kiln_kernels::CpuBackend>, String> {
    let opts = LoadOptions {
        exact,
        kv_blocks: Some(BLOCKS),
        block_size: Some(Setup::CPU.block_size),
        threads: Some(2),
        ..Default::default()
    };
    load(path, &opts).map_err(|e| e.to_string())
}

fn run(name: &str) {
    let case = cases::all().into_iter().find(|c| c.name == name).expect("a case of that name");
    let dir = tempfile::tempdir().unwrap();
    let make: &Factory<'_, kiln_kernels::CpuBackend> = &cpu;
    if let Err(e) = (case.run)(make, dir.path(), Setup::CPU) {
        panic!("{name}: {e}");
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

/// Quantized weights: kiln quantizes activations to 8 bits for integer dot
/// products (as llama.cpp does), so logits differ from the f32 reference on
/// the same (dequantized) weights by ~1% of the logit scale at most.
#[test]
fn quantized_formats_match_reference() {
    run("quantized_formats_match_reference");
}

/// K-quant files: Q4_K repacked at load into Q4_1's form and Q6_K into
/// signed bytes with two scales per 32 values, against the reference on
/// the file's own dequantized weights; and loaded exact (no repacking,
/// f32 products), far closer.
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
fn every_case_has_a_test() {
    let names: Vec<&str> = cases::all::<kiln_kernels::CpuBackend>().iter().map(|c| c.name).collect();
    let src = include_str!("tiny_models.rs");
    for n in names {
        assert!(src.contains(&format!("fn {n}()")), "case {n} has no #[test] here");
    }
}

#[test]
fn the_config_is_read_from_the_file() {
    for spec in
        [TinySpec::llama(GgmlType::F32), TinySpec { arch: Arch::Qwen2, tied: true, ..TinySpec::llama(GgmlType::F32) }]
    {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tiny.gguf");
        write_gguf(&spec, &tiny_weights(&spec), &path, &[]).unwrap();
        let r = cpu(&path, false).unwrap();
        let style = if spec.arch == Arch::Llama { RopeStyle::Normal } else { RopeStyle::Neox };
        assert_eq!(r.config(), &spec.config(style));
    }
}

#[test]
fn malformed_files_are_clear_errors() {
    let spec = TinySpec::llama(GgmlType::F32);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    write_gguf(&spec, &tiny_weights(&spec), &path, &[]).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    for cut in [3, 20, 200, bytes.len() / 2, bytes.len() - 1] {
        let p = dir.path().join(format!("cut{cut}.gguf"));
        std::fs::write(&p, &bytes[..cut]).unwrap();
        let err = load(&p, &LoadOptions::default()).err().expect("truncated file must fail");
        assert!(err.to_string().contains("cut"), "error names the file: {err}");
    }
    let p = dir.path().join("notgguf.bin");
    std::fs::write(&p, b"hello world").unwrap();
    assert!(load(&p, &LoadOptions::default()).is_err());
    // A file missing a tensor.
    let mut w = tiny_weights(&spec);
    w.remove("blk.1.ffn_up.weight");
    let p = dir.path().join("missing.gguf");
    write_gguf(&spec, &w, &p, &[]).unwrap();
    let err = load(&p, &LoadOptions::default()).err().unwrap().to_string();
    assert!(err.contains("blk.1.ffn_up.weight"), "{err}");
}
