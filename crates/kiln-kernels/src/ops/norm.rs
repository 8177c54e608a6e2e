//! RMSNorm, SwiGLU, residual add, softmax.
//!
//! The row-wise ops take the thread pool and split their rows over it for
//! prefill-sized inputs (see `par`); one token's rows run inline.

use super::par::{for_rows, RowsMut};
use crate::pool::ThreadPool;

/// RMSNorm of each row of `x` (row length `w.len()`) into `out`:
/// `out = x / sqrt(mean(x²) + eps) * w`.
pub fn rms_norm(pool: &ThreadPool, x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let d = w.len();
    if d == 0 {
        return;
    }
    let n = (x.len() / d).min(out.len() / d);
    let out = RowsMut::new(out, d);
    for_rows(pool, n, &|r| {
        // SAFETY: `for_rows` ranges are disjoint.
        let o = unsafe { out.rows(r.clone()) };
        norm_rows(&x[r.start * d..r.end * d], w, eps, o);
    });
}

/// `x += y`, then `out = RMSNorm(x)`, row by row (the residual add that
/// ends one block fused with the norm that starts the next).
pub fn add_rms_norm(pool: &ThreadPool, x: &mut [f32], y: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let d = w.len();
    if d == 0 {
        return;
    }
    let n = (x.len() / d).min(y.len() / d).min(out.len() / d);
    let (xs, outs) = (RowsMut::new(x, d), RowsMut::new(out, d));
    for_rows(pool, n, &|r| {
        // SAFETY: `for_rows` ranges are disjoint.
        let (x, o) = unsafe { (xs.rows(r.clone()), outs.rows(r.clone())) };
        add_inplace(x, &y[r.start * d..r.end * d]);
        norm_rows(x, w, eps, o);
    });
}

/// RMSNorm in place, rows of length `w.len()` (per-head Q/K norms).
pub fn rms_norm_inplace(pool: &ThreadPool, x: &mut [f32], w: &[f32], eps: f32) {
    let d = w.len();
    if d == 0 {
        return;
    }
    let n = x.len() / d;
    let xs = RowsMut::new(x, d);
    for_rows(pool, n, &|r| {
        // SAFETY: `for_rows` ranges are disjoint.
        let x = unsafe { xs.rows(r) };
        for xr in x.chunks_exact_mut(d) {
            let scale = inv_rms(xr, eps);
            for (xi, wi) in xr.iter_mut().zip(w) {
                *xi *= scale * wi;
            }
        }
    });
}

fn norm_rows(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let d = w.len();
    for (xr, or) in x.chunks_exact(d).zip(out.chunks_exact_mut(d)) {
        let scale = inv_rms(xr, eps);
        for ((o, xi), wi) in or.iter_mut().zip(xr).zip(w) {
            *o = xi * scale * wi;
        }
    }
}

fn inv_rms(x: &[f32], eps: f32) -> f32 {
    let ss = super::dot(x, x);
    1.0 / (ss / x.len() as f32 + eps).sqrt()
}

/// SwiGLU over `n` rows: `gate = silu(gate) * up`, in place over `gate`.
pub fn silu_mul(pool: &ThreadPool, gate: &mut [f32], up: &[f32], n: usize) {
    let len = gate.len().min(up.len());
    if n == 0 || len == 0 {
        return;
    }
    let d = len / n;
    let gs = RowsMut::new(gate, d);
    for_rows(pool, n, &|r| {
        // SAFETY: `for_rows` ranges are disjoint.
        let g = unsafe { gs.rows(r.clone()) };
        silu_mul_rows(g, &up[r.start * d..r.end * d]);
    });
}

/// `rows(gate, up)` over the `n` rows of a gated unit, split over `pool`
/// (the GELU unit's driver; SwiGLU, on every llama model's hot path, keeps
/// its own direct one).
fn glu_rows(pool: &ThreadPool, gate: &mut [f32], up: &[f32], n: usize, rows: fn(&mut [f32], &[f32])) {
    let len = gate.len().min(up.len());
    if n == 0 || len == 0 {
        return;
    }
    let d = len / n;
    let gs = RowsMut::new(gate, d);
    for_rows(pool, n, &|r| {
        // SAFETY: `for_rows` ranges are disjoint.
        let g = unsafe { gs.rows(r.clone()) };
        rows(g, &up[r.start * d..r.end * d]);
    });
}

fn silu_mul_rows(gate: &mut [f32], up: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    if super::vmath::has_avx512() {
        // SAFETY: AVX-512 F (+ F16C, FMA) detected.
        return unsafe { silu_mul_avx512(gate, up) };
    }
    #[cfg(target_arch = "x86_64")]
    if super::vmath::has_avx2() {
        // SAFETY: AVX2 + FMA detected.
        return unsafe { glu_avx2::<false>(gate, up) };
    }
    for (g, u) in gate.iter_mut().zip(up) {
        let x = *g;
        *g = x / (1.0 + (-x).exp()) * u;
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn silu_mul_avx512(gate: &mut [f32], up: &[f32]) {
    use std::arch::x86_64::*;
    let n = gate.len().min(up.len());
    let mut i = 0;
    while i + 16 <= n {
        // SAFETY: `i + 16 <= n` for both slices.
        unsafe {
            let x = _mm512_loadu_ps(gate.as_ptr().add(i));
            let e = super::vmath::exp512(_mm512_sub_ps(_mm512_setzero_ps(), x));
            let s = _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0), e));
            _mm512_storeu_ps(gate.as_mut_ptr().add(i), _mm512_mul_ps(s, _mm512_loadu_ps(up.as_ptr().add(i))));
        }
        i += 16;
    }
    for (g, u) in gate[i..n].iter_mut().zip(&up[i..n]) {
        let x = *g;
        *g = x / (1.0 + (-x).exp()) * u;
    }
}

/// `gate = gelu(gate) · up` row by row, GELU by its tanh approximation
/// `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`, computed as
/// `x / (1 + e^(−2u))` (the same function).
pub fn gelu_tanh_mul(pool: &ThreadPool, gate: &mut [f32], up: &[f32], n: usize) {
    glu_rows(pool, gate, up, n, gelu_mul_rows);
}

/// gpt-oss's clamped SwiGLU over `n` rows, in place in `gate`: with
/// `g = min(gate, limit)` and `u = clamp(up, -limit, limit)`,
/// `gate = g·σ(alpha·g)·(u + 1)` (alpha 1.702, limit 7 in gpt-oss). Plain
/// Rust the compiler vectorizes: it runs once per expert row, next to the
/// products that dominate.
pub fn swiglu_oai_mul(pool: &ThreadPool, gate: &mut [f32], up: &[f32], n: usize, alpha: f32, limit: f32) {
    let len = gate.len().min(up.len());
    if n == 0 || len == 0 {
        return;
    }
    let d = len / n;
    let gs = RowsMut::new(gate, d);
    for_rows(pool, n, &|r| {
        // SAFETY: `for_rows` ranges are disjoint.
        let g = unsafe { gs.rows(r.clone()) };
        for (a, &b) in g.iter_mut().zip(&up[r.start * d..r.end * d]) {
            let x = a.min(limit);
            let y = b.clamp(-limit, limit);
            *a = x / (1.0 + (-alpha * x).exp()) * (y + 1.0);
        }
    });
}

/// √(2/π).
const GELU_C: f32 = 0.797_884_6;

fn gelu_tanh(x: f32) -> f32 {
    gelu_tanh_scalar(x)
}

/// GELU by its tanh approximation, one value.
pub(crate) fn gelu_tanh_scalar(x: f32) -> f32 {
    let u = GELU_C * (x + 0.044715 * x * x * x);
    x / (1.0 + (-2.0 * u).exp())
}

fn gelu_mul_rows(gate: &mut [f32], up: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    if super::vmath::has_avx512() {
        // SAFETY: AVX-512 F (+ F16C, FMA) detected.
        return unsafe { gelu_mul_avx512(gate, up) };
    }
    #[cfg(target_arch = "x86_64")]
    if super::vmath::has_avx2() {
        // SAFETY: AVX2 + FMA detected.
        return unsafe { glu_avx2::<true>(gate, up) };
    }
    for (g, u) in gate.iter_mut().zip(up) {
        *g = gelu_tanh(*g) * u;
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn gelu_mul_avx512(gate: &mut [f32], up: &[f32]) {
    use std::arch::x86_64::*;
    let n = gate.len().min(up.len());
    let mut i = 0;
    while i + 16 <= n {
        // SAFETY: `i + 16 <= n` for both slices.
        unsafe {
            let x = _mm512_loadu_ps(gate.as_ptr().add(i));
            let x3 = _mm512_mul_ps(_mm512_mul_ps(x, x), x);
            let u = _mm512_mul_ps(_mm512_set1_ps(GELU_C), _mm512_fmadd_ps(_mm512_set1_ps(0.044715), x3, x));
            let e = super::vmath::exp512(_mm512_mul_ps(_mm512_set1_ps(-2.0), u));
            let s = _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0), e));
            _mm512_storeu_ps(gate.as_mut_ptr().add(i), _mm512_mul_ps(s, _mm512_loadu_ps(up.as_ptr().add(i))));
        }
        i += 16;
    }
    for (g, u) in gate[i..n].iter_mut().zip(&up[i..n]) {
        *g = gelu_tanh(*g) * u;
    }
}

/// `gate = silu(gate) · up` (`GELU`: `gelu_tanh(gate) · up`) with AVX2 + FMA,
/// both as `x / (1 + e^(−v))` with `v = x` or `v = 2u` (see [`gelu_tanh`]).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn glu_avx2<const GELU: bool>(gate: &mut [f32], up: &[f32]) {
    use std::arch::x86_64::*;
    let n = gate.len().min(up.len());
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: `i + 8 <= n` for both slices.
        unsafe {
            let x = _mm256_loadu_ps(gate.as_ptr().add(i));
            let minus_v = if GELU {
                let x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
                let u = _mm256_mul_ps(_mm256_set1_ps(GELU_C), _mm256_fmadd_ps(_mm256_set1_ps(0.044715), x3, x));
                _mm256_mul_ps(_mm256_set1_ps(-2.0), u)
            } else {
                _mm256_sub_ps(_mm256_setzero_ps(), x)
            };
            let e = super::vmath::exp256(minus_v);
            let s = _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0), e));
            _mm256_storeu_ps(gate.as_mut_ptr().add(i), _mm256_mul_ps(s, _mm256_loadu_ps(up.as_ptr().add(i))));
        }
        i += 8;
    }
    for (g, u) in gate[i..n].iter_mut().zip(&up[i..n]) {
        *g = if GELU { gelu_tanh(*g) } else { *g / (1.0 + (-*g).exp()) } * u;
    }
}

/// `x += y`.
pub fn add_inplace(x: &mut [f32], y: &[f32]) {
    for (a, b) in x.iter_mut().zip(y) {
        *a += b;
    }
}

/// Numerically stable softmax in place.
pub fn softmax_inplace(x: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if !max.is_finite() {
        return;
    }
    let mut sum = 0.0;
    for v in x.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    let inv = 1.0 / sum;
    for v in x.iter_mut() {
        *v *= inv;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gelu_tanh_mul_matches_the_tanh_formula() {
        crate::isa::for_each_level(|_| gelu_tanh_mul_matches_the_tanh_formula_here());
    }

    fn gelu_tanh_mul_matches_the_tanh_formula_here() {
        let pool = ThreadPool::new(2);
        let n = 3;
        let x: Vec<f32> = (0..n * 37).map(|i| (i as f32 - 55.0) * 0.17).collect();
        let up: Vec<f32> = (0..n * 37).map(|i| 1.0 + (i % 5) as f32 * 0.25).collect();
        let mut g = x.clone();
        gelu_tanh_mul(&pool, &mut g, &up, n);
        for ((&a, &u), &got) in x.iter().zip(&up).zip(&g) {
            let a = f64::from(a);
            let want = 0.5 * a * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (a + 0.044715 * a * a * a)).tanh());
            let want = want * f64::from(u);
            assert!((f64::from(got) - want).abs() <= 2e-6 * (1.0 + want.abs()), "x {a}: {got} vs {want}");
        }
    }

    #[test]
    fn rms_norm_matches_definition() {
        let pool = ThreadPool::new(2);
        let x = [1.0f32, -2.0, 3.0, 0.5, 2.0, 2.0, 2.0, 2.0];
        let w = [1.0f32, 0.5, 2.0, 1.0];
        let mut out = [0.0; 8];
        rms_norm(&pool, &x, &w, 1e-6, &mut out);
        let ms: f32 = (1.0 + 4.0 + 9.0 + 0.25) / 4.0;
        let s = 1.0 / (ms + 1e-6).sqrt();
        assert!((out[2] - 3.0 * s * 2.0).abs() < 1e-6);
        assert!((out[4] - 1.0).abs() < 1e-5);
        let mut y = x;
        rms_norm_inplace(&pool, &mut y, &w, 1e-6);
        assert_eq!(y, out);
    }

    #[test]
    fn row_ops_agree_inline_and_split_over_threads() {
        crate::isa::for_each_level(|_| row_ops_agree_here());
    }

    fn row_ops_agree_here() {
        // 40 rows: above the split threshold, so 3 threads take a range each.
        let (n, d) = (40, 24);
        let x: Vec<f32> = (0..n * d).map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.07).collect();
        let y: Vec<f32> = (0..n * d).map(|i| ((i * 13 % 29) as f32 - 14.0) * 0.1).collect();
        let w: Vec<f32> = (0..d).map(|i| 0.5 + i as f32 * 0.01).collect();
        let run = |threads: usize| {
            let pool = ThreadPool::new(threads);
            let (mut xa, mut h) = (x.clone(), vec![0.0; n * d]);
            add_rms_norm(&pool, &mut xa, &y, &w, 1e-5, &mut h);
            let mut g = x.clone();
            silu_mul(&pool, &mut g, &y, n);
            (xa, h, g)
        };
        let (a, b) = (run(1), run(3));
        assert_eq!(a, b);
        // add_rms_norm = add then rms_norm.
        let pool = ThreadPool::new(1);
        let sum: Vec<f32> = x.iter().zip(&y).map(|(p, q)| p + q).collect();
        let mut h = vec![0.0; n * d];
        rms_norm(&pool, &sum, &w, 1e-5, &mut h);
        assert_eq!(a.0, sum);
        assert_eq!(a.1, h);
        // silu against the definition (vector exp: 4e-7 relative).
        for (i, (&gi, (&xi, &yi))) in a.2.iter().zip(x.iter().zip(&y)).enumerate() {
            let want = (xi as f64 / (1.0 + (-xi as f64).exp())) * yi as f64;
            assert!((gi as f64 - want).abs() <= 1e-6 * want.abs().max(1e-3), "{i}: {gi} vs {want}");
        }
    }

    #[test]
    fn silu_mul_and_softmax() {
        let pool = ThreadPool::new(1);
        let mut g = [0.0f32, 1.0, -1.0];
        silu_mul(&pool, &mut g, &[2.0, 2.0, 2.0], 1);
        assert_eq!(g[0], 0.0);
        assert!((g[1] - 2.0 * 0.7310586).abs() < 1e-6);
        let mut p = [1.0f32, 2.0, 3.0];
        softmax_inplace(&mut p);
        assert!((p.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        assert!((p[2] - 0.66524096).abs() < 1e-6);
    }
}
