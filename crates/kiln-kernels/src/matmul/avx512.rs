//! AVX-512 kernels (F, BW, VL, VNNI, with F16C/FMA).
//!
//! Integer path: a pair of 32-weight blocks is unpacked into one 64-byte
//! vector of unsigned values in element order (4/5-bit types) or kept signed
//! (`Q8_0`, and `MXFP4` after a `vpshufb` lookup of its codes' values;
//! using `|w|` and moving the sign onto the activation), multiplied
//! with the matching 64 activation bytes by `vpdpbusd`, converted to `f32`
//! and scaled lane-wise by `dw · dx` (block 0 in lanes 0..8, block 1 in
//! 8..16). The per-block offset term `m · Σx` is one more lane-wise FMA with
//! the pre-broadcast activation sums (see `act`). Horizontal sums happen
//! once per row and token. Every weight block pair is reused for up to 4 tokens.
//!
//! Safety: every function here requires the features listed in
//! [`super::CpuIsa::Avx512`]; callers check them at run time.

use super::act::QK;
use super::{scalar, Job};
use crate::quant::fp4::{e8m0_half, FP4_VALUES};
use crate::GgmlType;
use std::arch::x86_64::*;
use std::ops::Range;

const Q4_0: u8 = 0;
const Q4_1: u8 = 1;
const Q5_0: u8 = 2;
const Q5_1: u8 = 3;
const Q8_0: u8 = 4;
const MXFP4: u8 = 5;

/// Kinds whose values are signed bytes (`|w|` and the sign moved onto `x`).
const fn signed(k: u8) -> bool {
    k == Q8_0 || k == MXFP4
}

/// Quantizes 32 activations: see `act::quantize_block_scalar` (same results).
#[target_feature(enable = "avx512f,avx512bw")]
pub(super) fn quantize_block(x: &[f32], q: &mut [i8; QK]) -> (f32, i32) {
    assert!(x.len() >= QK);
    // SAFETY: 32 floats readable (asserted), 32 bytes writable (array).
    unsafe {
        let v0 = _mm512_loadu_ps(x.as_ptr());
        let v1 = _mm512_loadu_ps(x.as_ptr().add(16));
        let amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
        let d = amax / 127.0;
        let id = _mm512_set1_ps(if amax != 0.0 { 127.0 / amax } else { 0.0 });
        let i0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, id));
        let i1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, id));
        _mm_storeu_si128(q.as_mut_ptr().cast(), _mm512_cvtsepi32_epi8(i0));
        _mm_storeu_si128(q.as_mut_ptr().add(16).cast(), _mm512_cvtsepi32_epi8(i1));
        (d, _mm512_reduce_add_epi32(_mm512_add_epi32(i0, i1)))
    }
}

/// `f16` bits to `f32` with F16C.
#[target_feature(enable = "f16c")]
#[inline]
fn h2f(bits: u16) -> f32 {
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(bits))))
}

#[inline(always)]
fn u16_at(b: &[u8], i: usize) -> u16 {
    u16::from_le_bytes([b[i], b[i + 1]])
}

/// The weight block pair `b0`, `b1` as (values, `dw` lanes, offset lanes).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c")]
#[inline]
fn unpack<const K: u8>(b0: &[u8], b1: &[u8]) -> (__m512i, __m512, __m512) {
    if K == MXFP4 {
        let z = nibbles(&b0[1..17], &b1[1..17]);
        // SAFETY: FP4_VALUES is 16 bytes.
        let table = unsafe { _mm512_broadcast_i32x4(_mm_loadu_si128(FP4_VALUES.as_ptr().cast())) };
        let dw = _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(e8m0_half(b0[0])), _mm512_set1_ps(e8m0_half(b1[0])));
        return (_mm512_shuffle_epi8(table, z), dw, _mm512_setzero_ps());
    }
    // Both blocks' leading f16 pairs (d, m; or d and two weight bytes) in
    // one conversion: lanes [d0, m0, d1, m1].
    let head = |b: &[u8]| i32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    let v = _mm512_castps128_ps512(_mm_cvtph_ps(_mm_set_epi32(0, 0, head(b1), head(b0))));
    let dw = _mm512_permutexvar_ps(_mm512_set_epi32(2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0), v);
    if K == Q8_0 {
        let (w0, w1) = (&b0[2..34], &b1[2..34]);
        // SAFETY: both slices are 32 bytes.
        let z = unsafe {
            let lo = _mm512_castsi256_si512(_mm256_loadu_si256(w0.as_ptr().cast()));
            _mm512_inserti64x4(lo, _mm256_loadu_si256(w1.as_ptr().cast()), 1)
        };
        return (z, dw, _mm512_setzero_ps());
    }
    let qs_off = match K {
        Q4_0 => 2,
        Q4_1 => 4,
        Q5_0 => 6,
        _ => 8,
    };
    let mut z = nibbles(&b0[qs_off..qs_off + 16], &b1[qs_off..qs_off + 16]);
    if K == Q5_0 || K == Q5_1 {
        let h = if K == Q5_0 { 2 } else { 4 };
        let qh0 = u32::from_le_bytes([b0[h], b0[h + 1], b0[h + 2], b0[h + 3]]);
        let qh1 = u32::from_le_bytes([b1[h], b1[h + 1], b1[h + 2], b1[h + 3]]);
        let mask = u64::from(qh0) | (u64::from(qh1) << 32);
        z = _mm512_or_si512(z, _mm512_maskz_mov_epi8(mask, _mm512_set1_epi8(0x10)));
    }
    let m = match K {
        Q4_0 => _mm512_mul_ps(dw, _mm512_set1_ps(-8.0)),
        Q5_0 => _mm512_mul_ps(dw, _mm512_set1_ps(-16.0)),
        _ => _mm512_permutexvar_ps(_mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1), v),
    };
    (z, dw, m)
}

/// Two blocks' 16 bytes of nibbles as 64 values 0..15 in element order.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
#[inline]
fn nibbles(q0: &[u8], q1: &[u8]) -> __m512i {
    assert!(q0.len() >= 16 && q1.len() >= 16);
    // SAFETY: both slices hold 16 bytes (asserted).
    let y = unsafe { _mm256_set_m128i(_mm_loadu_si128(q1.as_ptr().cast()), _mm_loadu_si128(q0.as_ptr().cast())) };
    let z = _mm512_permutexvar_epi64(_mm512_set_epi64(3, 2, 3, 2, 1, 0, 1, 0), _mm512_castsi256_si512(y));
    let z = _mm512_mask_blend_epi64(0b1100_1100, z, _mm512_srli_epi16(z, 4));
    _mm512_and_si512(z, _mm512_set1_epi8(0x0F))
}

/// Rows `rows` of an integer-activation job, every token.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")]
pub(super) fn rows_q8(job: &Job<'_>, rows: Range<usize>) {
    match job.w.ty {
        GgmlType::Q4_0 => rows_k::<Q4_0>(job, rows),
        GgmlType::Q4_1 => rows_k::<Q4_1>(job, rows),
        GgmlType::Q5_0 => rows_k::<Q5_0>(job, rows),
        GgmlType::Q5_1 => rows_k::<Q5_1>(job, rows),
        GgmlType::MXFP4 => rows_k::<MXFP4>(job, rows),
        _ => rows_k::<Q8_0>(job, rows),
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")]
fn rows_k<const K: u8>(job: &Job<'_>, rows: Range<usize>) {
    let act = job.act;
    let nb = act.nb();
    // The kernels read activation blocks through raw pointers: check once.
    assert!(act.q.len() >= job.n * nb * QK && act.d8.len() >= job.n * nb * 8 && act.s8.len() >= job.n * nb * 8);
    for r in rows {
        let row = job.row(r);
        let mut t = 0;
        while t < job.n {
            let nt = (job.n - t).min(4);
            let mut out = [0f32; 4];
            match nt {
                1 => tile::<K, 1>(job, row, t, &mut out),
                2 => tile::<K, 2>(job, row, t, &mut out),
                3 => tile::<K, 3>(job, row, t, &mut out),
                _ => tile::<K, 4>(job, row, t, &mut out),
            }
            job.store(r, t, &out[..nt]);
            t += nt;
        }
    }
}

/// One weight row against tokens `t0..t0 + NT`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")]
#[inline]
fn tile<const K: u8, const NT: usize>(job: &Job<'_>, row: &[u8], t0: usize, out: &mut [f32; 4]) {
    let act = job.act;
    let nb = act.nb();
    let ts = job.w.ty.type_size();
    let mut acc = [_mm512_setzero_ps(); NT];
    let zero = _mm512_setzero_si512();
    let mut b = 0;
    while b + 2 <= nb {
        let (z, dw, m) = unpack::<K>(&row[b * ts..(b + 1) * ts], &row[(b + 1) * ts..(b + 2) * ts]);
        let (z, neg) = if signed(K) { (_mm512_abs_epi8(z), _mm512_movepi8_mask(z)) } else { (z, 0) };
        for (k, acc) in acc.iter_mut().enumerate() {
            let i = (t0 + k) * nb + b;
            // SAFETY: block pair `i, i + 1` of token `t0 + k` lies within the
            // activation buffers (asserted in `rows_k`).
            let (xq, dx, sx) = unsafe {
                (
                    _mm512_loadu_si512(act.q.as_ptr().add(i * QK).cast()),
                    _mm512_loadu_ps(act.d8.as_ptr().add(i * 8)),
                    _mm512_loadu_ps(act.s8.as_ptr().add(i * 8)),
                )
            };
            let xq = if signed(K) { _mm512_mask_sub_epi8(xq, neg, zero, xq) } else { xq };
            let isum = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(zero, z, xq));
            *acc = _mm512_fmadd_ps(isum, _mm512_mul_ps(dw, dx), *acc);
            if !signed(K) {
                *acc = _mm512_fmadd_ps(m, sx, *acc);
            }
        }
        b += 2;
    }
    for (k, acc) in acc.iter().enumerate() {
        out[k] = _mm512_reduce_add_ps(*acc);
    }
    if b < nb {
        // Odd block count: the last block in scalar code.
        let (v, dw, m) = scalar::decode_block(job.w.ty, &row[b * ts..(b + 1) * ts]);
        for (k, o) in out.iter_mut().enumerate().take(NT) {
            let i = (t0 + k) * nb + b;
            let q = &act.q[i * QK..(i + 1) * QK];
            let isum: i32 = v.iter().zip(q).map(|(&a, &b)| i32::from(a) * i32::from(b)).sum();
            *o += dw * act.d[i] * isum as f32 + m * act.s[i];
        }
    }
}

/// Converts a row of `f16` (or `bf16`) values to `f32`.
#[target_feature(enable = "avx512f,avx512bw,f16c")]
pub(super) fn half_to_f32(bf16: bool, row: &[u8], out: &mut [f32]) {
    let n = out.len().min(row.len() / 2);
    let mut i = 0;
    while i + 16 <= n {
        // SAFETY: 32 bytes readable at 2i, 16 floats writable at i.
        unsafe {
            let h = _mm256_loadu_si256(row.as_ptr().add(2 * i).cast());
            let v = if bf16 {
                _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))
            } else {
                _mm512_cvtph_ps(h)
            };
            _mm512_storeu_ps(out.as_mut_ptr().add(i), v);
        }
        i += 16;
    }
    for (j, o) in out.iter_mut().enumerate().take(n).skip(i) {
        let bits = u16_at(row, 2 * j);
        *o = if bf16 { f32::from_bits(u32::from(bits) << 16) } else { h2f(bits) };
    }
}

/// `out[k] = w · x[k·len..]` for `nt ≤ 4` tokens.
#[target_feature(enable = "avx512f,fma")]
pub(super) fn dot_tokens(w: &[f32], x: &[f32], nt: usize, out: &mut [f32; 4]) {
    match nt {
        1 => dot_nt::<1>(w, x, out),
        2 => dot_nt::<2>(w, x, out),
        3 => dot_nt::<3>(w, x, out),
        _ => dot_nt::<4>(w, x, out),
    }
}

#[target_feature(enable = "avx512f,fma")]
#[inline]
fn dot_nt<const NT: usize>(w: &[f32], x: &[f32], out: &mut [f32; 4]) {
    let len = w.len();
    assert!(x.len() >= NT * len);
    let mut acc = [_mm512_setzero_ps(); NT];
    let mut i = 0;
    while i + 16 <= len {
        // SAFETY: i + 16 <= len, and every token row is `len` long (asserted).
        unsafe {
            let wv = _mm512_loadu_ps(w.as_ptr().add(i));
            for (k, acc) in acc.iter_mut().enumerate() {
                *acc = _mm512_fmadd_ps(wv, _mm512_loadu_ps(x.as_ptr().add(k * len + i)), *acc);
            }
        }
        i += 16;
    }
    for (k, acc) in acc.iter().enumerate() {
        let tail: f32 = w[i..].iter().zip(&x[k * len + i..(k + 1) * len]).map(|(a, b)| a * b).sum();
        out[k] = _mm512_reduce_add_ps(*acc) + tail;
    }
}
