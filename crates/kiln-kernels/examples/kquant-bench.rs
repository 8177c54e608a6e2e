//! The matrix products of one step of a 1B-class llama in a Q4_K mix
//! (hidden 2048, 22 layers, 4 KV heads of 64, intermediate 5632, vocab
//! 49152: `Q4_K`, with `attn_v` and `ffn_down` in `Q6_K` in every other
//! layer and the output matrix in `Q6_K`, as llama.cpp's Q4_K_M), with the
//! K-quants in the two packed forms side by side (`KForm`): the 32-value
//! forms (`Q4_1`, `S8x2`) and the super-block forms (`Q4K`, `Q6K`, what
//! models load), on one instruction-set level.
//!
//! Every layer's weights are distinct, so a step streams them from memory
//! as a decode step does. The forms alternate, one step each, and each
//! prints the best and the median of the steps: on a shared machine the
//! best is the least disturbed. Weight values are random (speed does not
//! depend on them).
//!
//! `cargo run --release -p kiln-kernels --example kquant-bench -- [avx2|avx2-vnni|avx512] [THREADS] [N] [STEPS]`

use std::time::Instant;

use kiln_kernels::matmul::{matmul_multi_with, CpuIsa, KForm, PackedRows};
use kiln_kernels::{GgmlType, ThreadPool, WeightView};

const LAYERS: usize = 22;
const HIDDEN: usize = 2048;
const KV: usize = 256;
const FF: usize = 5632;
const VOCAB: usize = 49152;

/// Random blocks of `ty` (`Q4_K` or `Q6_K`) with moderate `f16` scales.
fn random_k(ty: GgmlType, rows: usize, cols: usize, seed: u64) -> Vec<u8> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let mut out: Vec<u8> = (0..ty.row_bytes(rows * cols).unwrap_or(0)).map(|_| next() as u8).collect();
    let at: &[usize] = if ty == GgmlType::Q6_K { &[208] } else { &[0, 2] };
    for blk in out.chunks_exact_mut(ty.type_size()) {
        for &o in at {
            let v = half::f16::from_f32(((next() % 1000) as f32 / 1000.0 - 0.5) * 0.01);
            blk[o..o + 2].copy_from_slice(&v.to_le_bytes());
        }
    }
    out
}

/// One step's matrices in dispatch groups (QKV, O, gate/up, down; the
/// output last), each as `(rows, cols, type)`.
fn shapes() -> Vec<Vec<(usize, usize, GgmlType)>> {
    let (q4, q6) = (GgmlType::Q4_K, GgmlType::Q6_K);
    let mut g = Vec::new();
    for l in 0..LAYERS {
        let more = if l % 2 == 0 { q6 } else { q4 };
        g.push(vec![(HIDDEN, HIDDEN, q4), (KV, HIDDEN, q4), (KV, HIDDEN, more)]);
        g.push(vec![(HIDDEN, HIDDEN, q4)]);
        g.push(vec![(FF, HIDDEN, q4), (FF, HIDDEN, q4)]);
        g.push(vec![(HIDDEN, FF, more)]);
    }
    g.push(vec![(VOCAB, HIDDEN, q6)]);
    g
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let isa = match args.first().map(String::as_str) {
        None | Some("avx2") => CpuIsa::Avx2,
        Some("avx2-vnni") => CpuIsa::Avx2Vnni,
        Some("avx512") => CpuIsa::Avx512,
        Some(other) => panic!("unknown level {other} (avx2, avx2-vnni or avx512)"),
    };
    assert!(isa.is_supported(), "this CPU lacks {isa:?}");
    let num = |i: usize, d: usize| args.get(i).and_then(|s| s.parse().ok()).unwrap_or(d);
    let (threads, n, steps) = (num(1, 2), num(2, 1), num(3, 15));
    let pool = ThreadPool::new(threads);
    let groups = shapes();
    // Both forms of every matrix: [32-value forms, super-block forms].
    let forms: Vec<Vec<[PackedRows; 2]>> = groups
        .iter()
        .enumerate()
        .map(|(gi, g)| {
            g.iter()
                .enumerate()
                .map(|(i, &(rows, cols, ty))| {
                    let data = random_k(ty, rows, cols, (gi * 8 + i) as u64);
                    let w = WeightView::new(ty, rows, cols, &data);
                    let pack = |f| PackedRows::pack_with(w, f).unwrap_or_else(|| panic!("{ty:?} packs"));
                    [pack(KForm::Blocks32), pack(KForm::SuperBlocks)]
                })
                .collect()
        })
        .collect();
    let bytes = |f: usize| -> usize { forms.iter().flatten().map(|m| m[f].n_bytes()).sum() };
    println!("{isa:?}, {threads} threads, {n} token(s) per step, {steps} steps per form");
    let xs: Vec<Vec<f32>> =
        [HIDDEN, FF].iter().map(|&c| (0..n * c).map(|i| (i % 97) as f32 / 97.0 - 0.5).collect()).collect();
    let mut outs: Vec<Vec<f32>> = (0..3).map(|_| vec![0f32; n * VOCAB]).collect();
    let mut step = |f: usize| {
        let t0 = Instant::now();
        for g in &forms {
            let ws: Vec<WeightView<'_>> = g.iter().map(|m| WeightView::packed(&m[f])).collect();
            let x = if ws[0].cols == FF { &xs[1] } else { &xs[0] };
            let mut ys: Vec<&mut [f32]> = outs.iter_mut().zip(&ws).map(|(o, w)| &mut o[..n * w.rows]).collect();
            matmul_multi_with(isa, &pool, &ws, x, n, &mut ys).unwrap_or_else(|e| panic!("{e}"));
        }
        t0.elapsed().as_secs_f64() * 1e3
    };
    let mut times = [Vec::new(), Vec::new()];
    for _ in 0..steps {
        for (f, t) in times.iter_mut().enumerate() {
            t.push(step(f));
        }
    }
    let mut best = [0f64; 2];
    for (f, (t, name)) in
        times.iter_mut().zip(["32-value forms (Q4_1, S8x2)", "super-block forms (Q4K, Q6K)"]).enumerate()
    {
        t.sort_by(f64::total_cmp);
        best[f] = t[0];
        println!(
            "{name}: {:.1} MB per step, best {:.2} ms, median {:.2} ms",
            bytes(f) as f64 / 1e6,
            t[0],
            t[t.len() / 2]
        );
    }
    println!("super-block / 32-value, best step time: {:.3}", best[1] / best[0]);
}
