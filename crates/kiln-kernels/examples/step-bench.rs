//! The matrix products of one forward step of SmolLM2-135M's shape (30
//! layers of packed weights, `Q4_1` unless a type is named: Q/K/V, O, gate/up, down) for `n` tokens,
//! with every layer's weights distinct (streamed from memory, as in the
//! model) and with one layer's weights used 30 times (hot in cache). The
//! difference between the two is what streaming the weights costs a step.
//!
//! `cargo run --release -p kiln-kernels --example step-bench -- [q4_1|q4_0|q8_0|f16|bf16|f32] [THREADS] [N...]`

use std::time::Instant;

use kiln_kernels::matmul::{matmul_multi, PackedRows};
use kiln_kernels::{quant, GgmlType, ThreadPool, WeightView};

const LAYERS: usize = 30;
/// (cols, rows) per weight of one layer, grouped as the model dispatches them.
const GROUPS: [&[(usize, usize)]; 4] =
    [&[(576, 576), (576, 192), (576, 192)], &[(576, 576)], &[(576, 1536), (576, 1536)], &[(1536, 576)]];

fn packed(ty: GgmlType, rows: usize, cols: usize, seed: usize) -> PackedRows {
    let x: Vec<f32> =
        (0..rows * cols).map(|i| (((i + seed) * 2_654_435_761usize) % 1000) as f32 / 500.0 - 1.0).collect();
    let mut data = vec![0u8; ty.row_bytes(rows * cols).unwrap_or(0)];
    quant::quantize_row(ty, &x, &mut data).unwrap_or_else(|e| panic!("{e}"));
    PackedRows::pack(WeightView::new(ty, rows, cols, &data)).unwrap_or_else(|| panic!("{ty:?} packs"))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let ty = match args.iter().find(|s| s.parse::<usize>().is_err()).map(|s| s.to_ascii_lowercase()).as_deref() {
        None | Some("q4_1") => GgmlType::Q4_1,
        Some("q4_0") => GgmlType::Q4_0,
        Some("q8_0") => GgmlType::Q8_0,
        Some("f16") => GgmlType::F16,
        Some("bf16") => GgmlType::BF16,
        Some("f32") => GgmlType::F32,
        Some(other) => panic!("unknown weight type {other}"),
    };
    let a: Vec<usize> = args.iter().filter_map(|s| s.parse().ok()).collect();
    let threads = a.first().copied().unwrap_or(2);
    let ns: Vec<usize> = if a.len() > 1 { a[1..].to_vec() } else { vec![1, 2, 4, 8, 16, 34, 64] };
    let pool = ThreadPool::new(threads);
    let layers: Vec<Vec<Vec<PackedRows>>> = (0..LAYERS)
        .map(|l| GROUPS.iter().map(|g| g.iter().map(|&(c, r)| packed(ty, r, c, l * 7 + r)).collect()).collect())
        .collect();
    println!("{ty:?} weights, {threads} threads");
    for &n in &ns {
        let xs: Vec<Vec<f32>> =
            [576, 1536].iter().map(|&c| (0..n * c).map(|i| (i % 97) as f32 / 97.0 - 0.5).collect()).collect();
        let mut outs: Vec<Vec<f32>> = (0..3).map(|_| vec![0f32; n * 1536]).collect();
        let mut step = |layer_of: &dyn Fn(usize) -> usize| {
            for l in 0..LAYERS {
                for (gi, g) in layers[layer_of(l)].iter().enumerate() {
                    let x = if gi == 3 { &xs[1] } else { &xs[0] };
                    let ws: Vec<WeightView<'_>> = g.iter().map(WeightView::packed).collect();
                    let mut ys: Vec<&mut [f32]> = outs.iter_mut().zip(&ws).map(|(o, w)| &mut o[..n * w.rows]).collect();
                    matmul_multi(&pool, &ws, x, n, &mut ys).unwrap_or_else(|e| panic!("{e}"));
                }
            }
        };
        let mut time = |layer_of: &dyn Fn(usize) -> usize| {
            let mut best = f64::MAX;
            for _ in 0..15 {
                let t0 = Instant::now();
                for _ in 0..5 {
                    step(layer_of);
                }
                best = best.min(t0.elapsed().as_secs_f64() / 5.0);
            }
            best * 1e3
        };
        let streamed = time(&|l| l);
        let hot = time(&|_| 0);
        println!(
            "n {n:3}: streamed {streamed:6.3} ms, one layer hot {hot:6.3} ms, streaming costs {:5.3} ms ({:.3} ms/token streamed)",
            streamed - hot,
            streamed / n as f64
        );
    }
}
