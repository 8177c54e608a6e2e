//! Activations quantized to 8 bits per 32-element block, the input format of
//! the integer kernels for `Q4_0`, `Q4_1`, `Q5_0`, `Q5_1` and `Q8_0` weights.
//!
//! This is kiln's own in-memory layout (never stored): per token, `q` holds
//! `cols` signed bytes in element order, and each block `b` has an `f32`
//! scale `d[b]` and `s[b] = d[b] · Σq`. The SIMD kernels read the scales
//! pre-broadcast: `d8[8b..8b+8]` is `d[b]` eight times and `s8` likewise
//! holds `s[b] / 8` (so summing 8 lanes gives `s[b]` exactly). Where a
//! weight's kernel asks (`PackKind::Q6K`), `h[2b]` and `h[2b + 1]` hold `Σq`
//! over the block's two halves of 16 (no other path pays for them).

use std::ops::Range;

use super::CpuIsa;
use crate::ops::par::{for_rows, RowsMut};
use crate::pool::ThreadPool;

/// Elements per activation block.
pub(crate) const QK: usize = 32;

/// Quantized activations of `n` tokens; buffers only grow.
#[derive(Debug, Default)]
pub(crate) struct ActQ8 {
    pub(crate) cols: usize,
    pub(crate) q: Vec<i8>,
    pub(crate) d: Vec<f32>,
    pub(crate) s: Vec<f32>,
    pub(crate) d8: Vec<f32>,
    pub(crate) s8: Vec<f32>,
    pub(crate) h: Vec<i32>,
    /// Whether the last quantization filled `h`.
    halves: bool,
}

/// Consecutive quantized tokens of an [`ActQ8`], as the kernels read them:
/// the view's first token is their token 0. A product over some of the
/// rows that one quantization prepared (a group of [`super::matmul_grouped`])
/// reads them in place.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ActRows<'a> {
    pub(crate) cols: usize,
    pub(crate) q: &'a [i8],
    pub(crate) d: &'a [f32],
    pub(crate) s: &'a [f32],
    pub(crate) d8: &'a [f32],
    pub(crate) s8: &'a [f32],
    /// Empty unless the quantization computed the half sums.
    pub(crate) h: &'a [i32],
}

impl ActRows<'_> {
    /// Blocks per token.
    pub(crate) fn nb(&self) -> usize {
        self.cols / QK
    }
}

impl ActQ8 {
    /// Blocks per token.
    pub(crate) fn nb(&self) -> usize {
        self.cols / QK
    }

    /// Tokens `t` of the last quantization. A range past what it
    /// quantized gives empty slices, which the kernels' length checks
    /// refuse.
    pub(crate) fn rows(&self, t: Range<usize>) -> ActRows<'_> {
        let (cols, nb) = (self.cols, self.nb());
        fn part<'a, T>(v: &'a [T], t: &Range<usize>, per: usize) -> &'a [T] {
            v.get(t.start * per..t.end * per).unwrap_or(&[])
        }
        ActRows {
            cols,
            q: part(&self.q, &t, cols),
            d: part(&self.d, &t, nb),
            s: part(&self.s, &t, nb),
            d8: part(&self.d8, &t, nb * 8),
            s8: part(&self.s8, &t, nb * 8),
            h: if self.halves { part(&self.h, &t, nb * 2) } else { &[] },
        }
    }

    /// Quantizes `n` rows of `cols` (a multiple of 32) values from `x`,
    /// token rows split over `pool` for prefill-sized inputs; with `halves`,
    /// the sums per 16 values too (`h`).
    pub(crate) fn quantize(&mut self, pool: &ThreadPool, path: CpuIsa, x: &[f32], n: usize, cols: usize, halves: bool) {
        self.cols = cols;
        self.halves = halves;
        let nb = cols / QK;
        resize(&mut self.q, n * cols);
        resize(&mut self.d, n * nb);
        resize(&mut self.s, n * nb);
        resize(&mut self.d8, n * nb * 8);
        resize(&mut self.s8, n * nb * 8);
        resize(&mut self.h, if halves { n * nb * 2 } else { 0 });
        let q = RowsMut::new(&mut self.q[..n * cols], cols);
        let d = RowsMut::new(&mut self.d[..n * nb], nb);
        let s = RowsMut::new(&mut self.s[..n * nb], nb);
        let d8 = RowsMut::new(&mut self.d8[..n * nb * 8], nb * 8);
        let s8 = RowsMut::new(&mut self.s8[..n * nb * 8], nb * 8);
        let hs = RowsMut::new(&mut self.h[..if halves { n * nb * 2 } else { 0 }], if halves { nb * 2 } else { 0 });
        for_rows(pool, n, &|r| {
            // SAFETY: `for_rows` ranges are disjoint.
            let (q, d, s, d8, s8) = unsafe {
                (q.rows(r.clone()), d.rows(r.clone()), s.rows(r.clone()), d8.rows(r.clone()), s8.rows(r.clone()))
            };
            let xr = &x[r.start * cols..r.end * cols];
            for (i, xb) in xr.chunks_exact(QK).enumerate() {
                let qb: &mut [i8; QK] = (&mut q[i * QK..i * QK + QK]).try_into().unwrap_or_else(|_| unreachable!());
                let (di, sum) = quantize_block(path, xb, qb);
                d[i] = di;
                s[i] = di * sum as f32;
                d8[8 * i..8 * i + 8].fill(di);
                s8[8 * i..8 * i + 8].fill(di * sum as f32 / 8.0);
            }
            if halves {
                // SAFETY: as above.
                let hs = unsafe { hs.rows(r.clone()) };
                let q = &q[..];
                for (i, h) in hs.chunks_exact_mut(2).enumerate() {
                    h[0] = q[i * QK..i * QK + 16].iter().map(|&v| i32::from(v)).sum();
                    h[1] = q[i * QK + 16..(i + 1) * QK].iter().map(|&v| i32::from(v)).sum();
                }
            }
        });
    }
}

fn resize<T: Copy + Default>(v: &mut Vec<T>, n: usize) {
    if v.len() < n {
        v.resize(n, T::default());
    }
}

/// 32 values in 8 bits (`q`) with their scale `d` (the largest magnitude
/// over 127; `q = round(x · 127 / max)`, ties to even) and the sum of `q`,
/// on the SIMD level `path` (which the CPU must have).
pub(crate) fn quantize_block(path: CpuIsa, x: &[f32], q: &mut [i8; QK]) -> (f32, i32) {
    // SAFETY: a level is only selected when the CPU supports it.
    #[cfg(target_arch = "x86_64")]
    match path {
        CpuIsa::Avx512 => return unsafe { super::avx512::quantize_block(x, q) },
        CpuIsa::Avx2 | CpuIsa::Avx2Vnni => return unsafe { super::avx2::quantize_block(x, q) },
        CpuIsa::Scalar => {}
    }
    let _ = path;
    quantize_block_scalar(x, q)
}

/// `d = amax / 127`, `q = x · (1/d)` rounded half to even (as SIMD
/// conversions do), returns `(d, Σq)`.
pub(crate) fn quantize_block_scalar(x: &[f32], q: &mut [i8; QK]) -> (f32, i32) {
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
    let mut sum = 0;
    for (q, &v) in q.iter_mut().zip(x) {
        *q = (v * id).round_ties_even() as i8;
        sum += i32::from(*q);
    }
    (d, sum)
}
