//! Quick matmul timings robust to a busy machine: the minimum over many
//! repetitions (a run that was not preempted) and the median.
//!
//! `cargo bench -p kiln-kernels --bench matmul_min [filter]`

use kiln_kernels::matmul::{matmul_multi_with, CpuIsa};
use kiln_kernels::{quant, GgmlType, ThreadPool, WeightView};
use std::time::{Duration, Instant};

fn main() {
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-')).unwrap_or_default();
    let pools = [ThreadPool::new(1), ThreadPool::new(2)];
    let shapes = [
        ("attn_q_o", 576, 576),
        ("attn_kv", 576, 192),
        ("ffn_up", 576, 1536),
        ("ffn_down", 1536, 576),
        ("output", 576, 49152),
    ];
    println!("{:<40} {:>10} {:>10} {:>12}", "case", "min", "median", "min GB/s|GMAC/s");
    for ty in [GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::F16, GgmlType::Q6_K] {
        for (name, cols, rows) in shapes {
            if ty.row_bytes(cols).is_none() {
                continue;
            }
            let x: Vec<f32> =
                (0..rows * cols).map(|i| ((i * 2_654_435_761usize) % 1000) as f32 / 500.0 - 1.0).collect();
            let mut data = vec![0u8; ty.row_bytes(rows * cols).unwrap_or(0)];
            if quant::quantize_row(ty, &x, &mut data).is_err() {
                // K-quants cannot be quantized here: random bits with small f16 scales.
                for (i, b) in data.iter_mut().enumerate() {
                    *b = (i.wrapping_mul(2_654_435_761) >> 13) as u8;
                }
                for blk in data.chunks_exact_mut(ty.type_size()) {
                    blk[208] = 0;
                    blk[209] = 0x20;
                }
            }
            let w = WeightView::new(ty, rows, cols, &data);
            for n in [1usize, 64] {
                let x: Vec<f32> = (0..n * cols).map(|i| (i % 97) as f32 / 97.0 - 0.5).collect();
                let mut y = vec![0f32; n * rows];
                for (path, t) in [(CpuIsa::current(), 1usize), (CpuIsa::current(), 2), (CpuIsa::Scalar, 1)] {
                    let case = format!("{ty} {name} {cols}x{rows} n={n} {path:?} t{t}");
                    if !case.contains(&filter) || (path == CpuIsa::Scalar && n > 1) {
                        continue;
                    }
                    let mut times = Vec::new();
                    let start = Instant::now();
                    while times.len() < 20 || (start.elapsed() < Duration::from_millis(700) && times.len() < 5000) {
                        let t0 = Instant::now();
                        matmul_multi_with(path, &pools[t - 1], &[w], &x, n, &mut [&mut y])
                            .unwrap_or_else(|e| panic!("{e}"));
                        times.push(t0.elapsed().as_secs_f64());
                    }
                    times.sort_by(f64::total_cmp);
                    let (min, med) = (times[0], times[times.len() / 2]);
                    let rate =
                        if n == 1 { data.len() as f64 / min / 1e9 } else { (n * rows * cols) as f64 / min / 1e9 };
                    println!("{case:<40} {:>8.1}us {:>8.1}us {rate:>12.2}", min * 1e6, med * 1e6);
                }
            }
        }
    }
}
