//! RMSNorm, SwiGLU, residual add, softmax.

/// RMSNorm of each row of `x` (row length `w.len()`) into `out`:
/// `out = x / sqrt(mean(x²) + eps) * w`.
pub fn rms_norm(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let d = w.len();
    if d == 0 {
        return;
    }
    for (xr, or) in x.chunks_exact(d).zip(out.chunks_exact_mut(d)) {
        let scale = inv_rms(xr, eps);
        for ((o, xi), wi) in or.iter_mut().zip(xr).zip(w) {
            *o = xi * scale * wi;
        }
    }
}

/// RMSNorm in place, rows of length `w.len()`.
pub fn rms_norm_inplace(x: &mut [f32], w: &[f32], eps: f32) {
    let d = w.len();
    if d == 0 {
        return;
    }
    for xr in x.chunks_exact_mut(d) {
        let scale = inv_rms(xr, eps);
        for (xi, wi) in xr.iter_mut().zip(w) {
            *xi *= scale * wi;
        }
    }
}

fn inv_rms(x: &[f32], eps: f32) -> f32 {
    let ss = super::dot(x, x);
    1.0 / (ss / x.len() as f32 + eps).sqrt()
}

/// SwiGLU: `gate = silu(gate) * up`, in place over `gate`.
pub fn silu_mul(gate: &mut [f32], up: &[f32]) {
    for (g, u) in gate.iter_mut().zip(up) {
        let x = *g;
        *g = x / (1.0 + (-x).exp()) * u;
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
    fn rms_norm_matches_definition() {
        let x = [1.0f32, -2.0, 3.0, 0.5, 2.0, 2.0, 2.0, 2.0];
        let w = [1.0f32, 0.5, 2.0, 1.0];
        let mut out = [0.0; 8];
        rms_norm(&x, &w, 1e-6, &mut out);
        let ms: f32 = (1.0 + 4.0 + 9.0 + 0.25) / 4.0;
        let s = 1.0 / (ms + 1e-6).sqrt();
        assert!((out[2] - 3.0 * s * 2.0).abs() < 1e-6);
        assert!((out[4] - 1.0).abs() < 1e-5);
        let mut y = x;
        rms_norm_inplace(&mut y, &w, 1e-6);
        assert_eq!(y, out);
    }

    #[test]
    fn silu_mul_and_softmax() {
        let mut g = [0.0f32, 1.0, -1.0];
        silu_mul(&mut g, &[2.0, 2.0, 2.0]);
        assert_eq!(g[0], 0.0);
        assert!((g[1] - 2.0 * 0.7310586).abs() < 1e-6);
        let mut p = [1.0f32, 2.0, 3.0];
        softmax_inplace(&mut p);
        assert!((p.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        assert!((p[2] - 0.66524096).abs() < 1e-6);
    }
}
