//! Portable kernels: the reference the SIMD paths are tested against, and
//! the path on CPUs without them.

use super::act::QK;
use super::Job;
use crate::quant::f16_at;
use crate::quant::fp4::{e8m0_half, FP4_VALUES};
use crate::GgmlType;
use std::ops::Range;

/// A weight block as integers: `value = dw · v + m` per element
/// (`v` unsigned 0..31 for 4/5-bit types, signed for `Q8_0` and `MXFP4`).
#[inline(always)]
pub(crate) fn decode_block(ty: GgmlType, b: &[u8]) -> ([i8; QK], f32, f32) {
    let mut v = [0i8; QK];
    let nibbles = |v: &mut [i8; QK], qs: &[u8]| {
        for j in 0..16 {
            v[j] = (qs[j] & 0x0F) as i8;
            v[j + 16] = (qs[j] >> 4) as i8;
        }
    };
    let high = |v: &mut [i8; QK], qh: &[u8]| {
        let qh = u32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]]);
        for (j, v) in v.iter_mut().enumerate() {
            *v |= (((qh >> j) & 1) << 4) as i8;
        }
    };
    if ty == GgmlType::MXFP4 {
        for (j, &q) in b[1..17].iter().enumerate() {
            v[j] = FP4_VALUES[usize::from(q & 0x0F)];
            v[j + 16] = FP4_VALUES[usize::from(q >> 4)];
        }
        return (v, e8m0_half(b[0]), 0.0);
    }
    let d = f16_at(b, 0);
    match ty {
        GgmlType::Q4_0 => {
            nibbles(&mut v, &b[2..18]);
            (v, d, -8.0 * d)
        }
        GgmlType::Q4_1 => {
            nibbles(&mut v, &b[4..20]);
            (v, d, f16_at(b, 2))
        }
        GgmlType::Q5_0 => {
            nibbles(&mut v, &b[6..22]);
            high(&mut v, &b[2..6]);
            (v, d, -16.0 * d)
        }
        GgmlType::Q5_1 => {
            nibbles(&mut v, &b[8..24]);
            high(&mut v, &b[4..8]);
            (v, d, f16_at(b, 2))
        }
        _ => {
            for (v, &q) in v.iter_mut().zip(&b[2..34]) {
                *v = q as i8;
            }
            (v, d, 0.0)
        }
    }
}

/// Integer-activation kernel for rows `rows` of `job`, every token.
pub(super) fn rows_q8(job: &Job<'_>, rows: Range<usize>) {
    let act = job.act;
    let nb = act.nb();
    let ts = job.w.ty.type_size();
    if matches!(job.w.ty, GgmlType::Q4_0 | GgmlType::Q4_1) {
        return rows_q4(job, rows);
    }
    for r in rows {
        let row = job.row(r);
        let mut t = 0;
        while t < job.n {
            let nt = (job.n - t).min(4);
            let mut acc = [0f32; 4];
            for (b, blk) in row.chunks_exact(ts).enumerate() {
                let (v, dw, m) = decode_block(job.w.ty, blk);
                for (k, acc) in acc.iter_mut().enumerate().take(nt) {
                    let i = (t + k) * nb + b;
                    let q = act.q[i * QK..(i + 1) * QK].try_into().unwrap_or_else(|_| unreachable!());
                    *acc += dw * act.d[i] * dot_i8(&v, q) as f32 + m * act.s[i];
                }
            }
            job.store(r, t, &acc[..nt]);
            t += nt;
        }
    }
}

/// [`rows_q8`] for `Q4_0` and `Q4_1`, whose nibbles are dotted in place
/// (no block decoded into bytes first: that and the per-block type match
/// were half of a decode step).
fn rows_q4(job: &Job<'_>, rows: Range<usize>) {
    let act = job.act;
    let nb = act.nb();
    let q4_1 = job.w.ty == GgmlType::Q4_1;
    let (ts, qoff) = if q4_1 { (20, 4) } else { (18, 2) };
    for r in rows {
        let row = job.row(r);
        let mut t = 0;
        while t < job.n {
            let nt = (job.n - t).min(4);
            let mut acc = [0f32; 4];
            for (b, blk) in row.chunks_exact(ts).enumerate() {
                let d = f16_at(blk, 0);
                let m = if q4_1 { f16_at(blk, 2) } else { -8.0 * d };
                let qs: &[u8; 16] = blk[qoff..qoff + 16].try_into().unwrap_or_else(|_| unreachable!());
                for (k, acc) in acc.iter_mut().enumerate().take(nt) {
                    let i = (t + k) * nb + b;
                    let q = act.q[i * QK..(i + 1) * QK].try_into().unwrap_or_else(|_| unreachable!());
                    *acc += d * act.d[i] * dot_nibbles(qs, q) as f32 + m * act.s[i];
                }
            }
            job.store(r, t, &acc[..nt]);
            t += nt;
        }
    }
}

/// Exact dot product of a block's 32 nibbles (low nibbles the first 16
/// values, high the last 16, as `Q4_0`/`Q4_1` store them) with a block of
/// signed bytes. Out of line for the same reason as [`dot_i8`].
#[inline(never)]
fn dot_nibbles(qs: &[u8; 16], q: &[i8; QK]) -> i32 {
    let (lo, hi) = q.split_at(16);
    let mut s = 0i32;
    for j in 0..16 {
        s += i32::from(qs[j] & 0x0F) * i32::from(lo[j]) + i32::from(qs[j] >> 4) * i32::from(hi[j]);
    }
    s
}

/// Exact dot product of two blocks of signed bytes. Kept out of line: on
/// its own the compiler vectorizes it (`pmaddwd` on baseline x86-64),
/// inlined into the row loop it did not (measured: scalar decode 27 tok/s
/// before, see BENCHMARKS.md "AVX2 path").
#[inline(never)]
pub(crate) fn dot_i8(a: &[i8; QK], b: &[i8; QK]) -> i32 {
    a.iter().zip(b).map(|(&a, &b)| i32::from(a) * i32::from(b)).sum()
}

/// Dot product with 16 independent accumulators (auto-vectorizes).
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    const L: usize = 16;
    let mut acc = [0f32; L];
    let (ca, cb) = (a.chunks_exact(L), b.chunks_exact(L));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..L {
            acc[i] += x[i] * y[i];
        }
    }
    let tail: f32 = ra.iter().zip(rb).map(|(x, y)| x * y).sum();
    acc.iter().sum::<f32>() + tail
}
