//! Segments: marked runs of a prompt (documents, tool descriptions) whose
//! KV is computed once alone, cached by content, and copied into any
//! sequence that contains them, at any position, instead of being computed
//! there (docs/segment-cache.md).
//!
//! A segment's KV is computed as a sequence of its own (its tokens from
//! position 0, under a cache namespace of its own): its blocks are then
//! ordinary prefix-cache blocks, evicted least recently used first and
//! moved to the host tier like any other. When a sequence that uses the
//! segment is admitted, the scheduler pins those blocks and plans, per
//! token past the segment's first `recompute` tokens, a copy of its K/V
//! into the sequence's slot with the key rotated by the position shift
//! ([`KvCopy`]). The copies of a segment are handed out in the step whose
//! prefill reaches it, before that step's forward pass; the step's tokens
//! of that sequence are then several contiguous runs (one [`Scheduled`]
//! each) with the copied tokens between them, all computed in one forward
//! pass: the text around the segments and their recomputed tokens cost one
//! step, not one per segment.
//!

use super::{Scheduled, Scheduler, StepPlan};
use crate::kv::{BlockId, SeqId};
use crate::types::TokenId;

/// A segment of a sequence's prompt: tokens `start..start + len` are the
/// segment's, computed apart under cache key `key` after the sequence's
/// first `context` tokens (its cached sequence is `tokens[..context]`
/// followed by the segment); the first `recompute` of them are computed in
/// the sequence anyway (they attend to what comes before the segment,
/// which restores part of what a segment computed apart misses), the rest
/// are copied when the segment is cached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SegmentUse {
    /// First token of the segment in the prompt.
    pub start: usize,
    /// Tokens of the segment.
    pub len: usize,
    /// Leading tokens computed in the sequence rather than copied.
    pub recompute: usize,
    /// Leading tokens of the sequence the segment was computed after (at
    /// most `start`; 0: alone, from position 0).
    pub context: usize,
    /// The segment cache's namespace (the extra key the segment was
    /// computed under).
    pub key: u64,
}

/// One token's K/V copied from one slot to another, the key rotated by
/// `shift` positions: a segment's cached token into a sequence (its
/// position in the sequence less its position in the segment), or a
/// sequence's own token moved down by a context shift (negative).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvCopy {
    /// Flat slot (`block * block_size + offset`) of the cached K/V.
    pub src: u32,
    /// Flat slot of the sequence's K/V.
    pub dst: u32,
    /// Positions to rotate the key by (negative: back).
    pub shift: i32,
}

/// A planned copy of a run of a segment's tokens into a sequence.
#[derive(Debug, Clone)]
pub(super) struct PendingCopy {
    /// First token in the sequence.
    pub(super) start: usize,
    /// Tokens copied.
    pub(super) len: usize,
    /// Position of the first copied token in the segment's cached
    /// sequence (its context, then the segment).
    pub(super) from: usize,
    /// The segment's blocks (pinned until the copy is handed out).
    pub(super) blocks: Vec<BlockId>,
}

/// What admission resolved for a sequence's segments.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SegmentCounts {
    /// Segment tokens whose K/V is copied from the segment cache.
    pub copied: usize,
    /// Segment tokens computed in the sequence (the recomputed first
    /// tokens, and segments not found in the cache).
    pub computed: usize,
}

impl Scheduler {
    /// Pins the cached segments of a sequence being admitted with
    /// `cached` tokens from the prefix cache and plans their copies.
    pub(super) fn resolve_segments(&mut self, id: SeqId, cached: usize) -> SegmentCounts {
        let mut counts = SegmentCounts::default();
        let Some(s) = self.seqs.get(&id) else { return counts };
        // The last prompt token is always computed (its logits are sampled).
        let end = s.tokens.len().saturating_sub(1);
        let uses = s.segments.clone();
        let mut copies = Vec::new();
        for u in uses {
            let seg_end = (u.start + u.len).min(end);
            let from = (u.start + u.recompute).max(cached);
            let mut copied = 0;
            if from < seg_end {
                let tokens = &self.seqs[&id].tokens;
                let cached_seq: Vec<TokenId> =
                    tokens[..u.context].iter().chain(&tokens[u.start..u.start + u.len]).copied().collect();
                if let Some(blocks) = self.kv.pin_segment(&cached_seq, u.key) {
                    let from_pos = u.context + from - u.start;
                    copies.push(PendingCopy { start: from, len: seg_end - from, from: from_pos, blocks });
                    copied = seg_end - from;
                }
            }
            counts.copied += copied;
            counts.computed += (u.start + u.len).saturating_sub(cached.max(u.start)).min(u.len) - copied;
        }
        if let Some(s) = self.seqs.get_mut(&id) {
            s.copies = copies.into();
        }
        counts
    }

    /// The runs of `id`'s tokens this step computes within `budget`, from
    /// its computed tokens on: where a planned copy starts, the run stops,
    /// the copy is skipped and the next run starts after it. Returns the
    /// runs (start, len) into `runs` and how many planned copies they
    /// pass. Nothing changes: [`Scheduler::take_runs`] hands them out.
    pub(super) fn plan_runs(&self, id: SeqId, budget: usize, runs: &mut Vec<(usize, usize)>) -> usize {
        runs.clear();
        let Some(s) = self.seqs.get(&id) else { return 0 };
        let (total, mut cursor, mut left, mut passed) = (s.tokens.len(), s.num_computed, budget, 0);
        while left > 0 && cursor < total {
            while let Some(c) = s.copies.get(passed).filter(|c| c.start == cursor) {
                cursor += c.len;
                passed += 1;
            }
            let limit = s.copies.get(passed).map_or(usize::MAX, |c| c.start - cursor);
            let n = (total - cursor).min(left).min(limit);
            if n == 0 {
                break;
            }
            runs.push((cursor, n));
            cursor += n;
            left -= n;
        }
        // A copy after the last run waits for the step that computes past it.
        while passed > 0 && runs.last().is_none_or(|&(st, n)| s.copies[passed - 1].start >= st + n) {
            passed -= 1;
        }
        passed
    }

    /// Hands out the first `passed` planned copies of `id` (they count as
    /// computed from now on; the source blocks are released after this
    /// step) and schedules `runs` ([`Scheduler::plan_runs`]), taking
    /// their tokens from `budget` and keeping the vector as scratch. All of a
    /// step's runs of one sequence are computed in one forward pass: the
    /// copies land before it, and every layer writes the K/V of all rows
    /// before any row attends, so a later run sees the earlier ones.
    pub(super) fn take_runs(
        &mut self,
        id: SeqId,
        passed: usize,
        runs: Vec<(usize, usize)>,
        plan: &mut StepPlan,
        budget: &mut usize,
    ) {
        let bs = self.kv.block_size();
        let table = self.kv.block_table(id).map(<[BlockId]>::to_vec).unwrap_or_default();
        let Some(s) = self.seqs.get_mut(&id) else { return };
        for c in s.copies.drain(..passed.min(s.copies.len())) {
            let shift = i32::try_from(c.start - c.from).unwrap_or(i32::MAX);
            for i in 0..c.len {
                let (src, dst) = (c.from + i, c.start + i);
                let (Some(&sb), Some(&db)) = (c.blocks.get(src / bs), table.get(dst / bs)) else { continue };
                plan.copies.push(KvCopy {
                    src: sb * bs as u32 + (src % bs) as u32,
                    dst: db * bs as u32 + (dst % bs) as u32,
                    shift,
                });
            }
            s.num_computed += c.len;
            // The source blocks are read before the forward pass: they may
            // be released once the engine performed this step's copies.
            self.unpin_next.extend_from_slice(&c.blocks);
        }
        let total = s.tokens.len();
        plan.scheduled.extend(runs.iter().map(|&(start, len)| Scheduled {
            seq: id,
            start,
            len,
            sample: start + len == total,
        }));
        *budget -= runs.iter().map(|r| r.1).sum::<usize>();
        // The scratch goes back for the next sequence.
        self.runs = runs;
    }

    /// Drops the planned copies of `id` (preempted, finished or failed).
    pub(super) fn drop_copies(&mut self, id: SeqId) {
        if let Some(s) = self.seqs.get_mut(&id) {
            for c in std::mem::take(&mut s.copies) {
                self.kv.unpin(&c.blocks);
            }
        }
    }
}
