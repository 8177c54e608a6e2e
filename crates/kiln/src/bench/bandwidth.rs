//! Memory bandwidth, STREAM style, with the threads the engine uses.
//!
//! Two kernels over buffers far larger than any cache: *copy* (`b = a`,
//! counted as 2 bytes moved per byte copied, as STREAM counts it) and *read*
//! (a sum over `a`, 1 byte per byte), each the best of several repetitions.
//! Decode reads every weight once per token, so the faster of the two bounds
//! decode speed: `limit tok/s = bandwidth / bytes read per token`.

use std::hint::black_box;
use std::time::Instant;

use serde::Serialize;

/// Measured bandwidths in GB/s (10^9 bytes per second).
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct Bandwidth {
    /// STREAM copy (read + write counted).
    pub(crate) copy_gb_s: f64,
    /// Read-only sum.
    pub(crate) read_gb_s: f64,
    /// Threads used.
    pub(crate) threads: usize,
    /// Size of one buffer in MiB.
    pub(crate) buffer_mib: usize,
}

impl Bandwidth {
    /// The bandwidth the decode limit is computed with (the higher of the two,
    /// so the limit is an upper bound).
    pub(crate) fn best_gb_s(&self) -> f64 {
        self.copy_gb_s.max(self.read_gb_s)
    }

    /// The better of two samples, kernel by kernel.
    pub(crate) fn best_with(self, other: Bandwidth) -> Bandwidth {
        Bandwidth {
            copy_gb_s: self.copy_gb_s.max(other.copy_gb_s),
            read_gb_s: self.read_gb_s.max(other.read_gb_s),
            ..self
        }
    }
}

/// Measures copy and read bandwidth with `threads` threads on two buffers of
/// `buffer_mib` MiB each, keeping the best of `reps` runs of each kernel.
pub(crate) fn measure(threads: usize, buffer_mib: usize, reps: usize) -> Bandwidth {
    let threads = threads.max(1);
    let n = (buffer_mib.max(1) << 20) / 8;
    let a: Vec<u64> = (0..n as u64).collect();
    let mut b: Vec<u64> = vec![1; n];
    let chunk = n.div_ceil(threads);
    let bytes = (n * 8) as f64;
    let (mut copy_s, mut read_s) = (f64::INFINITY, f64::INFINITY);
    for _ in 0..reps.max(1) {
        let t = Instant::now();
        std::thread::scope(|s| {
            for (src, dst) in a.chunks(chunk).zip(b.chunks_mut(chunk)) {
                s.spawn(move || dst.copy_from_slice(src));
            }
        });
        copy_s = copy_s.min(t.elapsed().as_secs_f64());
        black_box(&mut b);
        let t = Instant::now();
        let total = std::thread::scope(|s| {
            let hs: Vec<_> = a.chunks(chunk).map(|src| s.spawn(move || sum(src))).collect();
            hs.into_iter().filter_map(|h| h.join().ok()).fold(0u64, u64::wrapping_add)
        });
        read_s = read_s.min(t.elapsed().as_secs_f64());
        black_box(total);
    }
    Bandwidth { copy_gb_s: 2.0 * bytes / copy_s / 1e9, read_gb_s: bytes / read_s / 1e9, threads, buffer_mib }
}

/// A wrapping sum with 8 independent lanes (vectorizes; no FP reassociation needed).
fn sum(v: &[u64]) -> u64 {
    let mut acc = [0u64; 8];
    let mut it = v.chunks_exact(8);
    for c in &mut it {
        for (a, x) in acc.iter_mut().zip(c) {
            *a = a.wrapping_add(*x);
        }
    }
    let tail = it.remainder().iter().fold(0u64, |s, x| s.wrapping_add(*x));
    acc.iter().fold(tail, |s, x| s.wrapping_add(*x))
}

/// Decode tokens per second the bandwidth allows when each token reads
/// `weight_bytes` of weights plus `kv_bytes_per_token * context` of KV cache.
pub(crate) fn decode_limit_tok_s(bw_gb_s: f64, weight_bytes: usize, kv_bytes_per_token: usize, context: f64) -> f64 {
    let bytes = weight_bytes as f64 + kv_bytes_per_token as f64 * context.max(0.0);
    if bytes > 0.0 {
        bw_gb_s * 1e9 / bytes
    } else {
        f64::NAN
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sum_matches_naive() {
        let v: Vec<u64> = (0..1003).map(|i| i * 7919).collect();
        assert_eq!(sum(&v), v.iter().sum::<u64>());
        assert_eq!(sum(&[]), 0);
    }

    #[test]
    fn measures_something_plausible() {
        let bw = measure(2, 8, 2);
        assert!(bw.copy_gb_s > 0.1 && bw.copy_gb_s < 10_000.0, "{bw:?}");
        assert!(bw.read_gb_s > 0.1 && bw.read_gb_s < 10_000.0, "{bw:?}");
        assert_eq!(bw.best_gb_s(), bw.copy_gb_s.max(bw.read_gb_s));
    }

    #[test]
    fn limit_formula() {
        // 10 GB/s over 100 MB of weights = 100 tok/s; KV adds 1 MB at 100 tokens of 10 kB.
        assert!((decode_limit_tok_s(10.0, 100_000_000, 0, 0.0) - 100.0).abs() < 1e-9);
        assert!((decode_limit_tok_s(10.0, 99_000_000, 10_000, 100.0) - 100.0).abs() < 1e-9);
        assert!(decode_limit_tok_s(10.0, 0, 0, 0.0).is_nan());
    }
}
