//! AVX2 kernels (with FMA and F16C) of the row-major paths: activation
//! quantizing, half-to-float rows and float dot products. The packed
//! integer and float kernels are in `avx2_packed`.
//!
//! Safety: every function here requires the features of
//! [`super::CpuIsa::Avx2`]; callers check them at run time.

use super::act::QK;
use std::arch::x86_64::*;

/// Sum of the 8 lanes.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn hsum_ps(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
}

/// Quantizes 32 activations: see `act::quantize_block_scalar` (same results).
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn quantize_block(x: &[f32], q: &mut [i8; QK]) -> (f32, i32) {
    assert!(x.len() >= QK);
    // SAFETY: 32 floats readable (asserted), 32 bytes writable (array).
    unsafe {
        let v = [0, 8, 16, 24].map(|i| _mm256_loadu_ps(x.as_ptr().add(i)));
        let abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFF_FFFF));
        let m = v.iter().fold(_mm256_setzero_ps(), |m, &v| _mm256_max_ps(m, _mm256_and_ps(v, abs)));
        let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
        let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        let amax = _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
        let d = amax / 127.0;
        let id = _mm256_set1_ps(if amax != 0.0 { 127.0 / amax } else { 0.0 });
        // Round half to even (the default rounding mode), as the scalar code.
        let i = v.map(|v| _mm256_cvtps_epi32(_mm256_mul_ps(v, id)));
        // Packing interleaves the 128-bit lanes: put the dwords back in order.
        let w = _mm256_packs_epi16(_mm256_packs_epi32(i[0], i[1]), _mm256_packs_epi32(i[2], i[3]));
        let w = _mm256_permutevar8x32_epi32(w, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256(q.as_mut_ptr().cast(), w);
        let s = _mm256_add_epi32(_mm256_add_epi32(i[0], i[1]), _mm256_add_epi32(i[2], i[3]));
        let s = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256::<1>(s));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s));
        (d, _mm_cvtsi128_si32(s))
    }
}

/// Converts a row of `f16` (or `bf16`) values to `f32`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn half_to_f32(bf16: bool, row: &[u8], out: &mut [f32]) {
    let n = out.len().min(row.len() / 2);
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: 16 bytes readable at 2i, 8 floats writable at i.
        unsafe {
            let h = _mm_loadu_si128(row.as_ptr().add(2 * i).cast());
            let v = if bf16 {
                _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(h)))
            } else {
                _mm256_cvtph_ps(h)
            };
            _mm256_storeu_ps(out.as_mut_ptr().add(i), v);
        }
        i += 8;
    }
    for (j, o) in out.iter_mut().enumerate().take(n).skip(i) {
        let bits = u16::from_le_bytes([row[2 * j], row[2 * j + 1]]);
        *o = if bf16 { f32::from_bits(u32::from(bits) << 16) } else { half::f16::from_bits(bits).to_f32() };
    }
}

/// `out[k] = w · x[k·len..]` for `nt ≤ 4` tokens.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn dot_tokens(w: &[f32], x: &[f32], nt: usize, out: &mut [f32; 4]) {
    match nt {
        1 => dot_nt::<1>(w, x, out),
        2 => dot_nt::<2>(w, x, out),
        3 => dot_nt::<3>(w, x, out),
        _ => dot_nt::<4>(w, x, out),
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn dot_nt<const NT: usize>(w: &[f32], x: &[f32], out: &mut [f32; 4]) {
    let len = w.len();
    assert!(x.len() >= NT * len);
    let mut acc = [[_mm256_setzero_ps(); 2]; NT];
    let mut i = 0;
    while i + 16 <= len {
        // SAFETY: i + 16 <= len, and every token row is `len` long (asserted).
        unsafe {
            let w0 = _mm256_loadu_ps(w.as_ptr().add(i));
            let w1 = _mm256_loadu_ps(w.as_ptr().add(i + 8));
            for (k, acc) in acc.iter_mut().enumerate() {
                let xp = x.as_ptr().add(k * len + i);
                acc[0] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xp), acc[0]);
                acc[1] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xp.add(8)), acc[1]);
            }
        }
        i += 16;
    }
    for (k, acc) in acc.iter().enumerate() {
        let tail: f32 = w[i..].iter().zip(&x[k * len + i..(k + 1) * len]).map(|(a, b)| a * b).sum();
        out[k] = hsum_ps(_mm256_add_ps(acc[0], acc[1])) + tail;
    }
}
