//! AVX2 kernel for `MXFP4` weights read as the file stores them (no
//! repacking): each block's 32 nibbles become signed bytes through a
//! 16-entry `vpshufb` table (twice the E2M1 values, −12..12), are
//! multiplied with the 8-bit activations by `vpmaddubsw` (`|w|` against
//! `x` carrying `w`'s sign; pairs stay far below `i16` saturation:
//! 2 · 12 · 127), summed to `i32` by `vpmaddwd`, converted and scaled by
//! `2^(e−128) · dx`. Every weight block is reused for up to 4 tokens;
//! horizontal sums happen once per row and token.
//!
//! Safety: every function here requires the features of
//! [`super::CpuIsa::Avx2`]; callers check them at run time.

use super::act::QK;
use super::avx2::hsum_ps;
use super::Job;
use crate::quant::fp4::{e8m0_half, FP4_VALUES};
use std::arch::x86_64::*;
use std::ops::Range;

/// Block bytes: the scale byte, then 16 bytes of codes.
const BLOCK: usize = 17;

/// Rows `rows` of an `MXFP4` job, every token.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn rows_mxfp4(job: &Job<'_>, rows: Range<usize>) {
    let act = job.act;
    let nb = act.nb();
    // The kernel reads activation blocks through raw pointers: check once.
    assert!(act.q.len() >= job.n * nb * QK && act.d.len() >= job.n * nb);
    for r in rows {
        let row = job.row(r);
        assert!(row.len() >= nb * BLOCK);
        let mut t = 0;
        while t < job.n {
            let nt = (job.n - t).min(4);
            let mut out = [0f32; 4];
            match nt {
                1 => tile::<1>(job, row, t, &mut out),
                2 => tile::<2>(job, row, t, &mut out),
                3 => tile::<3>(job, row, t, &mut out),
                _ => tile::<4>(job, row, t, &mut out),
            }
            job.store(r, t, &out[..nt]);
            t += nt;
        }
    }
}

/// One weight row against tokens `t0..t0 + NT`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn tile<const NT: usize>(job: &Job<'_>, row: &[u8], t0: usize, out: &mut [f32; 4]) {
    let act = job.act;
    let nb = act.nb();
    // SAFETY: FP4_VALUES is 16 bytes.
    let table = unsafe { _mm256_broadcastsi128_si256(_mm_loadu_si128(FP4_VALUES.as_ptr().cast())) };
    let low = _mm_set1_epi8(0x0F);
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm256_setzero_ps(); NT];
    for b in 0..nb {
        let blk = &row[b * BLOCK..(b + 1) * BLOCK];
        // SAFETY: `blk` is 17 bytes, codes at 1..17.
        let qs = unsafe { _mm_loadu_si128(blk.as_ptr().add(1).cast()) };
        let codes = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16::<4>(qs), low), _mm_and_si128(qs, low));
        let w = _mm256_shuffle_epi8(table, codes);
        let aw = _mm256_sign_epi8(w, w);
        let dw = e8m0_half(blk[0]);
        for (k, acc) in acc.iter_mut().enumerate() {
            let i = (t0 + k) * nb + b;
            // SAFETY: block `i` of the activations lies within `act.q` (asserted in `rows_mxfp4`).
            let xq = unsafe { _mm256_loadu_si256(act.q.as_ptr().add(i * QK).cast()) };
            let pairs = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(xq, w));
            let isum = _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, ones));
            *acc = _mm256_fmadd_ps(isum, _mm256_set1_ps(dw * act.d[i]), *acc);
        }
    }
    for (k, acc) in acc.iter().enumerate() {
        out[k] = hsum_ps(*acc);
    }
}
