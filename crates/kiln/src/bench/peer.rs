//! A peer's numbers (llama-bench `-o json`) and kiln/peer ratios.
//!
//! llama-bench reports `ppN` tests (prefill of N tokens, `n_gen = 0`) and
//! `tgN` tests (N generated tokens, `n_prompt = 0`), optionally at a depth
//! (`n_depth` tokens already in the context). kiln's configuration with
//! prompt length P compares with the peer's `ppP` at depth 0 (prefill) and
//! its `tg` at depth P (decode at the same context). The peer's TTFT is
//! estimated as prefill time plus one decode step.

use std::path::Path;

use anyhow::{Context, Result};
use serde::Deserialize;

use super::engine::ConfigResult;

/// One llama-bench test result.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct PeerPoint {
    /// Prompt tokens (prefill tests).
    #[serde(default)]
    pub(crate) n_prompt: usize,
    /// Generated tokens (decode tests).
    #[serde(default)]
    pub(crate) n_gen: usize,
    /// Tokens already in the context.
    #[serde(default)]
    pub(crate) n_depth: usize,
    /// Mean tokens per second.
    pub(crate) avg_ts: f64,
    /// Standard deviation of tokens per second.
    #[serde(default)]
    pub(crate) stddev_ts: f64,
    /// Threads.
    #[serde(default)]
    pub(crate) n_threads: usize,
}

/// A peer run.
#[derive(Debug, Clone)]
pub(crate) struct Peer {
    /// Name drawn on plots.
    pub(crate) name: String,
    /// Its tests.
    pub(crate) points: Vec<PeerPoint>,
}

impl Peer {
    /// Parses llama-bench JSON.
    pub(crate) fn parse(name: &str, json: &str) -> Result<Self> {
        let points: Vec<PeerPoint> =
            serde_json::from_str(json).context("parsing llama-bench JSON (an array of test objects)")?;
        Ok(Self { name: name.into(), points })
    }
    /// Prefill tok/s for `n` prompt tokens at depth 0.
    pub(crate) fn prefill(&self, n: usize) -> Option<f64> {
        self.points.iter().find(|p| p.n_gen == 0 && p.n_prompt == n && p.n_depth == 0).map(|p| p.avg_ts)
    }
    /// Decode tok/s at `depth` tokens of context.
    pub(crate) fn decode(&self, depth: usize) -> Option<f64> {
        self.points.iter().find(|p| p.n_prompt == 0 && p.n_gen > 0 && p.n_depth == depth).map(|p| p.avg_ts)
    }
    /// Estimated TTFT in ms for a prompt of `n` tokens.
    pub(crate) fn ttft_ms(&self, n: usize) -> Option<f64> {
        Some(n as f64 * 1e3 / self.prefill(n)? + 1e3 / self.decode(n).or_else(|| self.decode(0))?)
    }
    /// Decode points as (mean context during the test, ms/token).
    pub(crate) fn decode_curve(&self) -> Vec<(f64, f64)> {
        let mut v: Vec<(f64, f64)> = self
            .points
            .iter()
            .filter(|p| p.n_prompt == 0 && p.n_gen > 0 && p.avg_ts > 0.0)
            .map(|p| (p.n_depth as f64 + p.n_gen as f64 / 2.0, 1e3 / p.avg_ts))
            .collect();
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        v
    }
}

/// Loads llama-bench JSON from a file.
pub(crate) fn load(path: &Path) -> Result<Peer> {
    let s = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Peer::parse("llama.cpp", &s).with_context(|| format!("in {}", path.display()))
}

fn ratio(a: f64, b: Option<f64>) -> String {
    match b {
        Some(b) if b > 0.0 && a.is_finite() => format!("{:.2}", a / b),
        _ => "-".into(),
    }
}

/// kiln/peer ratios per configuration (throughput: > 1 means kiln is
/// faster; TTFT: < 1 means kiln is faster).
pub(crate) fn ratio_table(peer: &Peer, results: &[ConfigResult]) -> String {
    let mut out = format!("kiln / {} (tok/s ratios > 1 and TTFT ratios < 1 favour kiln)\n", peer.name);
    out.push_str(&format!(
        "{:>7} | {:>14} | {:>14} | {:>14}\n",
        "context", "prefill ratio", "decode ratio", "TTFT ratio"
    ));
    for r in results {
        let p = r.shape.prompt;
        let prefill = if r.shape.sweep { "-".into() } else { ratio(r.prefill_tok_s.p50, peer.prefill(p)) };
        let ttft = if r.shape.sweep { "-".into() } else { ratio(r.ttft_ms.p50, peer.ttft_ms(p)) };
        out.push_str(&format!(
            "{:>7} | {:>14} | {:>14} | {:>14}\n",
            p,
            prefill,
            ratio(r.decode_tok_s.p50, peer.decode(p)),
            ttft
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::engine::{Sample, Shape};

    const JSON: &str = r#"[
      {"build_commit":"x","n_threads":2,"n_prompt":128,"n_gen":0,"n_depth":0,"avg_ts":1000.0,"stddev_ts":10.0},
      {"n_threads":2,"n_prompt":0,"n_gen":128,"n_depth":0,"avg_ts":100.0,"stddev_ts":1.0},
      {"n_threads":2,"n_prompt":0,"n_gen":128,"n_depth":128,"avg_ts":80.0,"stddev_ts":1.0}
    ]"#;

    #[test]
    fn parses_and_looks_up() -> Result<()> {
        let p = Peer::parse("llama.cpp", JSON)?;
        assert_eq!(p.points.len(), 3);
        assert_eq!(p.prefill(128), Some(1000.0));
        assert_eq!(p.prefill(512), None);
        assert_eq!(p.decode(128), Some(80.0));
        // 128 tokens at 1000 tok/s + one token at 80 tok/s.
        assert!((p.ttft_ms(128).unwrap_or(0.0) - (128.0 + 12.5)).abs() < 1e-9);
        assert_eq!(p.decode_curve(), vec![(64.0, 10.0), (192.0, 12.5)]);
        assert!(Peer::parse("x", "{}").is_err());
        Ok(())
    }

    #[test]
    fn ratios() -> Result<()> {
        let p = Peer::parse("llama.cpp", JSON)?;
        let s = Sample {
            ttft_ms: 70.25,
            prefill_tok_s: 500.0,
            decode_tok_s: 160.0,
            itl_ms: vec![],
            cached_tokens: 0,
            gen_tokens: 8,
        };
        let r = ConfigResult::from_samples(Shape { prompt: 128, gen: 8, iterations: 1, sweep: false }, &[s], None);
        let t = ratio_table(&p, &[r]);
        let row = t.lines().nth(2).unwrap_or("");
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        assert_eq!(cells, vec!["128", "0.50", "2.00", "0.50"], "{t}");
        Ok(())
    }
}
