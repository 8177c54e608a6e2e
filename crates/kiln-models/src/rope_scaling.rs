//! RoPE scaling: how a model trained on a short context reaches a longer
//! one. Each kind is a change to the rotary frequencies (per-pair factors
//! that divide them, [`kiln_backend::RopeDesc::freq_factors`]), a linear
//! position scale, or an attention factor on `cos`/`sin`; the backends
//! build the same table from it.
//!
//! References: Llama 3.1's frequency smoothing (the `llama3` rope type of
//! Hugging Face transformers' `modeling_rope_utils`), YaRN (Peng et al.,
//! 2023, arXiv:2309.00071), linear position interpolation (Chen et al.,
//! 2023, arXiv:2306.15595).

use crate::error::{ModelError, Result};

/// A model's RoPE scaling.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum RopeScaling {
    /// None.
    #[default]
    None,
    /// Positions divided by `factor`.
    Linear {
        /// Scale (> 0).
        factor: f32,
    },
    /// Llama 3.1: low frequencies divided by `factor`, high ones kept, a
    /// smooth blend between (by wavelength against the original context).
    Llama3 {
        /// Scale of the low frequencies.
        factor: f32,
        /// Wavelengths over `original_max_position / low_freq_factor` are scaled.
        low_freq_factor: f32,
        /// Wavelengths under `original_max_position / high_freq_factor` are kept.
        high_freq_factor: f32,
        /// The context the model was first trained on.
        original_max_position: usize,
    },
    /// YaRN: frequencies that turn fewer than `beta_slow` times over the
    /// original context are interpolated by `factor`, those that turn more
    /// than `beta_fast` times kept, a linear ramp between; `cos`/`sin`
    /// multiplied by `attn_factor`.
    Yarn {
        /// Context extension.
        factor: f32,
        /// The context the model was first trained on.
        original_max_position: usize,
        /// Rotations above which a frequency is kept (default 32).
        beta_fast: f32,
        /// Rotations below which a frequency is interpolated (default 1).
        beta_slow: f32,
        /// Attention scale (default `0.1 ln(factor) + 1`).
        attn_factor: f32,
    },
}

impl RopeScaling {
    /// YaRN's default attention factor for `factor`.
    pub fn yarn_mscale(factor: f32) -> f32 {
        if factor <= 1.0 {
            1.0
        } else {
            0.1 * factor.ln() + 1.0
        }
    }

    /// Checks the parameters a forward pass relies on.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(ModelError::Config(format!("RoPE scaling: {m}")));
        let pos = |v: f32| v.is_finite() && v > 0.0;
        match *self {
            Self::None => Ok(()),
            Self::Linear { factor } if pos(factor) => Ok(()),
            Self::Llama3 { factor, low_freq_factor, high_freq_factor, original_max_position }
                if pos(factor)
                    && pos(low_freq_factor)
                    && high_freq_factor.is_finite()
                    && high_freq_factor > low_freq_factor
                    && original_max_position > 0 =>
            {
                Ok(())
            }
            Self::Yarn { factor, original_max_position, beta_fast, beta_slow, attn_factor }
                if pos(factor)
                    && original_max_position > 0
                    && pos(beta_slow)
                    && beta_fast > beta_slow
                    && pos(attn_factor) =>
            {
                Ok(())
            }
            other => bad(format!("parameters out of range: {other:?}")),
        }
    }

    /// The linear position scale (1: none).
    pub fn position_scale(&self) -> f32 {
        match *self {
            Self::Linear { factor } => factor,
            _ => 1.0,
        }
    }

    /// The factor on `cos`/`sin` (1: none).
    pub fn attn_factor(&self) -> f32 {
        match *self {
            Self::Yarn { attn_factor, .. } => attn_factor,
            _ => 1.0,
        }
    }

    /// Per-pair factors dividing the frequencies `theta^(-2i/dim)` of a
    /// `dim`-dimensional rotation (`None`: all 1).
    pub fn freq_factors(&self, theta: f32, dim: usize) -> Option<Vec<f32>> {
        let half = dim / 2;
        let inv_freq = |i: usize| f64::from(theta).powf(-((2 * i) as f64) / dim as f64);
        match *self {
            Self::None | Self::Linear { .. } => None,
            Self::Llama3 { factor, low_freq_factor, high_freq_factor, original_max_position } => {
                let (f, lo, hi, old) = (
                    f64::from(factor),
                    f64::from(low_freq_factor),
                    f64::from(high_freq_factor),
                    original_max_position as f64,
                );
                let (low_wavelen, high_wavelen) = (old / lo, old / hi);
                Some(
                    (0..half)
                        .map(|i| {
                            let wavelen = 2.0 * std::f64::consts::PI / inv_freq(i);
                            if wavelen < high_wavelen {
                                1.0
                            } else if wavelen > low_wavelen {
                                f as f32
                            } else {
                                // inv_freq · ((1 - s) / f + s), as a divisor.
                                let s = (old / wavelen - lo) / (hi - lo);
                                (1.0 / ((1.0 - s) / f + s)) as f32
                            }
                        })
                        .collect(),
                )
            }
            Self::Yarn { factor, original_max_position, beta_fast, beta_slow, .. } => {
                let (f, base, d) = (f64::from(factor), f64::from(theta), dim as f64);
                // The dimension at which a frequency turns `rotations` times
                // over the original context.
                let dim_of = |rotations: f64| {
                    d * (original_max_position as f64 / (rotations * 2.0 * std::f64::consts::PI)).ln()
                        / (2.0 * base.ln())
                };
                let low = dim_of(f64::from(beta_fast)).floor().max(0.0);
                let mut high = dim_of(f64::from(beta_slow)).ceil().min(d - 1.0);
                if high <= low {
                    high = low + 0.001;
                }
                Some(
                    (0..half)
                        .map(|i| {
                            // 1: keep (extrapolate); 0: interpolate by `f`.
                            let keep = 1.0 - ((i as f64 - low) / (high - low)).clamp(0.0, 1.0);
                            (1.0 / ((1.0 - keep) / f + keep)) as f32
                        })
                        .collect(),
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LLAMA31: RopeScaling =
        RopeScaling::Llama3 { factor: 8.0, low_freq_factor: 1.0, high_freq_factor: 4.0, original_max_position: 8192 };

    #[test]
    fn llama3_keeps_high_frequencies_scales_low_ones_and_blends_between() {
        // Llama 3.1 8B: theta 500000, head dim 128.
        let ff = LLAMA31.freq_factors(500_000.0, 128).unwrap();
        assert_eq!(ff.len(), 64);
        let wavelen = |i: usize| 2.0 * std::f64::consts::PI * 500_000f64.powf(2.0 * i as f64 / 128.0);
        for (i, &f) in ff.iter().enumerate() {
            if wavelen(i) < 8192.0 / 4.0 {
                assert_eq!(f, 1.0, "pair {i} turns fast: kept");
            } else if wavelen(i) > 8192.0 {
                assert_eq!(f, 8.0, "pair {i} turns slowly: scaled by the factor");
            } else {
                assert!(f > 1.0 && f < 8.0, "pair {i}: {f} blends");
            }
        }
        assert!(ff.windows(2).all(|w| w[1] >= w[0]), "monotone in wavelength");
        // The blend's end points meet the plain regions: s = 0 at the low
        // frequency edge gives the factor, s = 1 at the high edge gives 1.
        let s = |i: usize| (8192.0 / wavelen(i) - 1.0) / 3.0;
        let i = (0..64).find(|&i| wavelen(i) >= 2048.0 && wavelen(i) <= 8192.0).unwrap();
        assert!((f64::from(ff[i]) - 1.0 / ((1.0 - s(i)) / 8.0 + s(i))).abs() < 1e-4);
    }

    #[test]
    fn yarn_ramps_from_kept_to_interpolated_and_scales_attention() {
        let y = RopeScaling::Yarn {
            factor: 4.0,
            original_max_position: 32768,
            beta_fast: 32.0,
            beta_slow: 1.0,
            attn_factor: RopeScaling::yarn_mscale(4.0),
        };
        let ff = y.freq_factors(1_000_000.0, 128).unwrap();
        assert_eq!(ff[0], 1.0, "the fastest pair turns far more than 32 times: kept");
        assert!((ff[63] - 4.0).abs() < 1e-6, "the slowest turns less than once: interpolated");
        assert!(ff.windows(2).all(|w| w[1] >= w[0] - 1e-6));
        // Pairs that turn more than beta_fast times over the original
        // context are all kept.
        let turns = |i: usize| 32768.0 / (2.0 * std::f64::consts::PI * 1e6f64.powf(2.0 * i as f64 / 128.0));
        for (i, &f) in ff.iter().enumerate() {
            if turns(i) > 32.0 * 1.5 {
                assert_eq!(f, 1.0, "pair {i}");
            }
            if turns(i) < 0.5 {
                assert!((f - 4.0).abs() < 1e-6, "pair {i}");
            }
        }
        assert!((y.attn_factor() - (0.1 * 4f32.ln() + 1.0)).abs() < 1e-7);
        assert_eq!(RopeScaling::yarn_mscale(1.0), 1.0);
    }

    #[test]
    fn linear_and_none_change_no_frequency() {
        assert_eq!(RopeScaling::None.freq_factors(1e4, 64), None);
        assert_eq!(RopeScaling::Linear { factor: 2.0 }.freq_factors(1e4, 64), None);
        assert_eq!(RopeScaling::Linear { factor: 2.0 }.position_scale(), 2.0);
        assert!(RopeScaling::Linear { factor: 0.0 }.validate().is_err());
        let flat = RopeScaling::Llama3 {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 1.0,
            original_max_position: 8192,
        };
        assert!(flat.validate().is_err(), "high_freq_factor must exceed low_freq_factor");
        assert!(LLAMA31.validate().is_ok());
    }
}
