//! Sampling on the device, host side: the per-row parameters the sampling
//! kernel reads (`kernels/sample.cu`), and the exact distribution those
//! parameters define, which `cuda-check` holds the kernel to and the tests
//! below hold the CPU sampler to. Plain Rust, tested without a GPU.

use kiln_backend::Draw as DeviceDraw;

/// `u32`s of parameters per logit row (`SampleParams` in sample.cu).
pub const PARAM_WORDS: usize = 8;

/// Appends one row's parameters to `out`. `None` (a row the host samples)
/// packs as greedy: the kernel's pick is then simply not used.
pub fn pack_row(d: Option<&DeviceDraw>, out: &mut Vec<u32>) {
    let Some(d) = d.filter(|d| !d.greedy) else {
        out.extend([1, 0, 0, 0, 0, 0, 0, 0]);
        return;
    };
    out.extend([
        0,
        u32::try_from(d.top_k).unwrap_or(u32::MAX),
        (1.0 / d.temperature).to_bits(),
        d.top_p.to_bits(),
        d.min_p.to_bits(),
        d.uniform,
        0,
        0,
    ]);
}

/// The probability of every token under `d` (temperature, top-k, softmax,
/// top-p, min-p, as kiln-core's sampler defines them), by a plain full sort.
/// Greedy puts all mass on the argmax (lowest id among ties).
pub fn distribution(logits: &[f32], d: &DeviceDraw) -> Vec<f64> {
    let mut p = vec![0.0; logits.len()];
    let mut order: Vec<usize> = (0..logits.len()).filter(|&i| logits[i] > f32::NEG_INFINITY).collect();
    order.sort_by(|&a, &b| logits[b].partial_cmp(&logits[a]).unwrap_or(std::cmp::Ordering::Equal).then(a.cmp(&b)));
    let Some(&best) = order.first() else { return p };
    if d.greedy {
        p[best] = 1.0;
        return p;
    }
    if d.top_k > 0 {
        order.truncate(d.top_k);
    }
    let max = f64::from(logits[best]) / f64::from(d.temperature);
    let w: Vec<f64> = order.iter().map(|&i| (f64::from(logits[i]) / f64::from(d.temperature) - max).exp()).collect();
    let total: f64 = w.iter().sum();
    let mut keep = order.len();
    if d.top_p < 1.0 {
        let mut cum = 0.0;
        for (n, &wi) in w.iter().enumerate() {
            cum += wi;
            if cum >= f64::from(d.top_p) * total {
                keep = n + 1;
                break;
            }
        }
    }
    let kept: Vec<(usize, f64)> =
        order.iter().zip(&w).take(keep).filter(|(_, &wi)| wi >= f64::from(d.min_p)).map(|(&i, &wi)| (i, wi)).collect();
    let sum: f64 = kept.iter().map(|k| k.1).sum();
    for (i, wi) in kept {
        p[i] = wi / sum;
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_core::sample::Sampler;
    use kiln_core::SamplingParams;

    fn draw(temperature: f32, top_k: usize, top_p: f32, min_p: f32) -> DeviceDraw {
        DeviceDraw { greedy: false, temperature, top_k, top_p, min_p, uniform: 0 }
    }

    #[test]
    fn packs_the_kernel_layout() {
        let mut v = Vec::new();
        pack_row(Some(&DeviceDraw { uniform: 77, ..draw(0.5, 40, 0.9, 0.05) }), &mut v);
        pack_row(None, &mut v);
        assert_eq!(v.len(), 2 * PARAM_WORDS);
        assert_eq!(&v[..2], &[0, 40]);
        assert_eq!(f32::from_bits(v[2]), 2.0);
        assert_eq!((f32::from_bits(v[3]), f32::from_bits(v[4]), v[5]), (0.9, 0.05, 77));
        assert_eq!(v[PARAM_WORDS], 1, "a host row packs as greedy");
    }

    #[test]
    fn distribution_applies_each_truncation() {
        let l = [2.0f32, 1.0, 0.0, -1.0, f32::NEG_INFINITY, 2.0];
        let full = distribution(&l, &draw(1.0, 0, 1.0, 0.0));
        assert!((full.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        assert_eq!(full[4], 0.0);
        assert_eq!(full[0], full[5]);
        // top-k 2 keeps the two 2.0s (ties by id), top-p 0.5 the first of them.
        let k2 = distribution(&l, &draw(1.0, 2, 1.0, 0.0));
        assert_eq!((k2[0], k2[5], k2[1]), (0.5, 0.5, 0.0));
        let p = distribution(&l, &draw(1.0, 0, 0.3, 0.0));
        assert_eq!(p[0], 1.0);
        // min-p 0.3 drops weights below 0.3 of the best (e^-1 ≈ 0.37 stays).
        let m = distribution(&l, &draw(1.0, 0, 1.0, 0.3));
        assert!(m[1] > 0.0 && m[2] == 0.0);
        let g = distribution(&l, &DeviceDraw { greedy: true, ..draw(1.0, 0, 1.0, 0.0) });
        assert_eq!(g[0], 1.0);
    }

    /// The CPU sampler draws from the distribution the device sampler is
    /// held to (total variation over 20000 draws).
    #[test]
    fn cpu_sampler_follows_the_distribution() {
        let logits: Vec<f32> = (0..64u32).map(|i| (i.wrapping_mul(2_654_435_761) % 97) as f32 * 0.05).collect();
        for (t, k, tp, mp) in [(1.0, 0, 1.0, 0.0), (0.7, 10, 1.0, 0.0), (1.3, 0, 0.8, 0.0), (1.0, 20, 0.9, 0.1)] {
            let want = distribution(&logits, &draw(t, k, tp, mp));
            let params =
                SamplingParams { temperature: t, top_k: k, top_p: tp, min_p: mp, seed: Some(9), ..Default::default() };
            let mut s = Sampler::new(&params).unwrap();
            let n = 20_000;
            let mut got = vec![0.0; logits.len()];
            for _ in 0..n {
                got[s.sample(&mut logits.clone(), &[]).token as usize] += 1.0 / n as f64;
            }
            let tv: f64 = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).sum::<f64>() / 2.0;
            assert!(tv < 0.03, "({t}, {k}, {tp}, {mp}): total variation {tv}");
            assert!(got.iter().zip(&want).all(|(a, b)| *b > 0.0 || *a == 0.0), "a token outside the kept set");
        }
    }
}
