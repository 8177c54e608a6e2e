//! Context shift (`EngineConfig::context_shift`, docs/long-context.md):
//! when a sequence's tokens reach the context, its first `keep` tokens
//! stay, half of the computed tokens after them are dropped, and the rest
//! move down with their keys re-rotated (`kiln_core::sched::Scheduler::shift`
//! plans the copies into fresh blocks; the engine performs them with
//! `Backend::kv_shift` before the next forward pass, as the segment
//! cache's; without free blocks the kept tokens are computed again).
//! Generation then goes on; `max_tokens` still bounds it.

use std::collections::HashMap;

use kiln_core::FinishReason;

use crate::engine_loop::EngineLoop;

/// Per-sequence context-shift state (only with context shift on).
#[derive(Debug, Default)]
pub(crate) struct ContextShift {
    /// Tokens kept at the head, by sequence.
    keep: HashMap<u64, usize>,
    /// Sequences shifted at least once.
    shifted: HashMap<u64, usize>,
}

impl ContextShift {
    /// Notes a new sequence that keeps its first `keep` tokens.
    pub(crate) fn add(&mut self, id: u64, keep: usize) {
        self.keep.insert(id, keep);
    }

    /// Forgets a sequence; returns how many times it was shifted.
    pub(crate) fn remove(&mut self, id: u64) -> usize {
        self.keep.remove(&id);
        self.shifted.remove(&id).unwrap_or(0)
    }
}

/// Tokens to drop when `computed` tokens are computed and `keep` are kept:
/// half of the rest, rounded down (as llama.cpp's server and Ollama do).
pub(crate) fn discard_of(computed: usize, keep: usize) -> usize {
    computed.saturating_sub(keep) / 2
}

impl<B: kiln_backend::Backend> EngineLoop<B> {
    /// Shifts sequence `id` when its tokens fill the context (called after
    /// each sampled token with context shift on; without free blocks for
    /// the moves the scheduler requeues it to recompute its kept tokens);
    /// ends it with `ContextLength` when nothing is left to drop.
    pub(crate) fn shift_if_full(&mut self, id: u64) {
        let Some(total) = self.sched.tokens(id).map(<[_]>::len) else { return };
        if total < self.max_ctx || self.seqs.get(&id).is_none_or(|s| s.finished.is_some()) {
            return;
        }
        let computed = self.sched.num_computed(id).unwrap_or(0);
        // The last computed token stays: at least one is dropped.
        let Some(cs) = self.ctx_shift.as_mut() else { return };
        let keep = cs.keep.get(&id).copied().unwrap_or(0).min(computed.saturating_sub(2));
        let discard = discard_of(computed, keep);
        let res = if discard == 0 {
            Err("nothing to drop".to_string())
        } else {
            self.sched.shift(id, keep, discard).map_err(|e| e.to_string())
        };
        match res {
            Ok(left) if left <= self.max_ctx => {
                tracing::info!(
                    seq = id,
                    keep,
                    discard,
                    tokens = left,
                    "context shift: dropped {discard} tokens after the first {keep}"
                );
                if let Some(cs) = self.ctx_shift.as_mut() {
                    *cs.shifted.entry(id).or_default() += 1;
                }
                if let Some(seq) = self.seqs.get_mut(&id) {
                    seq.timings.context_shifts += 1;
                    // The draft model's cache held the old positions.
                    if let Some(d) = seq.drafter.as_mut() {
                        d.model_pos = 0;
                    }
                }
            }
            Ok(left) => {
                tracing::warn!(seq = id, "context shift left {left} tokens: more than the context");
                self.finish(id, FinishReason::ContextLength);
            }
            Err(e) => {
                tracing::warn!(seq = id, keep, discard, "no context shift ({e}): the answer ends at the context");
                self.finish(id, FinishReason::ContextLength);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_of_what_follows_the_head_is_dropped() {
        assert_eq!(discard_of(63, 10), 26);
        assert_eq!(discard_of(64, 0), 32);
        assert_eq!(discard_of(5, 5), 0);
        assert_eq!(discard_of(3, 9), 0);
    }
}
