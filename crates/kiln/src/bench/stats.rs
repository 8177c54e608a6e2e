//! Order statistics of benchmark samples: percentiles, medians, spread.
//!
//! Percentiles interpolate linearly between the closest ranks (the
//! definition NumPy uses by default), so the median of an even count is the
//! mean of the two middle samples. Non-finite samples are ignored.

use serde::Serialize;

/// The `q`-th percentile (`q` in 0..=100) of `samples`; `None` when there
/// is no finite sample.
pub(crate) fn percentile(samples: &[f64], q: f64) -> Option<f64> {
    let mut v: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(percentile_sorted(&v, q))
}

/// Percentile of a sorted, non-empty, all-finite slice.
fn percentile_sorted(v: &[f64], q: f64) -> f64 {
    let q = q.clamp(0.0, 100.0) / 100.0;
    let pos = q * (v.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    let (a, b) = (v.get(lo).copied().unwrap_or(f64::NAN), v.get(hi).copied().unwrap_or(f64::NAN));
    a + (b - a) * (pos - lo as f64)
}

/// A summary of one metric over the iterations of a configuration.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct Summary {
    /// Number of finite samples.
    pub(crate) n: usize,
    /// Median.
    pub(crate) p50: f64,
    /// 10th percentile.
    pub(crate) p10: f64,
    /// 90th percentile.
    pub(crate) p90: f64,
    /// 99th percentile.
    pub(crate) p99: f64,
    /// Smallest sample.
    pub(crate) min: f64,
    /// Largest sample.
    pub(crate) max: f64,
    /// Arithmetic mean.
    pub(crate) mean: f64,
}

impl Summary {
    /// Summarizes `samples`; all fields are NaN when there is no finite sample.
    pub(crate) fn of(samples: &[f64]) -> Self {
        let mut v: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return Self {
                n: 0,
                p50: f64::NAN,
                p10: f64::NAN,
                p90: f64::NAN,
                p99: f64::NAN,
                min: f64::NAN,
                max: f64::NAN,
                mean: f64::NAN,
            };
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        // `percentile` re-sorts; the sorted copy makes that cheap and keeps one definition.
        let q = |q: f64| percentile(&v, q).unwrap_or(f64::NAN);
        Self {
            n,
            p50: q(50.0),
            p10: q(10.0),
            p90: q(90.0),
            p99: q(99.0),
            min: v.first().copied().unwrap_or(f64::NAN),
            max: v.last().copied().unwrap_or(f64::NAN),
            mean: v.iter().sum::<f64>() / n as f64,
        }
    }

    /// Relative spread `(p90 - p10) / p50`, the noise figure printed next to medians.
    pub(crate) fn spread(&self) -> f64 {
        (self.p90 - self.p10) / self.p50
    }
}

/// Differences between consecutive instants, in milliseconds.
pub(crate) fn gaps_ms(times: &[std::time::Instant]) -> Vec<f64> {
    times
        .windows(2)
        .filter_map(|w| match w {
            [a, b] => Some(b.duration_since(*a).as_secs_f64() * 1e3),
            _ => None,
        })
        .collect()
}

/// `count` per second over `ms` milliseconds (NaN when there is no time).
pub(crate) fn per_second(count: usize, ms: f64) -> f64 {
    if ms > 0.0 {
        count as f64 * 1e3 / ms
    } else {
        f64::NAN
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn median(v: &[f64]) -> Option<f64> {
        percentile(v, 50.0)
    }

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[7.0]), Some(7.0));
        assert_eq!(median(&[]), None);
    }

    #[test]
    fn percentiles_interpolate_between_ranks() {
        let v: Vec<f64> = (1..=11).map(f64::from).collect(); // 1..=11
        assert_eq!(percentile(&v, 0.0), Some(1.0));
        assert_eq!(percentile(&v, 100.0), Some(11.0));
        assert_eq!(percentile(&v, 10.0), Some(2.0));
        assert_eq!(percentile(&v, 90.0), Some(10.0));
        // 5 samples: p10 sits 0.4 of the way from the 1st to the 2nd.
        let w = [10.0, 20.0, 30.0, 40.0, 50.0];
        let p10 = percentile(&w, 10.0).unwrap_or(f64::NAN);
        assert!((p10 - 14.0).abs() < 1e-12, "{p10}");
        let p99 = percentile(&w, 99.0).unwrap_or(f64::NAN);
        assert!((p99 - 49.6).abs() < 1e-12, "{p99}");
        // Out-of-range q is clamped.
        assert_eq!(percentile(&w, 150.0), Some(50.0));
    }

    #[test]
    fn non_finite_samples_are_ignored() {
        assert_eq!(median(&[f64::NAN, 1.0, f64::INFINITY, 3.0]), Some(2.0));
        let s = Summary::of(&[f64::NAN]);
        assert_eq!(s.n, 0);
        assert!(s.p50.is_nan());
    }

    #[test]
    fn summary_fields() {
        let s = Summary::of(&[5.0, 1.0, 3.0, 2.0, 4.0]);
        assert_eq!(s.n, 5);
        assert_eq!((s.min, s.p50, s.max, s.mean), (1.0, 3.0, 5.0, 3.0));
        assert!((s.p10 - 1.4).abs() < 1e-12);
        assert!((s.p90 - 4.6).abs() < 1e-12);
        assert!((s.spread() - 3.2 / 3.0).abs() < 1e-12);
    }

    #[test]
    fn gaps_and_rates() {
        let t0 = std::time::Instant::now();
        let ts = [t0, t0 + std::time::Duration::from_millis(5), t0 + std::time::Duration::from_millis(12)];
        let g = gaps_ms(&ts);
        assert_eq!(g.len(), 2);
        assert!((g[0] - 5.0).abs() < 1e-9 && (g[1] - 7.0).abs() < 1e-9);
        assert!(gaps_ms(&ts[..1]).is_empty());
        assert_eq!(per_second(10, 500.0), 20.0);
        assert!(per_second(10, 0.0).is_nan());
    }
}
