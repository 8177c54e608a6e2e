//! The elementwise ops and attention of encoder models: LayerNorm with a
//! bias (fused with the residual add before it), exact GELU, and attention
//! within each sequence in both directions over `f32` Q/K/V planes (no KV
//! cache: an encoder sees its whole input at once).

use std::ops::Range;

use super::par::{for_rows, RowsMut};
use crate::pool::ThreadPool;

/// `x = LayerNorm(x + y)` row by row (`y` empty: `x = LayerNorm(x)`), rows
/// of `w.len()` values: `(v - mean) / sqrt(var + eps) ⊙ w + b`.
pub fn add_layer_norm(pool: &ThreadPool, x: &mut [f32], y: &[f32], w: &[f32], b: &[f32], eps: f32) {
    let d = w.len();
    if d == 0 || b.len() != d {
        return;
    }
    let n = x.len() / d;
    let xs = RowsMut::new(x, d);
    for_rows(pool, n, &|r| {
        // SAFETY: `for_rows` ranges are disjoint.
        let x = unsafe { xs.rows(r.clone()) };
        for (i, row) in x.chunks_exact_mut(d).enumerate() {
            if !y.is_empty() {
                let t = r.start + i;
                super::add_inplace(row, &y[t * d..(t + 1) * d]);
            }
            layer_norm_row(row, w, b, eps);
        }
    });
}

fn layer_norm_row(x: &mut [f32], w: &[f32], b: &[f32], eps: f32) {
    let n = x.len() as f32;
    let mean = x.iter().sum::<f32>() / n;
    x.iter_mut().for_each(|v| *v -= mean);
    let var = super::dot(x, x) / n;
    let scale = 1.0 / (var + eps).sqrt();
    for ((v, wi), bi) in x.iter_mut().zip(w).zip(b) {
        *v = *v * scale * wi + bi;
    }
}

/// `x = gelu(x)` with the exact (erf) GELU, over `n` rows.
pub fn gelu_erf(pool: &ThreadPool, x: &mut [f32], n: usize) {
    map_rows(pool, x, n, gelu_erf_rows);
}

/// `f` over the `n` rows of `x`, split over `pool`.
fn map_rows(pool: &ThreadPool, x: &mut [f32], n: usize, f: fn(&mut [f32])) {
    if n == 0 || x.is_empty() {
        return;
    }
    let d = x.len() / n;
    let xs = RowsMut::new(x, d);
    for_rows(pool, n, &|r| {
        // SAFETY: `for_rows` ranges are disjoint.
        f(unsafe { xs.rows(r) });
    });
}

/// The coefficients of Numerical Recipes' Chebyshev fit of erfc (relative
/// error below 1.2e-7): `erfc(z) = t · exp(-z² + P(t))`, `t = 1/(1 + z/2)`,
/// highest degree first.
const ERFC_P: [f32; 10] = [
    0.170_872_77,
    -0.822_152_23,
    1.488_515_9,
    -1.135_204,
    0.278_868_07,
    -0.186_288_06,
    0.096_784_18,
    0.374_091_96,
    1.000_023_7,
    -1.265_512_2,
];

fn gelu_erf_rows(x: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if super::vmath::has_avx512() {
        // SAFETY: AVX-512 F detected.
        return unsafe { gelu_erf_avx512(x) };
    }
    #[cfg(target_arch = "x86_64")]
    if super::vmath::has_avx2() {
        // SAFETY: AVX2 + FMA detected.
        return unsafe { gelu_erf_avx2(x) };
    }
    x.iter_mut().for_each(|v| *v = gelu_exact(*v));
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn gelu_erf_avx512(x: &mut [f32]) {
    use std::arch::x86_64::*;
    let n = x.len();
    let mut i = 0;
    while i + 16 <= n {
        // SAFETY: `i + 16 <= n`.
        unsafe {
            let v = _mm512_loadu_ps(x.as_ptr().add(i));
            let z = _mm512_abs_ps(_mm512_mul_ps(v, _mm512_set1_ps(std::f32::consts::FRAC_1_SQRT_2)));
            let t = _mm512_div_ps(_mm512_set1_ps(1.0), _mm512_fmadd_ps(z, _mm512_set1_ps(0.5), _mm512_set1_ps(1.0)));
            let mut p = _mm512_set1_ps(ERFC_P[0]);
            for &c in &ERFC_P[1..] {
                p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(c));
            }
            let e = super::vmath::exp512(_mm512_fnmadd_ps(z, z, p));
            let erfc = _mm512_mul_ps(t, e);
            // Φ(x)·2 = 1 + erf(x/√2): 2 - erfc for x ≥ 0, erfc below.
            let pos = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(v, _mm512_setzero_ps());
            let two_phi = _mm512_mask_sub_ps(erfc, pos, _mm512_set1_ps(2.0), erfc);
            _mm512_storeu_ps(x.as_mut_ptr().add(i), _mm512_mul_ps(_mm512_mul_ps(v, _mm512_set1_ps(0.5)), two_phi));
        }
        i += 16;
    }
    x[i..].iter_mut().for_each(|v| *v = gelu_exact(*v));
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn gelu_erf_avx2(x: &mut [f32]) {
    use std::arch::x86_64::*;
    let n = x.len();
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: `i + 8 <= n`.
        unsafe {
            let v = _mm256_loadu_ps(x.as_ptr().add(i));
            let sign = _mm256_set1_ps(-0.0);
            let z = _mm256_andnot_ps(sign, _mm256_mul_ps(v, _mm256_set1_ps(std::f32::consts::FRAC_1_SQRT_2)));
            let t = _mm256_div_ps(_mm256_set1_ps(1.0), _mm256_fmadd_ps(z, _mm256_set1_ps(0.5), _mm256_set1_ps(1.0)));
            let mut p = _mm256_set1_ps(ERFC_P[0]);
            for &c in &ERFC_P[1..] {
                p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(c));
            }
            let e = super::vmath::exp256(_mm256_fnmadd_ps(z, z, p));
            let erfc = _mm256_mul_ps(t, e);
            let pos = _mm256_cmp_ps::<_CMP_GE_OQ>(v, _mm256_setzero_ps());
            let two_phi = _mm256_blendv_ps(erfc, _mm256_sub_ps(_mm256_set1_ps(2.0), erfc), pos);
            _mm256_storeu_ps(x.as_mut_ptr().add(i), _mm256_mul_ps(_mm256_mul_ps(v, _mm256_set1_ps(0.5)), two_phi));
        }
        i += 8;
    }
    x[i..].iter_mut().for_each(|v| *v = gelu_exact(*v));
}

/// `x = gelu(x)` with the tanh approximation, over `n` rows.
pub fn gelu_tanh(pool: &ThreadPool, x: &mut [f32], n: usize) {
    map_rows(pool, x, n, |x| x.iter_mut().for_each(|v| *v = super::norm::gelu_tanh_scalar(*v)));
}

/// `0.5·x·(1 + erf(x/√2))`.
pub fn gelu_exact(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2))
}

/// The error function, to within 1.2e-7 everywhere (Numerical Recipes'
/// Chebyshev fit of erfc, computed in f64).
pub fn erf(x: f32) -> f32 {
    let z = f64::from(x).abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98 + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let erfc = t * poly.exp();
    let r = 1.0 - erfc;
    (if x < 0.0 { -r } else { r }) as f32
}

/// The shape of [`attention_within`]'s inputs.
#[derive(Debug, Clone, Copy)]
pub struct WithinShape {
    /// Query heads.
    pub num_heads: usize,
    /// Key/value heads (grouped-query when fewer).
    pub num_kv_heads: usize,
    /// Dimension of one head.
    pub head_dim: usize,
    /// Score scale.
    pub scale: f32,
}

/// Attention of every row of `q` (`n × heads·head_dim`) over all rows of
/// its own sequence in `k` and `v` (`n × kv_heads·head_dim`), into `out`
/// (shaped like `q`). `seqs` are the sequences' row ranges; rows outside
/// them are left as they are.
pub fn attention_within(
    pool: &ThreadPool,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    seqs: &[Range<usize>],
    s: WithinShape,
    out: &mut [f32],
) {
    let (hd, q_dim, kv_dim) = (s.head_dim, s.num_heads * s.head_dim, s.num_kv_heads * s.head_dim);
    if hd == 0 || s.num_kv_heads == 0 || q_dim == 0 {
        return;
    }
    let n = q.len() / q_dim;
    let group = s.num_heads / s.num_kv_heads;
    // The sequence of each row.
    let mut owner = vec![0..0; n];
    for r in seqs {
        for o in &mut owner[r.start.min(n)..r.end.min(n)] {
            *o = r.clone();
        }
    }
    let outs = RowsMut::new(out, q_dim);
    for_rows(pool, n, &|rows| {
        let mut scores = Vec::new();
        // SAFETY: `for_rows` ranges are disjoint.
        let o = unsafe { outs.rows(rows.clone()) };
        for (i, t) in rows.enumerate() {
            let span = owner[t].clone();
            if span.is_empty() {
                continue;
            }
            scores.resize(span.len(), 0.0);
            for h in 0..s.num_heads {
                let kh = h / group;
                let qh = &q[t * q_dim + h * hd..t * q_dim + (h + 1) * hd];
                for (sc, j) in scores.iter_mut().zip(span.clone()) {
                    *sc = super::dot(qh, &k[j * kv_dim + kh * hd..j * kv_dim + (kh + 1) * hd]) * s.scale;
                }
                super::softmax_inplace(&mut scores);
                let oh = &mut o[i * q_dim + h * hd..i * q_dim + (h + 1) * hd];
                oh.fill(0.0);
                for (&p, j) in scores.iter().zip(span.clone()) {
                    let vh = &v[j * kv_dim + kh * hd..j * kv_dim + (kh + 1) * hd];
                    oh.iter_mut().zip(vh).for_each(|(a, b)| *a += p * b);
                }
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erf_matches_known_values() {
        for (x, want) in [(0.0f32, 0.0f64), (0.5, 0.520_499_877_8), (1.0, 0.842_700_792_9), (2.0, 0.995_322_265)] {
            assert!((f64::from(erf(x)) - want).abs() < 2e-7, "erf({x})");
            assert!((f64::from(erf(-x)) + want).abs() < 2e-7, "erf(-{x})");
        }
        assert_eq!(erf(10.0), 1.0);
    }

    #[test]
    fn vector_gelu_matches_the_exact_one_on_every_level() {
        let xs: Vec<f32> = (-2000..2000).map(|i| i as f32 * 0.005).chain([-30.0, -9.0, 9.0, 30.0, 0.0]).collect();
        let want: Vec<f64> = xs
            .iter()
            .map(|&x| {
                let x = f64::from(x);
                0.5 * x * (1.0 + f64::from(erf((x * std::f64::consts::FRAC_1_SQRT_2) as f32)))
            })
            .collect();
        let mut got = xs.clone();
        gelu_erf_rows(&mut got);
        for ((x, g), w) in xs.iter().zip(&got).zip(&want) {
            assert!((f64::from(*g) - w).abs() <= 2e-6 * (1.0 + w.abs()), "gelu({x}) = {g}, want {w}");
        }
    }

    #[test]
    fn layer_norm_centres_and_scales() {
        let pool = ThreadPool::new(1);
        let mut x = vec![1.0, 2.0, 3.0, 4.0];
        add_layer_norm(&pool, &mut x, &[1.0, 1.0, 1.0, 1.0], &[1.0; 4], &[0.5; 4], 0.0);
        let mean: f32 = x.iter().sum::<f32>() / 4.0;
        assert!((mean - 0.5).abs() < 1e-6);
        let var: f32 = x.iter().map(|v| (v - 0.5) * (v - 0.5)).sum::<f32>() / 4.0;
        assert!((var - 1.0).abs() < 1e-5);
    }

    #[test]
    fn attention_stays_within_each_sequence() {
        let pool = ThreadPool::new(2);
        // One head of dim 2; two sequences of 2 and 1 rows.
        let q = vec![1.0, 0.0, 0.0, 1.0, 1.0, 1.0];
        let k = q.clone();
        let v = vec![1.0, 2.0, 3.0, 4.0, 100.0, 200.0];
        let mut out = vec![0.0; 6];
        let s = WithinShape { num_heads: 1, num_kv_heads: 1, head_dim: 2, scale: 1.0 };
        attention_within(&pool, &q, &k, &v, &[0..2, 2..3], s, &mut out);
        // Row 2 is alone: its own V.
        assert_eq!(&out[4..], &[100.0, 200.0]);
        // Row 0 weighs V0 by e/(e+1) and V1 by 1/(e+1) (scores 1 and 0).
        let e = std::f32::consts::E;
        let w0 = e / (e + 1.0);
        assert!((out[0] - (w0 * 1.0 + (1.0 - w0) * 3.0)).abs() < 1e-5);
        // Row 1 sees row 0 too (no causal mask).
        assert!(out[2] < 3.0 && out[2] > 1.0);
    }
}
