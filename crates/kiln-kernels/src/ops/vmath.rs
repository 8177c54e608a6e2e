//! Vector math for the AVX-512 and AVX2 kernels.

use crate::isa::CpuIsa;
#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// Whether the AVX-512 elementwise and attention kernels run: the current
/// level ([`CpuIsa::current`]) is AVX-512.
pub(crate) fn has_avx512() -> bool {
    CpuIsa::current() == CpuIsa::Avx512
}

/// Whether the AVX2 (+ FMA, F16C) elementwise kernels run.
pub(crate) fn has_avx2() -> bool {
    CpuIsa::current() >= CpuIsa::Avx2
}

/// `exp(x)` on 16 lanes, relative error below 4e-7 for results in the
/// normal range; `-inf` and anything below -150 give 0, above 88.7 `+inf`.
///
/// `e^x = 2^n · e^r` with `n = round(x · log2 e)` and `r = x - n·ln 2`
/// (ln 2 split in two parts, so `r` is exact enough), `e^r` by its degree-7
/// Taylor polynomial on `|r| ≤ ln 2 / 2`, and `2^n` applied with `vscalefps`
/// (which also handles the overflow and underflow ends).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
pub(crate) fn exp512(x: __m512) -> __m512 {
    const C: [f32; 8] = [1.0, 1.0, 0.5, 1.0 / 6.0, 1.0 / 24.0, 1.0 / 120.0, 1.0 / 720.0, 1.0 / 5040.0];
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    let x = _mm512_max_ps(x, _mm512_set1_ps(-150.0));
    let t = _mm512_mul_ps(x, _mm512_set1_ps(std::f32::consts::LOG2_E));
    let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(t);
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_HI), x);
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_LO), r);
    let mut p = _mm512_set1_ps(C[7]);
    for &c in C[..7].iter().rev() {
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
    }
    _mm512_scalef_ps(p, n)
}

/// `exp(x)` on 8 lanes with AVX2 + FMA: as [`exp512`] (same polynomial,
/// same error), `2^n` applied by adding `n` to the exponent bits in two
/// steps, so results down to the subnormal range and up to `+inf` come out
/// as `vscalefps` gives them.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(crate) fn exp256(x: __m256) -> __m256 {
    const C: [f32; 8] = [1.0, 1.0, 0.5, 1.0 / 6.0, 1.0 / 24.0, 1.0 / 120.0, 1.0 / 720.0, 1.0 / 5040.0];
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    let x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-150.0)), _mm256_set1_ps(128.0));
    let t = _mm256_mul_ps(x, _mm256_set1_ps(std::f32::consts::LOG2_E));
    let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(t);
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_HI), x);
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_LO), r);
    let mut p = _mm256_set1_ps(C[7]);
    for &c in C[..7].iter().rev() {
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
    }
    // 2^n = 2^a · 2^b with a = ⌊n / 2⌋ and b = n - a: for n in -217..=185
    // (x clamped to -150..=128) both lie in -109..=93, normal floats.
    let ni = _mm256_cvtps_epi32(n);
    let a = _mm256_srai_epi32::<1>(ni);
    let b = _mm256_sub_epi32(ni, a);
    let pow2 = |k: __m256i| _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(k, _mm256_set1_epi32(127))));
    _mm256_mul_ps(_mm256_mul_ps(p, pow2(a)), pow2(b))
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    #[test]
    fn exp512_matches_libm() {
        if !CpuIsa::Avx512.is_supported() {
            return;
        }
        let xs: Vec<f32> = (-2000..=900).map(|i| i as f32 * 0.1).chain([f32::NEG_INFINITY, -1e30, 0.0]).collect();
        for chunk in xs.chunks(16) {
            let mut buf = [0f32; 16];
            buf[..chunk.len()].copy_from_slice(chunk);
            let mut out = [0f32; 16];
            // SAFETY: AVX-512 F checked above; 16-float buffers.
            unsafe { _mm512_storeu_ps(out.as_mut_ptr(), exp512(_mm512_loadu_ps(buf.as_ptr()))) };
            for (&x, &y) in buf.iter().zip(&out).take(chunk.len()) {
                let want = (x as f64).exp();
                if want < f32::MIN_POSITIVE as f64 {
                    assert!(y < 1e-37, "exp({x}) = {y}, want ~0");
                } else if want > f32::MAX as f64 {
                    assert!(y.is_infinite(), "exp({x}) = {y}");
                } else {
                    let rel = ((y as f64 - want) / want).abs();
                    assert!(rel < 4e-7, "exp({x}) = {y}, want {want} (rel {rel:e})");
                }
            }
        }
    }

    #[test]
    fn exp256_matches_exp512_and_libm() {
        if !CpuIsa::Avx2.is_supported() {
            return;
        }
        let xs: Vec<f32> = (-2000..=900).map(|i| i as f32 * 0.1).chain([f32::NEG_INFINITY, -1e30, 0.0]).collect();
        for chunk in xs.chunks(8) {
            let mut buf = [0f32; 8];
            buf[..chunk.len()].copy_from_slice(chunk);
            let mut out = [0f32; 8];
            // SAFETY: AVX2 + FMA checked above; 8-float buffers.
            unsafe { _mm256_storeu_ps(out.as_mut_ptr(), exp256(_mm256_loadu_ps(buf.as_ptr()))) };
            for (&x, &y) in buf.iter().zip(&out).take(chunk.len()) {
                let want = (x as f64).exp();
                if want < f32::MIN_POSITIVE as f64 {
                    assert!(y < 1e-37, "exp({x}) = {y}, want ~0");
                } else if want > f32::MAX as f64 {
                    assert!(y.is_infinite(), "exp({x}) = {y}");
                } else {
                    let rel = ((y as f64 - want) / want).abs();
                    assert!(rel < 4e-7, "exp({x}) = {y}, want {want} (rel {rel:e})");
                }
            }
        }
    }
}
