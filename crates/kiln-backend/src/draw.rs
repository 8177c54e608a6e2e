//! Sampling on the device: a logit row's [`Draw`], the parameter words a
//! device's sampling kernel reads for it ([`Draw::words`]), and the exact
//! distribution those parameters define ([`Draw::distribution`]), which
//! every device sampler and kiln-core's CPU sampler are held to.

/// One logit row's draw, for backends that sample on the device: the
/// sampler settings and the uniform number, fixed by the host so that
/// device and host sampling agree (`kiln_core::sample` is the reference).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Draw {
    /// Temperature 0: argmax (ties → lowest id); the fields below are unused.
    pub greedy: bool,
    /// Temperature (> 0 when not greedy).
    pub temperature: f32,
    /// Top-k (0: off).
    pub top_k: usize,
    /// Top-p (1: off).
    pub top_p: f32,
    /// Min-p (0: off).
    pub min_p: f32,
    /// The draw, as a fraction of the kept mass in units of 2^-32.
    pub uniform: u32,
}

/// `u32`s of parameters per logit row ([`Draw::words`]).
pub const DRAW_WORDS: usize = 8;

impl Draw {
    /// Argmax (ties → lowest id): a greedy row, or a proposal.
    pub const GREEDY: Draw = Draw { greedy: true, temperature: 1.0, top_k: 0, top_p: 1.0, min_p: 0.0, uniform: 0 };

    /// The words a sampling kernel reads for one row: greedy (1: argmax),
    /// top-k (0: off), 1 / temperature, top-p (≥ 1: off), min-p (≤ 0:
    /// off) as f32 bits, the uniform number, two zeros. `None` (a row the
    /// host samples) packs as greedy: the kernel's pick is then not used.
    pub fn words(d: Option<&Draw>) -> [u32; DRAW_WORDS] {
        let Some(d) = d.filter(|d| !d.greedy) else {
            return [1, 0, 0, 0, 0, 0, 0, 0];
        };
        [
            0,
            u32::try_from(d.top_k).unwrap_or(u32::MAX),
            (1.0 / d.temperature).to_bits(),
            d.top_p.to_bits(),
            d.min_p.to_bits(),
            d.uniform,
            0,
            0,
        ]
    }

    /// The probability of every token under this draw's settings
    /// (temperature, top-k, softmax, top-p, min-p, as kiln-core's sampler
    /// defines them), by a plain full sort. Greedy puts all mass on the
    /// argmax (lowest id among ties).
    pub fn distribution(&self, logits: &[f32]) -> Vec<f64> {
        let d = self;
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
        let w: Vec<f64> =
            order.iter().map(|&i| (f64::from(logits[i]) / f64::from(d.temperature) - max).exp()).collect();
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
        let kept: Vec<(usize, f64)> = order
            .iter()
            .zip(&w)
            .take(keep)
            .filter(|(_, &wi)| wi >= f64::from(d.min_p))
            .map(|(&i, &wi)| (i, wi))
            .collect();
        let sum: f64 = kept.iter().map(|k| k.1).sum();
        for (i, wi) in kept {
            p[i] = wi / sum;
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn draw(temperature: f32, top_k: usize, top_p: f32, min_p: f32) -> Draw {
        Draw { greedy: false, temperature, top_k, top_p, min_p, uniform: 0 }
    }

    #[test]
    fn packs_the_kernel_layout() {
        let v = Draw::words(Some(&Draw { uniform: 77, ..draw(0.5, 40, 0.9, 0.05) }));
        assert_eq!(&v[..2], &[0, 40]);
        assert_eq!(f32::from_bits(v[2]), 2.0);
        assert_eq!((f32::from_bits(v[3]), f32::from_bits(v[4]), v[5]), (0.9, 0.05, 77));
        assert_eq!(Draw::words(None)[0], 1, "a host row packs as greedy");
        assert_eq!(Draw::words(Some(&Draw::GREEDY))[0], 1);
    }

    #[test]
    fn distribution_applies_each_truncation() {
        let l = [2.0f32, 1.0, 0.0, -1.0, f32::NEG_INFINITY, 2.0];
        let full = draw(1.0, 0, 1.0, 0.0).distribution(&l);
        assert!((full.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        assert_eq!(full[4], 0.0);
        assert_eq!(full[0], full[5]);
        // top-k 2 keeps the two 2.0s (ties by id), top-p 0.5 the first of them.
        let k2 = draw(1.0, 2, 1.0, 0.0).distribution(&l);
        assert_eq!((k2[0], k2[5], k2[1]), (0.5, 0.5, 0.0));
        let p = draw(1.0, 0, 0.3, 0.0).distribution(&l);
        assert_eq!(p[0], 1.0);
        // min-p 0.3 drops weights below 0.3 of the best (e^-1 ≈ 0.37 stays).
        let m = draw(1.0, 0, 1.0, 0.3).distribution(&l);
        assert!(m[1] > 0.0 && m[2] == 0.0);
        let g = Draw { greedy: true, ..draw(1.0, 0, 1.0, 0.0) }.distribution(&l);
        assert_eq!(g[0], 1.0);
    }
}
