//! Live engine counters (for `/metrics`, `kiln bench` and tests).

use std::sync::{Arc, Mutex};

use kiln_core::Timings;

/// A snapshot of the engine's counters.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct EngineStats {
    /// Requests waiting for admission.
    pub waiting: usize,
    /// Requests being served.
    pub running: usize,
    /// Free KV blocks (including evictable cached ones).
    pub kv_blocks_free: usize,
    /// KV blocks referenced by running requests.
    pub kv_blocks_used: usize,
    /// Forward passes run.
    pub steps: u64,
    /// Tokens computed by forward passes.
    pub step_tokens: u64,
    /// Requests finished.
    pub finished: u64,
    /// Prompt tokens served from the prefix cache.
    pub cached_tokens: u64,
    /// Prompt tokens.
    pub prompt_tokens: u64,
    /// Generated tokens.
    pub generated_tokens: u64,
    /// Sequences preempted (KV blocks ran out; recomputed later).
    pub preemptions: u64,
    /// KV blocks copied into the host tier on eviction.
    pub kv_tier_saved_blocks: u64,
    /// KV blocks copied back from the host tier on a prefix hit.
    pub kv_tier_restored_blocks: u64,
    /// Time spent copying between the KV cache and the host tier, ms.
    pub kv_tier_copy_ms: f64,
    /// Chat answers after which the next turn's opening was prefilled.
    pub next_turn_prefills: u64,
    /// Tokens proposed by speculative decoding.
    #[serde(default)]
    pub draft_proposed: u64,
    /// Of those, tokens kept.
    #[serde(default)]
    pub draft_accepted: u64,
    /// Tokens those prefills computed.
    pub next_turn_tokens: u64,
    /// Segments computed alone for the segment cache.
    #[serde(default)]
    pub segment_jobs: u64,
    /// Segment tokens whose K/V was copied (keys re-rotated) into requests.
    #[serde(default)]
    pub segment_tokens_copied: u64,
    /// Time spent on those copies, ms.
    #[serde(default)]
    pub segment_copy_ms: f64,
}

/// Shared, cheaply cloned counters.
#[derive(Debug, Clone, Default)]
pub struct EngineStatsCell(Arc<Mutex<EngineStats>>);

impl EngineStatsCell {
    fn with(&self, f: impl FnOnce(&mut EngineStats)) {
        if let Ok(mut g) = self.0.lock() {
            f(&mut g);
        }
    }
    pub(crate) fn record_step(&self, tokens: usize, _ms: f64) {
        self.with(|s| {
            s.steps += 1;
            s.step_tokens += tokens as u64;
        });
    }
    pub(crate) fn record_draft(&self, proposed: usize, accepted: usize) {
        self.with(|s| {
            s.draft_proposed += proposed as u64;
            s.draft_accepted += accepted as u64;
        });
    }
    pub(crate) fn record_tier(&self, saved: usize, loaded: usize, ms: f64) {
        self.with(|s| {
            s.kv_tier_copy_ms += ms;
            s.kv_tier_saved_blocks += saved as u64;
            s.kv_tier_restored_blocks += loaded as u64;
        });
    }
    pub(crate) fn record_next_turn_prefill(&self, tokens: usize) {
        self.with(|s| {
            s.next_turn_prefills += 1;
            s.next_turn_tokens += tokens as u64;
        });
    }
    pub(crate) fn record_segment_copies(&self, tokens: usize, ms: f64) {
        self.with(|s| {
            s.segment_tokens_copied += tokens as u64;
            s.segment_copy_ms += ms;
        });
    }
    pub(crate) fn record_segment_job(&self) {
        self.with(|s| s.segment_jobs += 1);
    }
    pub(crate) fn record_preemptions(&self, n: usize) {
        self.with(|s| s.preemptions += n as u64);
    }
    pub(crate) fn record_finish(&self, t: &Timings) {
        self.with(|s| {
            s.finished += 1;
            s.cached_tokens += t.cached_tokens as u64;
            s.prompt_tokens += t.prompt_tokens as u64;
            s.generated_tokens += t.decode_tokens as u64;
        });
    }
    pub(crate) fn set_queue(&self, waiting: usize, running: usize, free: usize, used: usize) {
        self.with(|s| {
            s.waiting = waiting;
            s.running = running;
            s.kv_blocks_free = free;
            s.kv_blocks_used = used;
        });
    }
    /// Replaces every value (counters of a worker process).
    pub(crate) fn set(&self, v: EngineStats) {
        self.with(|s| *s = v);
    }
    /// The current values.
    pub fn snapshot(&self) -> EngineStats {
        self.0.lock().map(|g| g.clone()).unwrap_or_default()
    }
}
