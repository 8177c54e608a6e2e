//! End-to-end checks of the model layer on tiny random models generated here:
//! every architecture flag, several weight formats, against a plain dense
//! reference; chunked prefill, batching and decode against one-pass prefill.

use kiln_gguf::GgmlType;
use kiln_kernels::ops::RopeStyle;
use kiln_kernels::ThreadPool;
use kiln_models::testing::{reference_forward, tiny_weights, write_gguf, TinySpec};
use kiln_models::{load, Arch, ForwardBatch, ForwardScratch, KvCache, LoadOptions, LogitsWant, Model};

const BS: usize = 4;

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

fn tokens(n: usize, vocab: usize) -> Vec<u32> {
    (0..n).map(|i| ((i * 37 + 11) % vocab) as u32).collect()
}

/// Runs `toks` through the model in chunks of `chunk`, returning logits at every position.
fn run_chunked(m: &Model, pool: &ThreadPool, toks: &[u32], chunk: usize) -> Vec<Vec<f32>> {
    let mut kv = KvCache::new(m.config(), 64, BS);
    let table: Vec<u32> = (0..64).rev().collect(); // scattered, descending block ids
    let mut scratch = ForwardScratch::default();
    let mut out = Vec::new();
    let vocab = m.config().vocab_size;
    for start in (0..toks.len()).step_by(chunk) {
        let end = (start + chunk).min(toks.len());
        let mut b = ForwardBatch::new();
        b.push_seq(&toks[start..end], start, &table, BS, LogitsWant::All).unwrap();
        let mut logits = Vec::new();
        m.forward(pool, &b, &mut kv, &mut scratch, &mut logits).unwrap();
        out.extend(logits.chunks(vocab).map(|c| c.to_vec()));
    }
    out
}

fn check_against_reference(spec: TinySpec, tol: f32) {
    check_loaded_against_reference(spec, tol, &LoadOptions::default());
}

fn check_loaded_against_reference(spec: TinySpec, tol: f32, opts: &LoadOptions) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    let w = tiny_weights(&spec);
    write_gguf(&spec, &w, &path, &[]).unwrap();
    let loaded = load(&path, opts).unwrap();
    let style = if spec.arch == Arch::Llama { RopeStyle::Normal } else { RopeStyle::Neox };
    assert_eq!(loaded.model.config(), &spec.config(style));
    let toks = tokens(23, spec.vocab);
    let want = reference_forward(loaded.model.config(), &w, &toks);
    let pool = ThreadPool::new(2);
    let got = run_chunked(&loaded.model, &pool, &toks, toks.len());
    let scale = want.iter().flatten().map(|v| v.abs()).fold(0.0, f32::max);
    for (p, (g, r)) in got.iter().zip(&want).enumerate() {
        let d = max_abs_diff(g, r);
        assert!(d <= tol * scale, "{:?} {}: position {p}: max diff {d} (logit scale {scale})", spec.arch, spec.ty);
    }
}

#[test]
fn llama_f32_matches_reference() {
    check_against_reference(TinySpec::llama(GgmlType::F32), 1e-4);
}

#[test]
fn qwen2_and_qwen3_match_reference() {
    check_against_reference(TinySpec { arch: Arch::Qwen2, tied: true, ..TinySpec::llama(GgmlType::F32) }, 1e-4);
    check_against_reference(TinySpec { arch: Arch::Qwen3, ..TinySpec::llama(GgmlType::F16) }, 1e-3);
}

/// Quantized weights: kiln quantizes activations to 8 bits for integer dot
/// products (as llama.cpp does), so logits differ from the f32 reference on
/// the same (dequantized) weights by ~1% of the logit scale at most.
#[test]
fn quantized_formats_match_reference() {
    for ty in [GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::BF16] {
        check_against_reference(TinySpec::llama(ty), 3e-2);
    }
}

/// K-quant files: Q4_K repacked at load into Q4_1's form and Q6_K into
/// signed bytes with two scales per 32 values, against the reference on
/// the file's own dequantized weights.
/// Widths are whole 256-value superblocks.
#[test]
fn k_quant_formats_match_reference() {
    for ty in [GgmlType::Q4_K, GgmlType::Q6_K] {
        check_against_reference(TinySpec { hidden: 256, ff: 512, ..TinySpec::llama(ty) }, 3e-2);
    }
}

/// `LoadOptions::exact` keeps K-quant weights as the file stores them and
/// computes in f32: the logits then match the f32 reference on the same
/// dequantized weights far more closely than the integer kernels' (3e-2).
#[test]
fn exact_load_matches_reference_closely() {
    let exact = LoadOptions { exact: true, ..Default::default() };
    for ty in [GgmlType::Q4_K, GgmlType::Q6_K] {
        check_loaded_against_reference(TinySpec { hidden: 256, ff: 512, ..TinySpec::llama(ty) }, 1e-3, &exact);
    }
}

#[test]
fn chunked_prefill_and_decode_equal_one_pass() {
    let spec = TinySpec::llama(GgmlType::Q8_0);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    write_gguf(&spec, &tiny_weights(&spec), &path, &[]).unwrap();
    let m = load(&path, &LoadOptions::default()).unwrap().model;
    let pool = ThreadPool::new(2);
    let toks = tokens(30, spec.vocab);
    let one = run_chunked(&m, &pool, &toks, 30);
    for chunk in [1, 3, 7, 16] {
        let got = run_chunked(&m, &pool, &toks, chunk);
        for (p, (a, b)) in got.iter().zip(&one).enumerate() {
            assert!(max_abs_diff(a, b) < 1e-4, "chunk {chunk} position {p}: {}", max_abs_diff(a, b));
        }
    }
}

#[test]
fn batch_of_sequences_equals_each_alone() {
    let spec = TinySpec::llama(GgmlType::Q4_1);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    write_gguf(&spec, &tiny_weights(&spec), &path, &[]).unwrap();
    let m = load(&path, &LoadOptions::default()).unwrap().model;
    let pool = ThreadPool::new(2);
    let vocab = spec.vocab;
    let a = tokens(9, vocab);
    let b: Vec<u32> = tokens(14, vocab).into_iter().rev().collect();
    let alone_a = run_chunked(&m, &pool, &a, 9);
    let alone_b = run_chunked(&m, &pool, &b, 14);
    // One step with both sequences (different lengths, disjoint blocks).
    let mut kv = KvCache::new(m.config(), 64, BS);
    let (ta, tb): (Vec<u32>, Vec<u32>) = ((0..8).collect(), (20..30).collect());
    let mut batch = ForwardBatch::new();
    batch.push_seq(&a, 0, &ta, BS, LogitsWant::Last).unwrap();
    batch.push_seq(&b, 0, &tb, BS, LogitsWant::All).unwrap();
    let mut logits = Vec::new();
    m.forward(&pool, &batch, &mut kv, &mut ForwardScratch::default(), &mut logits).unwrap();
    let rows: Vec<&[f32]> = logits.chunks(vocab).collect();
    assert_eq!(rows.len(), 1 + 14);
    assert!(max_abs_diff(rows[0], &alone_a[8]) < 1e-4);
    for p in 0..14 {
        assert!(max_abs_diff(rows[1 + p], &alone_b[p]) < 1e-4);
    }
    // Then one decode step for both at once.
    batch.clear();
    batch.push_seq(&[5], 9, &ta, BS, LogitsWant::Last).unwrap();
    batch.push_seq(&[6], 14, &tb, BS, LogitsWant::Last).unwrap();
    m.forward(&pool, &batch, &mut kv, &mut ForwardScratch::default(), &mut logits).unwrap();
    let mut a2 = a.clone();
    a2.push(5);
    let mut b2 = b.clone();
    b2.push(6);
    assert!(max_abs_diff(&logits[..vocab], &run_chunked(&m, &pool, &a2, 10)[9]) < 1e-4);
    assert!(max_abs_diff(&logits[vocab..], &run_chunked(&m, &pool, &b2, 15)[14]) < 1e-4);
}

#[test]
fn bad_batches_are_errors() {
    let spec = TinySpec::llama(GgmlType::F32);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    write_gguf(&spec, &tiny_weights(&spec), &path, &[]).unwrap();
    let m = load(&path, &LoadOptions::default()).unwrap().model;
    let pool = ThreadPool::new(1);
    let mut kv = KvCache::new(m.config(), 8, BS);
    let mut logits = Vec::new();
    let mut s = ForwardScratch::default();
    let mut b = ForwardBatch::new();
    b.push_seq(&[spec.vocab as u32], 0, &[0], BS, LogitsWant::Last).unwrap();
    assert!(m.forward(&pool, &b, &mut kv, &mut s, &mut logits).is_err(), "token outside the vocabulary");
    b.clear();
    b.push_seq(&[1], 0, &[99], BS, LogitsWant::Last).unwrap();
    assert!(m.forward(&pool, &b, &mut kv, &mut s, &mut logits).is_err(), "block outside the cache");
    b.clear();
    assert!(b.push_seq(&[1, 2, 3, 4, 5], 0, &[0], BS, LogitsWant::Last).is_err(), "table too short");
    b.clear();
    b.push_seq(&[1], spec.ctx, &(0..8).collect::<Vec<_>>().repeat(20), BS, LogitsWant::Last).unwrap();
    assert!(m.forward(&pool, &b, &mut kv, &mut s, &mut logits).is_err(), "position past the context");
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
