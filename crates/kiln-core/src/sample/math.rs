//! Small numeric kernels over a vocabulary of logits: a portable `exp`,
//! NaN-ignoring max / argmax, and log-sum-exp.
//!
//! All loops are written over fixed lanes so the compiler vectorizes them,
//! and all arithmetic is plain `f32` in a fixed order, so the results are
//! bit-identical on every platform (libm's `expf` is not).

const LANES: usize = 8;

/// `e^x` with about 1 ulp of error for normal results; 0 for `x` below
/// about -87.3 (and for NaN), saturating at `e^88`.
#[inline(always)]
pub(crate) fn exp_f32(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    const MAGIC: f32 = 12_582_912.0; // 1.5 * 2^23: adding it rounds to an integer.
                                     // min/max (not clamp) and a bit mask (not a branch) keep this loop
                                     // vectorizable.
    #[allow(clippy::manual_clamp)] // clamp keeps NaN and does not vectorize here
    let xc = x.max(-87.0).min(88.0);
    let shifted = xc * LOG2E + MAGIC;
    let n = shifted - MAGIC;
    let ni = shifted.to_bits().wrapping_sub(MAGIC.to_bits());
    let r = xc - n * LN2_HI - n * LN2_LO;
    // Taylor series of e^r on |r| <= ln2/2, Horner form.
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0 + r * (1.0 / 5040.0)))))));
    let scale = f32::from_bits(ni.wrapping_add(127) << 23);
    let keep = u32::from(x >= -87.0).wrapping_neg(); // all ones, or 0 for tiny x and NaN
    f32::from_bits((p * scale).to_bits() & keep)
}

/// The largest value, ignoring NaN; `-inf` when there is none.
pub(crate) fn max_value(xs: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; LANES];
    let chunks = xs.chunks_exact(LANES);
    let rest = chunks.remainder();
    for c in chunks {
        for (a, &x) in acc.iter_mut().zip(c) {
            *a = if x > *a { x } else { *a };
        }
    }
    let mut m = f32::NEG_INFINITY;
    for &x in acc.iter().chain(rest) {
        m = if x > m { x } else { m };
    }
    m
}

/// Index of the largest value, the lowest index among ties; NaN is never
/// chosen unless everything is NaN (then 0). `None` only when empty.
pub(crate) fn argmax(xs: &[f32]) -> Option<usize> {
    if xs.is_empty() {
        return None;
    }
    let m = max_value(xs);
    Some(xs.iter().position(|&x| x == m).unwrap_or(0))
}

/// `sum_i exp(x_i - max)` over the finite-or-infinite non-NaN values, written
/// to `out` when given. Returns the sum (in `f32`, lane-parallel order).
pub(crate) fn exp_shifted_sum(xs: &[f32], max: f32) -> f32 {
    let mut acc = [0.0f32; LANES];
    let chunks = xs.chunks_exact(LANES);
    let rest = chunks.remainder();
    for c in chunks {
        for (a, &x) in acc.iter_mut().zip(c) {
            *a += exp_f32(x - max);
        }
    }
    let mut s = 0.0f32;
    for &x in rest {
        s += exp_f32(x - max);
    }
    acc.iter().sum::<f32>() + s
}

/// Natural log of `sum_i exp(x_i)`, ignoring NaN; `-inf` when every value is
/// `-inf` or NaN; `+inf` when some value is `+inf`.
pub(crate) fn log_sum_exp(xs: &[f32]) -> f32 {
    let m = max_value(xs);
    if !m.is_finite() {
        return m;
    }
    m + exp_shifted_sum(xs, m).ln()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_matches_f64_reference() {
        let mut worst = 0.0f64;
        let mut x = -87.0f32;
        while x < 88.0 {
            let got = exp_f32(x) as f64;
            let want = (x as f64).exp();
            worst = worst.max(((got - want) / want).abs());
            x += 0.0137;
        }
        assert!(worst < 4e-7, "worst relative error {worst}");
        assert_eq!(exp_f32(0.0), 1.0);
    }

    #[test]
    fn exp_edges() {
        assert_eq!(exp_f32(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_f32(-1000.0), 0.0);
        assert_eq!(exp_f32(f32::NAN), 0.0);
        assert!(exp_f32(f32::INFINITY).is_finite());
        assert!(exp_f32(f32::INFINITY) > 1e38);
    }

    #[test]
    fn argmax_ties_go_to_lowest_index_and_nan_is_ignored() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0, 2.0]), Some(1));
        assert_eq!(argmax(&[f32::NAN, 0.5, f32::NAN, 0.5]), Some(1));
        assert_eq!(argmax(&[f32::NEG_INFINITY; 3]), Some(0));
        assert_eq!(argmax(&[f32::NAN; 3]), Some(0));
        assert_eq!(argmax(&[]), None);
        // Longer than one lane block, tie across blocks.
        let mut v = vec![0.0f32; 37];
        v[9] = 5.0;
        v[30] = 5.0;
        assert_eq!(argmax(&v), Some(9));
    }

    #[test]
    fn log_sum_exp_matches_direct_formula() {
        let xs: Vec<f32> = (0..29).map(|i| (i as f32 * 0.37).sin() * 4.0).collect();
        let direct = xs.iter().map(|&x| (x as f64).exp()).sum::<f64>().ln();
        assert!((log_sum_exp(&xs) as f64 - direct).abs() < 1e-5);
        assert_eq!(log_sum_exp(&[f32::NEG_INFINITY, f32::NAN]), f32::NEG_INFINITY);
        // -inf entries contribute nothing.
        let lse = log_sum_exp(&[0.0, f32::NEG_INFINITY, 0.0]);
        assert!((lse - 2f32.ln()).abs() < 1e-6);
    }
}
