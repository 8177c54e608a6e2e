//! `kiln bench --lora`: the adapters' load time, and each configuration's
//! numbers with the adapters next to the base model's.

use std::time::Instant;

use anyhow::{Context, Result};
use kiln_engine::{EngineHandle, LoraRequest};

use super::engine::ConfigResult;

/// The loaded adapters and how long each load took.
pub(crate) struct BenchLoras {
    /// What requests name, in `--lora` order.
    pub(crate) adapters: Vec<LoraRequest>,
    /// Load time of each, ms (read, checked, attached).
    load_ms: Vec<f64>,
    /// Rank of each.
    ranks: Vec<usize>,
}

/// Registers every `PATH[:SCALE]` as `bench-K`, timing each.
pub(crate) fn load(h: &EngineHandle, specs: &[String]) -> Result<BenchLoras> {
    let mut out = BenchLoras { adapters: Vec::new(), load_ms: Vec::new(), ranks: Vec::new() };
    for (k, s) in specs.iter().enumerate() {
        let (path, scale) = kiln_engine::lora::parse_path_scale(s);
        let name = format!("bench-{k}");
        let t0 = Instant::now();
        let info = h.load_lora(&name, &path).with_context(|| format!("loading the LoRA adapter {}", path.display()))?;
        out.load_ms.push(t0.elapsed().as_secs_f64() * 1e3);
        out.ranks.push(info.rank);
        out.adapters.push(LoraRequest { name, scale });
    }
    Ok(out)
}

/// Base vs adapters per configuration, and the load times.
pub(crate) fn summary(l: &BenchLoras, base: &[ConfigResult], with: &[ConfigResult]) -> String {
    let mut loads = l.load_ms.clone();
    loads.sort_by(f64::total_cmp);
    let mut out = format!(
        "\nLoRA: {} adapter(s) of rank {:?}; load time median {:.1} ms (max {:.1} ms)\n",
        l.adapters.len(),
        l.ranks,
        loads.get(loads.len() / 2).copied().unwrap_or(0.0),
        loads.last().copied().unwrap_or(0.0)
    );
    out.push_str(&format!(
        "{:>6} {:>5} | {:>18} | {:>18} | {:>9} | {:>14} | {:>9}\n",
        "prompt", "gen", "decode tok/s base", "with adapters", "overhead", "TTFT ms base/lo", "overhead"
    ));
    for (b, w) in base.iter().zip(with) {
        let over = |base: f64, with: f64, higher_better: bool| {
            let r = if higher_better { base / with } else { with / base };
            format!("{:+.1}%", (r - 1.0) * 100.0)
        };
        out.push_str(&format!(
            "{:>6} {:>5} | {:>18.1} | {:>18.1} | {:>9} | {:>6.1}/{:<7.1} | {:>9}\n",
            b.shape.prompt,
            b.shape.gen,
            b.decode_tok_s.p50,
            w.decode_tok_s.p50,
            over(b.decode_tok_s.p50, w.decode_tok_s.p50, true),
            b.ttft_ms.p50,
            w.ttft_ms.p50,
            over(b.ttft_ms.p50, w.ttft_ms.p50, false),
        ));
    }
    out
}
