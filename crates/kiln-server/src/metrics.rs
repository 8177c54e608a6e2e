//! Counters and histograms, written out in Prometheus' text format by hand
//! (a few dozen lines; no registry crate needed).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::client_limit::ClientLimiter;
use crate::pool::ModelPool;

/// A histogram with fixed upper bounds (seconds).
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    counts: Mutex<(Vec<u64>, f64, u64)>,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Self {
        Self { bounds, counts: Mutex::new((vec![0; bounds.len()], 0.0, 0)) }
    }

    /// Records one observation.
    pub fn observe(&self, v: f64) {
        if let Ok(mut g) = self.counts.lock() {
            if let Some(i) = self.bounds.iter().position(|&b| v <= b) {
                g.0[i] += 1;
            }
            g.1 += v;
            g.2 += 1;
        }
    }

    fn write(&self, out: &mut String, name: &str, help: &str) {
        let Ok(g) = self.counts.lock() else { return };
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut cum = 0;
        for (b, c) in self.bounds.iter().zip(&g.0) {
            cum += c;
            let _ = writeln!(out, "{name}_bucket{{le=\"{b}\"}} {cum}");
        }
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}\n{name}_sum {}\n{name}_count {}", g.2, g.1, g.2);
    }
}

const TTFT_BOUNDS: &[f64] = &[0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];
const ITL_BOUNDS: &[f64] = &[0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0];

/// Everything `/metrics` reports besides live engine state.
#[derive(Debug)]
pub struct Metrics {
    requests: Mutex<BTreeMap<(String, u16), u64>>,
    /// Prompt tokens received.
    pub prompt_tokens: AtomicU64,
    /// Tokens generated.
    pub generated_tokens: AtomicU64,
    /// Prompt tokens served from the prefix cache.
    pub cached_tokens: AtomicU64,
    /// Generations cancelled because the client went away.
    pub cancelled: AtomicU64,
    /// Time to first token.
    pub ttft: Histogram,
    /// Time between tokens.
    pub itl: Histogram,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            requests: Mutex::new(BTreeMap::new()),
            prompt_tokens: AtomicU64::new(0),
            generated_tokens: AtomicU64::new(0),
            cached_tokens: AtomicU64::new(0),
            cancelled: AtomicU64::new(0),
            ttft: Histogram::new(TTFT_BOUNDS),
            itl: Histogram::new(ITL_BOUNDS),
        }
    }
}

fn counter(out: &mut String, name: &str, help: &str, v: u64) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}");
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

impl Metrics {
    /// Counts a finished HTTP request.
    pub fn record_request(&self, route: &str, status: u16) {
        if let Ok(mut m) = self.requests.lock() {
            *m.entry((route.to_string(), status)).or_default() += 1;
        }
    }

    /// The Prometheus text exposition.
    pub fn render(&self, pool: &ModelPool, clients: Option<&ClientLimiter>) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# HELP kiln_requests_total HTTP requests by route and status.\n# TYPE kiln_requests_total counter"
        );
        if let Ok(m) = self.requests.lock() {
            for ((route, status), n) in m.iter() {
                let _ = writeln!(out, "kiln_requests_total{{route=\"{}\",status=\"{status}\"}} {n}", escape(route));
            }
        }
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        counter(&mut out, "kiln_prompt_tokens_total", "Prompt tokens received.", get(&self.prompt_tokens));
        counter(&mut out, "kiln_generated_tokens_total", "Tokens generated.", get(&self.generated_tokens));
        counter(
            &mut out,
            "kiln_prefix_cache_hit_tokens_total",
            "Prompt tokens reused from the prefix cache.",
            get(&self.cached_tokens),
        );
        counter(
            &mut out,
            "kiln_cancelled_total",
            "Generations cancelled by a client disconnect.",
            get(&self.cancelled),
        );
        if let Some(c) = clients {
            counter(
                &mut out,
                "kiln_client_limit_rejected_total",
                "Generation requests answered 429 by the per-client limit.",
                c.rejected(),
            );
            let _ = writeln!(
                out,
                "# HELP kiln_client_requests_active Generation requests in progress under the per-client limit.\n\
                 # TYPE kiln_client_requests_active gauge\nkiln_client_requests_active {}\n\
                 # HELP kiln_clients_active Clients with a generation request in progress.\n\
                 # TYPE kiln_clients_active gauge\nkiln_clients_active {}",
                c.active_requests(),
                c.active_clients()
            );
        }
        self.ttft.write(&mut out, "kiln_time_to_first_token_seconds", "Time from request to first token.");
        self.itl.write(&mut out, "kiln_inter_token_latency_seconds", "Time between streamed tokens.");
        let loaded = pool.loaded();
        let _ = writeln!(
            out,
            "# HELP kiln_models_loaded Models loaded.\n# TYPE kiln_models_loaded gauge\nkiln_models_loaded {}",
            loaded.len()
        );
        // Per loaded model, from one snapshot of its engine's counters.
        type Get = fn(&kiln_engine::EngineStats, &crate::pool::LoadedModel) -> f64;
        let per_model: [(&str, &str, &str, Get); 14] = [
            ("kiln_queue_waiting", "gauge", "Requests waiting in the engine queue.", |s, _| s.waiting as f64),
            ("kiln_queue_running", "gauge", "Requests running in the engine.", |s, _| s.running as f64),
            ("kiln_requests_in_flight", "gauge", "Requests admitted by the server (running + queued).", |_, m| {
                m.in_flight() as f64
            }),
            ("kiln_kv_blocks_used", "gauge", "KV blocks referenced by running requests.", |s, _| {
                s.kv_blocks_used as f64
            }),
            ("kiln_kv_blocks_free", "gauge", "KV blocks free (including evictable cached blocks).", |s, _| {
                s.kv_blocks_free as f64
            }),
            (
                "kiln_preemptions_total",
                "counter",
                "Sequences preempted because KV blocks ran out (recomputed later); per loaded model.",
                |s, _| s.preemptions as f64,
            ),
            ("kiln_engine_steps_total", "counter", "Engine forward passes; per loaded model.", |s, _| s.steps as f64),
            (
                "kiln_engine_step_tokens_total",
                "counter",
                "Tokens computed by engine forward passes; per loaded model.",
                |s, _| s.step_tokens as f64,
            ),
            (
                "kiln_kv_tier_saved_blocks_total",
                "counter",
                "KV blocks copied to the host tier on eviction; per loaded model.",
                |s, _| s.kv_tier_saved_blocks as f64,
            ),
            (
                "kiln_kv_tier_restored_blocks_total",
                "counter",
                "KV blocks copied back from the host tier; per loaded model.",
                |s, _| s.kv_tier_restored_blocks as f64,
            ),
            (
                "kiln_kv_tier_copy_seconds_total",
                "counter",
                "Time spent copying KV blocks to and from the host tier; per loaded model.",
                |s, _| s.kv_tier_copy_ms / 1e3,
            ),
            (
                "kiln_draft_proposed_tokens_total",
                "counter",
                "Tokens proposed by speculative decoding; per loaded model.",
                |s, _| s.draft_proposed as f64,
            ),
            (
                "kiln_draft_accepted_tokens_total",
                "counter",
                "Proposed tokens kept (the model agreed); per loaded model.",
                |s, _| s.draft_accepted as f64,
            ),
            (
                "kiln_next_turn_prefill_tokens_total",
                "counter",
                "Tokens of the chat template's next-turn opening computed after answers ended; per loaded model.",
                |s, _| s.next_turn_tokens as f64,
            ),
        ];
        let snapshots: Vec<_> = loaded.iter().map(|m| (m.stats(), m)).collect();
        for (name, kind, help, get) in per_model {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for (s, m) in &snapshots {
                let _ = writeln!(out, "{name}{{model=\"{}\"}} {}", escape(&m.entry.name), get(s, m));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_is_cumulative() {
        let h = Histogram::new(&[1.0, 2.0]);
        h.observe(0.5);
        h.observe(1.5);
        h.observe(5.0);
        let mut s = String::new();
        h.write(&mut s, "x", "help");
        assert!(s.contains("x_bucket{le=\"1\"} 1\n"), "{s}");
        assert!(s.contains("x_bucket{le=\"2\"} 2\n"), "{s}");
        assert!(s.contains("x_bucket{le=\"+Inf\"} 3\n"), "{s}");
        assert!(s.contains("x_count 3"), "{s}");
    }
}
