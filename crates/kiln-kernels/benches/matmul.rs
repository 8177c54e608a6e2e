//! `matmul` on SmolLM2-135M's shapes (Q4_1 layers, Q8_0 output head).
//!
//! `cargo bench -p kiln-kernels --bench matmul -- --warm-up-time 1 --measurement-time 3`
//! For n = 1 the throughput is bytes of weights read per second.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use kiln_kernels::matmul::{matmul_multi_with, CpuIsa};
use kiln_kernels::{quant, GgmlType, ThreadPool, WeightView};

/// (name, cols, rows) of the model's matmuls.
const SHAPES: [(&str, usize, usize); 5] = [
    ("attn_q_o", 576, 576),
    ("attn_kv", 576, 192),
    ("ffn_gate_up", 576, 1536),
    ("ffn_down", 1536, 576),
    ("output", 576, 49152),
];

fn weight(ty: GgmlType, rows: usize, cols: usize) -> Vec<u8> {
    let x: Vec<f32> = (0..rows * cols).map(|i| ((i * 2_654_435_761usize) % 1000) as f32 / 500.0 - 1.0).collect();
    let mut out = vec![0u8; ty.row_bytes(rows * cols).unwrap_or(0)];
    quant::quantize_row(ty, &x, &mut out).unwrap_or_else(|e| panic!("{e}"));
    out
}

fn bench(c: &mut Criterion) {
    let pools = [ThreadPool::new(1), ThreadPool::new(2)];
    let best = CpuIsa::current();
    for ty in [GgmlType::Q4_1, GgmlType::Q8_0] {
        let mut g = c.benchmark_group(format!("matmul_{ty}"));
        for (name, cols, rows) in SHAPES {
            if name == "output" && ty == GgmlType::Q4_1 {
                continue; // the model's head is Q8_0
            }
            let data = weight(ty, rows, cols);
            let w = WeightView::new(ty, rows, cols, &data);
            for n in [1usize, 64] {
                let x: Vec<f32> = (0..n * cols).map(|i| (i % 97) as f32 / 97.0 - 0.5).collect();
                let mut y = vec![0f32; n * rows];
                g.throughput(if n == 1 {
                    Throughput::Bytes(data.len() as u64)
                } else {
                    Throughput::Elements((n * rows * cols) as u64)
                });
                let mut cases = vec![(best, 1usize), (best, 2)];
                if n == 1 && best != CpuIsa::Scalar {
                    cases.push((CpuIsa::Scalar, 1));
                }
                for (path, threads) in cases {
                    let id = BenchmarkId::new(format!("{name}_{cols}x{rows}_n{n}"), format!("{path:?}_t{threads}"));
                    g.bench_function(id, |b| {
                        b.iter(|| matmul_multi_with(path, &pools[threads - 1], &[w], &x, n, &mut [&mut y]).unwrap())
                    });
                }
            }
        }
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
