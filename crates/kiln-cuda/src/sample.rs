//! Sampling on the device, host side: the per-row parameters the sampling
//! kernel reads (`kernels/sample.cu`), and the exact distribution those
//! parameters define, which `cuda-check` holds the kernel to and the tests
//! below hold the CPU sampler to. Plain Rust, tested without a GPU.

use kiln_backend::Draw as DeviceDraw;

/// `u32`s of parameters per logit row (`SampleParams` in sample.cu).
pub const PARAM_WORDS: usize = kiln_backend::draw::DRAW_WORDS;

/// Appends one row's parameters to `out` ([`DeviceDraw::words`]). `None`
/// (a row the host samples) packs as greedy: the kernel's pick is then
/// simply not used.
pub fn pack_row(d: Option<&DeviceDraw>, out: &mut Vec<u32>) {
    out.extend(DeviceDraw::words(d));
}

/// The probability of every token under `d` ([`DeviceDraw::distribution`]).
pub fn distribution(logits: &[f32], d: &DeviceDraw) -> Vec<f64> {
    d.distribution(logits)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_core::sample::Sampler;
    use kiln_core::SamplingParams;

    fn draw(temperature: f32, top_k: usize, top_p: f32, min_p: f32) -> DeviceDraw {
        DeviceDraw { greedy: false, temperature, top_k, top_p, min_p, uniform: 0 }
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
