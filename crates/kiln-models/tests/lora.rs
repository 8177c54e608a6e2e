//! LoRA on the CPU beyond the shared cases: merged at load equals
//! unmerged, stacked adapters equal the reference of both deltas, and bad
//! adapters are errors that name what is wrong.

use std::path::Path;

use kiln_gguf::GgmlType;
use kiln_models::lora::{permute_rows, LoraAdapter, Proj};
use kiln_models::testing::cases::{spec, tokens, BLOCKS};
use kiln_models::testing::lora::TinyLora;
use kiln_models::testing::lora_cases::run_lora;
use kiln_models::testing::{reference_forward, tiny_weights, write_gguf, TinySpec};
use kiln_models::{cpu_backend, open, LoraUse, RunOptions, Runner};

fn runner(opened: &kiln_models::OpenedModel) -> Runner<kiln_kernels::CpuBackend> {
    let opts = RunOptions { max_ctx: 256, block_size: 4, kv_blocks: Some(BLOCKS), ..RunOptions::default() };
    Runner::load(cpu_backend(Some(2), true), opened, &opts).unwrap()
}

fn model(dir: &Path, ty: GgmlType) -> (std::path::PathBuf, TinySpec, kiln_models::testing::TinyWeights) {
    let spec = spec(ty);
    let w = tiny_weights(&spec);
    let path = dir.join(format!("m-{ty}.gguf"));
    write_gguf(&spec, &w, &path, &[]).unwrap();
    (path, spec, w)
}

fn max_diff(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    a.iter().flatten().zip(b.iter().flatten()).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

#[test]
fn merged_at_load_equals_unmerged() {
    let dir = tempfile::tempdir().unwrap();
    for ty in [GgmlType::F32, GgmlType::Q4_1] {
        let (path, spec, _) = model(dir.path(), ty);
        let opened = open(&path).unwrap();
        let cfg = opened.config.clone();
        let ad_dir = dir.path().join(format!("a-{ty}"));
        TinyLora::random(&cfg, 8, &Proj::ALL, 9, false).write_peft(&ad_dir).unwrap();
        let ad = LoraAdapter::load(&ad_dir, &cfg).unwrap();
        let toks = tokens(21, spec.vocab);
        let mut r = runner(&opened);
        r.lora_attach(1, &ad).unwrap();
        let unmerged = run_lora(&mut r, &toks, 4, Some(LoraUse { adapter: 1, scale: 1.0 })).unwrap();
        let mut m = runner(&open(&path).unwrap().with_merged_lora(ad));
        let merged = run_lora(&mut m, &toks, 4, None).unwrap();
        let scale = merged.iter().flatten().fold(0f32, |a, v| a.max(v.abs()));
        // Unmerged factors are 8-bit on the CPU, their shrink on 8-bit
        // inputs (5e-3); a quantized base is merged in f32, so its products
        // are no longer 8-bit-input integer products: within the quantized
        // tolerance.
        let tol = if ty == GgmlType::F32 { 5e-3 } else { 3e-2 };
        let d = max_diff(&merged, &unmerged);
        assert!(d < tol * scale, "{ty}: merged vs unmerged max diff {d} (scale {scale})");
    }
}

#[test]
fn stacked_adapters_equal_the_reference_of_both() {
    let dir = tempfile::tempdir().unwrap();
    let (path, spec, w) = model(dir.path(), GgmlType::F32);
    let opened = open(&path).unwrap();
    let cfg = opened.config.clone();
    let t1 = TinyLora::random(&cfg, 4, &Proj::ALL, 21, false);
    let t2 = TinyLora::random(&cfg, 2, &[Proj::Q, Proj::Up], 22, false);
    t1.write_peft(&dir.path().join("s1")).unwrap();
    t2.write_gguf(&cfg, &dir.path().join("s2.gguf"), GgmlType::F32).unwrap();
    let a1 = LoraAdapter::load(&dir.path().join("s1"), &cfg).unwrap();
    let a2 = LoraAdapter::load(&dir.path().join("s2.gguf"), &cfg).unwrap();
    let both = LoraAdapter::stack(&[(&a1, 1.0), (&a2, 0.5)]).unwrap();
    assert_eq!(both.get(0, Proj::Q).unwrap().unwrap().rank, 6);
    let mut r = runner(&opened);
    r.lora_attach(3, &both).unwrap();
    let toks = tokens(15, spec.vocab);
    let got = run_lora(&mut r, &toks, 4, Some(LoraUse { adapter: 3, scale: 1.0 })).unwrap();
    let want = reference_forward(&cfg, &t2.merged(&cfg, &t1.merged(&cfg, &w, 1.0), 0.5), &toks);
    let scale = want.iter().flatten().fold(0f32, |a, v| a.max(v.abs()));
    // 8-bit factors and shrink inputs on the CPU: as lora_matches_reference.
    assert!(max_diff(&got, &want) < 5e-3 * scale, "{}", max_diff(&got, &want));
}

#[test]
fn bad_adapters_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _, _) = model(dir.path(), GgmlType::F32);
    let cfg = open(&path).unwrap().config;
    let err = |p: &Path| LoraAdapter::load(p, &cfg).unwrap_err().to_string();
    assert!(err(&dir.path().join("nope")).contains("no such file"));
    // An adapter of another model's width: the message names the tensor and shapes.
    let other = kiln_models::testing::TinySpec { hidden: 128, ..spec(GgmlType::F32) }.config(cfg.rope_style);
    TinyLora::random(&other, 4, &[Proj::V], 1, false).write_peft(&dir.path().join("wide")).unwrap();
    let m = err(&dir.path().join("wide"));
    assert!(m.contains("layers.0.self_attn.v_proj") && m.contains("[4, 128]") && m.contains("[rank, 256]"), "{m}");
    // B of the wrong height for O.
    let mut t = TinyLora::random(&cfg, 4, &[Proj::O], 1, false);
    t.targets.get_mut(&(0, Proj::O)).unwrap().1.truncate(192 * 4);
    t.write_peft(&dir.path().join("short-b")).unwrap();
    let m = err(&dir.path().join("short-b"));
    assert!(m.contains("o_proj: B has shape [192, 4]") && m.contains("[256, 4]"), "{m}");
    // A layer past the model.
    let deep = kiln_models::testing::TinySpec { layers: 3, ..spec(GgmlType::F32) }.config(cfg.rope_style);
    TinyLora::random(&deep, 2, &[Proj::Q], 1, false).write_peft(&dir.path().join("deep")).unwrap();
    assert!(err(&dir.path().join("deep")).contains("layer 2, but the model has 2"));
    // A PEFT config kiln cannot honour.
    let dora = dir.path().join("dora");
    TinyLora::random(&cfg, 2, &[Proj::Q], 1, false).write_peft(&dora).unwrap();
    let c = std::fs::read_to_string(dora.join("adapter_config.json")).unwrap();
    std::fs::write(dora.join("adapter_config.json"), c.replace("\"use_dora\": false", "\"use_dora\": true")).unwrap();
    assert!(err(&dora).contains("DoRA"));
    // A GGUF model file is not an adapter.
    assert!(err(&path).contains("not a LoRA file"));
    // A GGUF adapter of another architecture.
    let q = kiln_models::testing::TinySpec { arch: kiln_models::Arch::Qwen2, ..spec(GgmlType::F32) };
    let qcfg = q.config(kiln_kernels::ops::RopeStyle::Neox);
    TinyLora::random(&qcfg, 2, &[Proj::Q], 1, false)
        .write_gguf(&qcfg, &dir.path().join("q.gguf"), GgmlType::F32)
        .unwrap();
    assert!(err(&dir.path().join("q.gguf")).contains("for Qwen2"));
}

/// The converter's order: within a head, HF rows `(s, i)` (rotary halves)
/// become rows `2i + s` (rotary pairs).
#[test]
fn permutation_is_llama_cpp_converter_order() {
    // One head of dim 4, rows of width 1: HF [h0 h1 h2 h3], pairs (0,2), (1,3).
    let hf = [0.0, 1.0, 2.0, 3.0];
    let pairs = permute_rows(&hf, 1, 1, 4, true);
    assert_eq!(pairs, vec![0.0, 2.0, 1.0, 3.0]);
    assert_eq!(permute_rows(&pairs, 1, 1, 4, false), hf.to_vec());
}
