//! Benchmark results as records: JSON, CSV and a terminal table.
//!
//! One record per configuration. JSON and CSV come from the same ordered
//! field list, so their columns always agree. Medians carry the bare metric
//! name (`decode_tok_s`); spreads carry suffixes (`decode_tok_s_p10`,
//! `decode_tok_s_p90`). Missing values are `null` in JSON and empty in CSV.

use serde_json::{json, Map, Value};

use super::bandwidth::{decode_limit_tok_s, Bandwidth};
use super::engine::ConfigResult;
use super::system::Machine;

/// What is common to every record of a run.
#[derive(Debug, Clone)]
pub(crate) struct RunMeta {
    /// Model reference as given.
    pub(crate) model: String,
    /// Backend name (`kiln-cpu`).
    pub(crate) backend: String,
    /// Kernel threads.
    pub(crate) threads: usize,
    /// Whether they were pinned to their CPUs.
    pub(crate) pinned_threads: bool,
    /// Prompt attention kernel: `bf16` or `f32` (`-` on a GPU).
    pub(crate) attention: &'static str,
    /// CPU kernels' instruction-set level (`scalar`, `avx2`, `avx2-vnni`,
    /// `avx512`; `-` on a GPU).
    pub(crate) cpu_isa: &'static str,
    /// The KV cache's types, `K/V` (`bf16/bf16`, `q8_0/q8_0`, ...).
    pub(crate) kv_cache: String,
    /// Prefill chunk.
    pub(crate) prefill_chunk: usize,
    /// Sampling seed and prompt seed.
    pub(crate) seed: u64,
    /// Requests run at once in each iteration (`--streams`); every number
    /// is per stream.
    pub(crate) streams: usize,
    /// Weight bytes read per decoded token.
    pub(crate) weight_bytes_per_token: usize,
    /// KV bytes read per token of context per decoded token.
    pub(crate) kv_bytes_per_token: usize,
    /// Matmul FLOPs per token (2 x matmul parameters), for prefill GFLOP/s.
    pub(crate) flops_per_token: f64,
    /// The machine.
    pub(crate) machine: Machine,
    /// Measured memory bandwidth, when measured.
    pub(crate) bandwidth: Option<Bandwidth>,
}

/// The decode limit (tok/s) of a configuration, when bandwidth is known.
pub(crate) fn limit_tok_s(meta: &RunMeta, r: &ConfigResult) -> Option<f64> {
    let bw = meta.bandwidth?;
    Some(decode_limit_tok_s(bw.best_gb_s(), meta.weight_bytes_per_token, meta.kv_bytes_per_token, r.decode_context()))
}

fn num(x: f64) -> Value {
    if x.is_finite() {
        json!(x)
    } else {
        Value::Null
    }
}

/// The ordered fields of one record.
pub(crate) fn fields(meta: &RunMeta, r: &ConfigResult) -> Vec<(&'static str, Value)> {
    let limit = limit_tok_s(meta, r);
    let s = &r.shape;
    vec![
        ("model", json!(meta.model)),
        ("backend", json!(meta.backend)),
        ("kind", json!(if s.sweep { "ctx_sweep" } else { "prompt" })),
        ("threads", json!(meta.threads)),
        ("pinned_threads", json!(meta.pinned_threads)),
        ("attention", json!(meta.attention)),
        ("cpu_isa", json!(meta.cpu_isa)),
        ("kv_cache", json!(meta.kv_cache)),
        ("prefill_chunk", json!(meta.prefill_chunk)),
        ("seed", json!(meta.seed)),
        ("streams", json!(meta.streams)),
        ("prompt_tokens", json!(s.prompt)),
        ("gen_tokens", json!(s.gen)),
        ("iterations", json!(s.iterations)),
        ("cached_tokens_max", json!(r.cached_tokens_max)),
        ("ttft_ms", num(r.ttft_ms.p50)),
        ("ttft_ms_p10", num(r.ttft_ms.p10)),
        ("ttft_ms_p90", num(r.ttft_ms.p90)),
        ("prefill_tok_s", num(r.prefill_tok_s.p50)),
        ("prefill_tok_s_p10", num(r.prefill_tok_s.p10)),
        ("prefill_tok_s_p90", num(r.prefill_tok_s.p90)),
        ("decode_tok_s", num(r.decode_tok_s.p50)),
        ("decode_tok_s_p10", num(r.decode_tok_s.p10)),
        ("decode_tok_s_p90", num(r.decode_tok_s.p90)),
        ("decode_ms_per_token", num(r.decode_ms_per_token.p50)),
        ("decode_context_tokens", num(r.decode_context())),
        ("itl_ms_p50", num(r.itl_ms.p50)),
        ("itl_ms_p90", num(r.itl_ms.p90)),
        ("itl_ms_p99", num(r.itl_ms.p99)),
        ("peak_rss_mib", r.peak_rss_mib.map_or(Value::Null, num)),
        ("prefill_gflop_s", num(r.prefill_tok_s.p50 * meta.flops_per_token / 1e9)),
        ("bandwidth_gb_s", meta.bandwidth.map_or(Value::Null, |b| num(b.best_gb_s()))),
        ("decode_limit_tok_s", limit.map_or(Value::Null, num)),
        ("decode_fraction_of_limit", limit.map_or(Value::Null, |l| num(r.decode_tok_s.p50 / l))),
        ("load_avg_1m", num(meta.machine.load_avg[0])),
    ]
}

/// All records as a JSON array (one object per configuration).
pub(crate) fn to_json(meta: &RunMeta, results: &[ConfigResult]) -> Value {
    Value::Array(
        results
            .iter()
            .map(|r| Value::Object(fields(meta, r).into_iter().map(|(k, v)| (k.to_string(), v)).collect::<Map<_, _>>()))
            .collect(),
    )
}

fn csv_cell(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) if s.contains([',', '"', '\n', '\r']) => format!("\"{}\"", s.replace('"', "\"\"")),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// All records as CSV with a header line.
pub(crate) fn to_csv(meta: &RunMeta, results: &[ConfigResult]) -> String {
    let mut out = String::new();
    let mut header_done = false;
    for r in results {
        let f = fields(meta, r);
        if !header_done {
            out.push_str(&f.iter().map(|(k, _)| *k).collect::<Vec<_>>().join(","));
            out.push('\n');
            header_done = true;
        }
        out.push_str(&f.iter().map(|(_, v)| csv_cell(v)).collect::<Vec<_>>().join(","));
        out.push('\n');
    }
    out
}

fn f1(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.1}")
    } else {
        "-".into()
    }
}

/// The human-readable report.
pub(crate) fn table(meta: &RunMeta, results: &[ConfigResult]) -> String {
    let m = &meta.machine;
    let mut out = format!(
        "model {} | backend {} | {} thread{}{} | {} kernels | {} attention | KV cache {} | prefill chunk {} | seed {}\nmachine: {} ({} cores), load average {:.2} {:.2} {:.2}\n",
        meta.model,
        meta.backend,
        meta.threads,
        if meta.threads == 1 { "" } else { "s" },
        if meta.pinned_threads { " (pinned)" } else { "" },
        meta.cpu_isa,
        meta.attention,
        meta.kv_cache,
        meta.prefill_chunk,
        meta.seed,
        m.cpu,
        m.cores,
        m.load_avg[0],
        m.load_avg[1],
        m.load_avg[2]
    );
    if let Some(b) = meta.bandwidth {
        out.push_str(&format!(
            "memory bandwidth: copy {:.1} GB/s, read {:.1} GB/s ({} threads); bytes/token: weights {:.1} MB + KV {:.1} kB per context token\n",
            b.copy_gb_s, b.read_gb_s, b.threads, meta.weight_bytes_per_token as f64 / 1e6, meta.kv_bytes_per_token as f64 / 1e3
        ));
    }
    if meta.streams > 1 {
        out.push_str(&format!("{} concurrent streams per iteration; numbers are per stream\n", meta.streams));
    }
    out.push_str("medians over iterations, [p10-p90]; decode excludes the first token\n");
    out.push_str(&format!(
        "{:>6} {:>5} {:>6} | {:>22} | {:>22} | {:>22} | {:>7} | {:>17} | {:>8} {:>6} | {:>7}\n",
        "prompt",
        "gen",
        "cached",
        "TTFT ms",
        "prefill tok/s",
        "decode tok/s",
        "ms/tok",
        "ITL p50/p90/p99",
        "limit",
        "of lim",
        "RSS MiB"
    ));
    for r in results {
        let lim = limit_tok_s(meta, r);
        let tag = if r.shape.sweep { "*" } else { "" };
        out.push_str(&format!(
            "{:>6} {:>5} {:>6} | {:>22} | {:>22} | {:>22} | {:>7} | {:>17} | {:>8} {:>6} | {:>7}\n",
            format!("{tag}{}", r.shape.prompt),
            r.shape.gen,
            r.cached_tokens_max,
            format!("{} [{}-{}]", f1(r.ttft_ms.p50), f1(r.ttft_ms.p10), f1(r.ttft_ms.p90)),
            format!("{} [{}-{}]", f1(r.prefill_tok_s.p50), f1(r.prefill_tok_s.p10), f1(r.prefill_tok_s.p90)),
            format!("{} [{}-{}]", f1(r.decode_tok_s.p50), f1(r.decode_tok_s.p10), f1(r.decode_tok_s.p90)),
            format!("{:.2}", r.decode_ms_per_token.p50),
            format!("{}/{}/{}", f1(r.itl_ms.p50), f1(r.itl_ms.p90), f1(r.itl_ms.p99)),
            lim.map_or("-".into(), f1),
            lim.map_or("-".into(), |l| format!("{:.0}%", 100.0 * r.decode_tok_s.p50 / l)),
            r.peak_rss_mib.map_or("-".into(), |x| format!("{x:.0}")),
        ));
    }
    for r in results.iter().filter(|r| r.decode_tok_s.spread() > 0.2) {
        out.push_str(&format!(
            "note: decode at prompt {} is noisy (p10-p90 spread {:.0}% of the median)\n",
            r.shape.prompt,
            100.0 * r.decode_tok_s.spread()
        ));
    }
    for r in results.iter().filter(|r| r.gen_tokens_min < r.shape.gen) {
        out.push_str(&format!(
            "warning: at prompt {} a request generated only {} of {} tokens\n",
            r.shape.prompt, r.gen_tokens_min, r.shape.gen
        ));
    }
    if results.iter().any(|r| r.shape.sweep) {
        out.push_str("* context sweep point: decode ms/token at that depth\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::engine::{Sample, Shape};

    fn meta() -> RunMeta {
        RunMeta {
            model: "tiny, \"quoted\"".into(),
            backend: "kiln-cpu".into(),
            threads: 2,
            pinned_threads: true,
            attention: "bf16",
            cpu_isa: "avx512",
            kv_cache: "bf16/bf16".into(),
            prefill_chunk: 512,
            seed: 42,
            streams: 1,
            weight_bytes_per_token: 1_000_000,
            kv_bytes_per_token: 1000,
            flops_per_token: 2e6,
            machine: Machine { cpu: "test cpu".into(), cores: 2, load_avg: [1.5, 1.0, 0.5] },
            bandwidth: Some(Bandwidth { copy_gb_s: 10.0, read_gb_s: 20.0, threads: 2, buffer_mib: 8 }),
        }
    }

    fn result(prompt: usize) -> ConfigResult {
        let s = Sample {
            ttft_ms: 50.0,
            prefill_tok_s: 500.0,
            decode_tok_s: 100.0,
            itl_ms: vec![10.0],
            cached_tokens: 0,
            gen_tokens: 8,
        };
        ConfigResult::from_samples(Shape { prompt, gen: 8, iterations: 1, sweep: false }, &[s.clone(), s], Some(64.0))
    }

    #[test]
    fn json_has_required_keys_and_values() {
        let v = to_json(&meta(), &[result(16), result(32)]);
        let arr = v.as_array().cloned().unwrap_or_default();
        assert_eq!(arr.len(), 2);
        let o = &arr[0];
        for k in [
            "model",
            "backend",
            "threads",
            "pinned_threads",
            "attention",
            "cpu_isa",
            "kv_cache",
            "prompt_tokens",
            "gen_tokens",
            "iterations",
            "ttft_ms",
            "ttft_ms_p10",
            "ttft_ms_p90",
            "prefill_tok_s",
            "prefill_tok_s_p10",
            "prefill_tok_s_p90",
            "decode_tok_s",
            "decode_tok_s_p10",
            "decode_tok_s_p90",
        ] {
            assert!(o.get(k).is_some(), "missing {k}");
        }
        assert_eq!(o["prompt_tokens"], json!(16));
        assert_eq!(arr[1]["prompt_tokens"], json!(32));
        assert_eq!(o["decode_tok_s"], json!(100.0));
        assert_eq!(o["backend"], json!("kiln-cpu"));
        // limit = 20 GB/s / (1 MB + 1 kB x (16 + 4)) ; fraction = 100 / limit
        let limit = 20e9 / (1_000_000.0 + 1000.0 * 20.0);
        assert!((o["decode_limit_tok_s"].as_f64().unwrap_or(0.0) - limit).abs() < 1e-6);
        assert!((o["decode_fraction_of_limit"].as_f64().unwrap_or(0.0) - 100.0 / limit).abs() < 1e-9);
        assert_eq!(o["prefill_gflop_s"], json!(1.0));
    }

    #[test]
    fn nan_is_null_in_json_and_empty_in_csv() {
        let mut r = result(16);
        r.peak_rss_mib = None;
        r.ttft_ms.p50 = f64::NAN;
        let v = to_json(&meta(), std::slice::from_ref(&r));
        assert_eq!(v[0]["ttft_ms"], Value::Null);
        assert_eq!(v[0]["peak_rss_mib"], Value::Null);
        let csv = to_csv(&meta(), &[r]);
        let lines: Vec<&str> = csv.lines().collect();
        let header: Vec<&str> = lines[0].split(',').collect();
        let ttft_col = header.iter().position(|h| *h == "ttft_ms").unwrap_or(usize::MAX);
        // The model cell is quoted (it holds a comma and quotes); split after it.
        assert!(lines[1].starts_with("\"tiny, \"\"quoted\"\"\",kiln-cpu,"), "{}", lines[1]);
        let rest: Vec<&str> = lines[1].split_once("\",").map_or("", |x| x.1).split(',').collect();
        assert_eq!(rest[ttft_col - 1], "");
    }

    #[test]
    fn csv_header_matches_json_keys_and_rows() {
        let results = [result(16), result(32)];
        let csv = to_csv(&meta(), &results);
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 3);
        let header: Vec<&str> = lines[0].split(',').collect();
        let keys: Vec<&str> = fields(&meta(), &results[0]).iter().map(|(k, _)| *k).collect();
        assert_eq!(header, keys);
        assert!(to_csv(&meta(), &[]).is_empty());
    }

    #[test]
    fn table_mentions_load_and_configs() {
        let t = table(&meta(), &[result(16)]);
        assert!(t.contains("load average 1.50"), "{t}");
        assert!(t.contains("copy 10.0 GB/s"), "{t}");
        assert!(t.contains("100.0 [100.0-100.0]"), "{t}");
    }
}
