//! Vector math for the AVX-512 kernels.

use crate::isa::CpuIsa;
#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// Whether the AVX-512 elementwise and attention kernels run: the current
/// level ([`CpuIsa::current`]) is AVX-512.
pub(crate) fn has_avx512() -> bool {
    CpuIsa::current() == CpuIsa::Avx512
}

/// Whether the AVX2 (+ FMA, F16C) elementwise kernels run.
#[allow(dead_code)]
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
}
