//! The token-budget scheduler: which sequences compute how many tokens in
//! the next engine step.
//!
//! Every step has a budget of [`SchedConfig::max_step_tokens`]. Running
//! sequences come first, oldest first: one token for a decoding sequence,
//! the next chunk for one whose prompt is not done (chunked prefill). The
//! rest of the budget admits waiting sequences in arrival order (FCFS: a
//! request that cannot be admitted is never overtaken), each reusing the
//! longest cached prefix of its tokens (automatic prefix caching through
//! [`KvManager`]) and starting its first chunk at once.
//!
//! When a running sequence needs a KV block and none is free, the newest
//! running sequence is *preempted*: its blocks are released (full blocks
//! stay in the prefix cache, so resuming is cheap while they survive) and it
//! goes back to the front of the queue, to recompute what it lost later.
//! Nothing is admitted in a step that preempted, and admission keeps one
//! free block per running sequence in reserve, so decoding does not
//! immediately evict what was just admitted (no preemption storms).
//!
//! The output of a step is, per sequence, where its chunk starts and how
//! many tokens it has ([`Scheduled`]); its block table is
//! [`Scheduler::block_table`]. Prefill, chunked prefill, prefix hits and
//! resumed preemptions are all the same thing: a run of tokens from
//! `num_computed` on (STYLE.md habit 6).
//!
//! The engine reports back with [`Scheduler::advance`] after the forward
//! pass, [`Scheduler::append`] for each sampled token and
//! [`Scheduler::finish`] when a sequence ends or is cancelled.

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod segment_tests;
mod segments;
#[cfg(test)]
mod shift_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
use tests as tests_common;

pub use segments::{KvCopy, SegmentCounts, SegmentUse};

use std::collections::{HashMap, VecDeque};

use crate::kv::{BlockId, KvError, KvManager, KvTransfer, SeqId};
use crate::types::TokenId;

/// Scheduler limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchedConfig {
    /// Most tokens computed in one step (decode tokens plus prompt chunks).
    pub max_step_tokens: usize,
    /// Most sequences running (holding KV blocks) at once.
    pub max_running: usize,
    /// Reuse cached KV of earlier sequences with the same leading tokens.
    /// Off, every sequence computes its whole prompt (for measurements).
    pub prefix_caching: bool,
}

/// Why a sequence could not be added or scheduled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchedError {
    /// A sequence with no tokens.
    #[error("sequence {0} has no tokens")]
    Empty(SeqId),
    /// The id is already in use.
    #[error("sequence {0} already exists")]
    Exists(SeqId),
    /// The id is not known.
    #[error("unknown sequence {0}")]
    Unknown(SeqId),
    /// More tokens than the whole KV pool holds.
    #[error("sequence {seq} needs {tokens} KV slots but the cache holds {capacity}")]
    TooLong {
        /// The sequence.
        seq: SeqId,
        /// Its tokens.
        tokens: usize,
        /// Slots in the pool.
        capacity: usize,
    },
    /// Segments out of the prompt, out of order, overlapping or after a
    /// context that reaches into them.
    #[error("sequence {0}: segments must be non-empty, in order, not overlapping, inside the prompt and after their context")]
    BadSegments(SeqId),
    /// The KV manager refused (never for lack of blocks: see [`StepPlan::failed`]).
    #[error(transparent)]
    Kv(#[from] KvError),
}

/// One sequence's work in a step: compute tokens `start..start + len`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scheduled {
    /// The sequence.
    pub seq: SeqId,
    /// First token (= tokens already computed).
    pub start: usize,
    /// Tokens to compute.
    pub len: usize,
    /// Whether the chunk reaches the last known token, so the step's output
    /// for it is the next token's distribution (sample it).
    pub sample: bool,
}

/// A sequence admitted (or resumed) this step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admitted {
    /// The sequence.
    pub seq: SeqId,
    /// Leading tokens whose KV came from the prefix cache.
    pub cached_tokens: usize,
    /// Of those, blocks copied back from the KV tier.
    pub restored_blocks: usize,
    /// Whether this is a resumption after a preemption.
    pub resumed: bool,
    /// Its segments' tokens copied from the segment cache, and computed.
    pub segments: SegmentCounts,
}

/// What one call of [`Scheduler::schedule`] decided.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StepPlan {
    /// The work of this step, in batch order.
    pub scheduled: Vec<Scheduled>,
    /// Sequences admitted this step.
    pub admitted: Vec<Admitted>,
    /// Sequences preempted this step (back in the queue).
    pub preempted: Vec<SeqId>,
    /// Sequences that can never get the blocks they need (they would not fit
    /// an empty pool); they are removed, the caller reports the error.
    pub failed: Vec<(SeqId, KvError)>,
    /// Copies between the KV pool and its tier to perform, in order, before
    /// this step's forward pass (empty without a tier).
    pub transfers: Vec<KvTransfer>,
    /// Segment K/V to copy (keys re-rotated) before this step's forward
    /// pass, after the transfers (see [`SegmentUse`]).
    pub copies: Vec<KvCopy>,
}

impl StepPlan {
    fn clear(&mut self) {
        self.scheduled.clear();
        self.admitted.clear();
        self.preempted.clear();
        self.failed.clear();
        self.transfers.clear();
        self.copies.clear();
    }

    /// Tokens computed in this step.
    pub fn num_tokens(&self) -> usize {
        self.scheduled.iter().map(|s| s.len).sum()
    }
}

#[derive(Debug, Clone)]
struct Seq {
    tokens: Vec<TokenId>,
    num_computed: usize,
    extra_key: u64,
    running: bool,
    preempted: bool,
    segments: Vec<SegmentUse>,
    copies: VecDeque<segments::PendingCopy>,
    /// A segment computed alone ([`Scheduler::add_segment`]).
    segment: bool,
}

/// The scheduler: a FCFS queue, a running set and the KV block manager.
#[derive(Debug, Clone)]
pub struct Scheduler {
    cfg: SchedConfig,
    kv: KvManager,
    seqs: HashMap<SeqId, Seq>,
    waiting: VecDeque<SeqId>,
    /// Oldest admission first.
    running: Vec<SeqId>,
    plan: StepPlan,
    num_preemptions: u64,
    /// Segment blocks whose copies were handed out in the last step.
    unpin_next: Vec<BlockId>,
    /// Context shifts not yet handed out: the sequence, its copies and
    /// the old blocks they read ([`Scheduler::shift`]).
    shifts: Vec<(SeqId, Vec<KvCopy>, Vec<BlockId>)>,
    /// Scratch: one sequence's runs in a step ([`Scheduler::plan_runs`]).
    runs: Vec<(usize, usize)>,
}

impl Scheduler {
    /// A scheduler over `kv`.
    pub fn new(cfg: SchedConfig, kv: KvManager) -> Self {
        let cfg = SchedConfig {
            max_step_tokens: cfg.max_step_tokens.max(1),
            max_running: cfg.max_running.max(1),
            prefix_caching: cfg.prefix_caching,
        };
        Self {
            cfg,
            kv,
            seqs: HashMap::new(),
            waiting: VecDeque::new(),
            running: Vec::new(),
            plan: StepPlan::default(),
            num_preemptions: 0,
            unpin_next: Vec::new(),
            shifts: Vec::new(),
            runs: Vec::new(),
        }
    }

    /// The limits.
    pub fn config(&self) -> SchedConfig {
        self.cfg
    }

    /// The KV block manager (read-only: counts, cached prefixes).
    pub fn kv(&self) -> &KvManager {
        &self.kv
    }

    /// Queues a sequence of `tokens` (its prompt). `extra_key` separates
    /// prefix caches that must not mix (e.g. LoRA adapters).
    ///
    /// # Errors
    /// An empty prompt, a known id, or more tokens than the pool holds.
    pub fn add(&mut self, seq: SeqId, tokens: Vec<TokenId>, extra_key: u64) -> Result<(), SchedError> {
        self.add_with_segments(seq, tokens, extra_key, Vec::new())
    }

    /// [`Scheduler::add`] for a prompt with segments (see [`SegmentUse`]):
    /// the ones found in the segment cache when the sequence is admitted
    /// are copied rather than computed. A sequence's own blocks then hold
    /// K/V that depend on where its segments are and how much of them is
    /// recomputed, so its prefix-cache namespace is `extra_key` mixed with
    /// that layout: a later prompt with the same segments at the same
    /// places reuses them, a plain prompt with the same tokens does not.
    ///
    /// # Errors
    /// As [`Scheduler::add`], and segments out of the prompt's bounds, out
    /// of order or overlapping ([`SchedError::BadSegments`]).
    pub fn add_with_segments(
        &mut self,
        seq: SeqId,
        tokens: Vec<TokenId>,
        extra_key: u64,
        segments: Vec<SegmentUse>,
    ) -> Result<(), SchedError> {
        let mut end = 0;
        for u in &segments {
            if u.start < end
                || u.len == 0
                || u.context > u.start
                || u.start.checked_add(u.len).is_none_or(|e| e > tokens.len())
            {
                return Err(SchedError::BadSegments(seq));
            }
            end = u.start + u.len;
        }
        let extra_key = if segments.is_empty() {
            extra_key
        } else {
            use std::hash::{Hash, Hasher};
            let mut h = std::hash::DefaultHasher::new();
            segments.hash(&mut h);
            extra_key ^ h.finish() ^ 0x5345_474d_454e_5453
        };
        if tokens.is_empty() {
            return Err(SchedError::Empty(seq));
        }
        if self.seqs.contains_key(&seq) {
            return Err(SchedError::Exists(seq));
        }
        let capacity = self.capacity();
        if tokens.len() > capacity {
            return Err(SchedError::TooLong { seq, tokens: tokens.len(), capacity });
        }
        // Without prefix caching each sequence gets a cache namespace of its own.
        let extra_key =
            if self.cfg.prefix_caching { extra_key } else { extra_key ^ seq.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 1 };
        self.seqs.insert(
            seq,
            Seq {
                tokens,
                num_computed: 0,
                extra_key,
                running: false,
                preempted: false,
                segments,
                copies: VecDeque::new(),
                segment: false,
            },
        );
        self.waiting.push_back(seq);
        Ok(())
    }

    /// Queues a segment to compute alone, `tokens` from position 0 under
    /// the segment namespace `key` (see [`SegmentUse`]): a sequence like
    /// any, whose last partial block is kept, when it is freed, as long as
    /// its full blocks are ([`KvManager::mark_segment`]).
    ///
    /// # Errors
    /// As [`Scheduler::add`].
    pub fn add_segment(&mut self, seq: SeqId, tokens: Vec<TokenId>, key: u64) -> Result<(), SchedError> {
        self.add(seq, tokens, key)?;
        if let Some(s) = self.seqs.get_mut(&seq) {
            s.segment = true;
        }
        Ok(())
    }

    /// KV slots in the whole pool.
    pub fn capacity(&self) -> usize {
        self.kv.num_blocks() * self.kv.block_size()
    }

    /// Sequences waiting for admission.
    pub fn num_waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Sequences running.
    pub fn num_running(&self) -> usize {
        self.running.len()
    }

    /// Whether nothing is queued or running.
    pub fn is_idle(&self) -> bool {
        self.seqs.is_empty()
    }

    /// Preemptions so far.
    pub fn num_preemptions(&self) -> u64 {
        self.num_preemptions
    }

    /// All known tokens of `seq` (prompt, then generated).
    pub fn tokens(&self, seq: SeqId) -> Option<&[TokenId]> {
        self.seqs.get(&seq).map(|s| s.tokens.as_slice())
    }

    /// Tokens of `seq` whose KV is computed.
    pub fn num_computed(&self, seq: SeqId) -> Option<usize> {
        self.seqs.get(&seq).map(|s| s.num_computed)
    }

    /// The block table of a running sequence.
    pub fn block_table(&self, seq: SeqId) -> Option<&[BlockId]> {
        self.kv.block_table(seq).ok()
    }

    /// The window-pool block table of a running sequence into `out`
    /// ([`KvManager::window_table`]; empty without a window pool).
    /// Returns false for a sequence that is not running.
    pub fn window_table(&self, seq: SeqId, out: &mut Vec<BlockId>) -> bool {
        self.kv.window_table(seq, out).is_ok()
    }

    /// Decides the next step (see the module docs). The plan is valid until
    /// the next call.
    pub fn schedule(&mut self) -> &StepPlan {
        let mut plan = std::mem::take(&mut self.plan);
        plan.clear();
        // The last step's copies are done: their sources may go.
        let unpin = std::mem::take(&mut self.unpin_next);
        self.kv.unpin(&unpin);
        if !self.shifts.is_empty() {
            self.take_shifts(&mut plan);
        }
        let mut budget = self.cfg.max_step_tokens;
        self.schedule_running(&mut plan, &mut budget);
        if plan.preempted.is_empty() {
            self.admit_waiting(&mut plan, &mut budget);
        }
        self.kv.drain_transfers(&mut plan.transfers);
        self.plan = plan;
        &self.plan
    }

    fn schedule_running(&mut self, plan: &mut StepPlan, budget: &mut usize) {
        let mut i = 0;
        'running: while i < self.running.len() && *budget > 0 {
            let id = self.running[i];
            let Some(s) = self.seqs.get(&id) else {
                self.running.remove(i);
                continue;
            };
            if s.tokens.len() == s.num_computed {
                i += 1;
                continue;
            }
            let mut runs = std::mem::take(&mut self.runs);
            let passed = self.plan_runs(id, *budget, &mut runs);
            let end = runs.last().map_or(s.num_computed, |&(st, n)| st + n);
            loop {
                let have = self.kv.num_slots(id).unwrap_or(0);
                let grow = end.saturating_sub(have);
                match self.kv.append_slots(id, grow).and_then(|()| self.kv.window_reserve(id, end)) {
                    Ok(()) => break,
                    Err(KvError::OutOfBlocks { .. }) if self.running.len() > 1 => {
                        // Preempt the newest; if that is this one, it waits.
                        let victim = self.running.len() - 1;
                        let victim_id = self.running[victim];
                        self.preempt(victim, plan);
                        if victim_id == id {
                            self.runs = runs;
                            continue 'running;
                        }
                    }
                    Err(e) => {
                        // Alone and still out of blocks: it can never fit.
                        self.running.remove(i);
                        self.drop_seq(id);
                        plan.failed.push((id, e));
                        self.runs = runs;
                        continue 'running;
                    }
                }
            }
            self.take_runs(id, passed, runs, plan, budget);
            i += 1;
        }
    }

    fn admit_waiting(&mut self, plan: &mut StepPlan, budget: &mut usize) {
        while *budget > 0 && self.running.len() < self.cfg.max_running {
            let Some(&id) = self.waiting.front() else { break };
            let Some(s) = self.seqs.get(&id) else {
                self.waiting.pop_front();
                continue;
            };
            // Keep one block per running sequence free for decoding.
            let needed = self.kv.blocks_needed(&s.tokens, s.extra_key);
            if needed + self.running.len() > self.kv.num_free_blocks() && !self.running.is_empty() {
                break;
            }
            let total = s.tokens.len();
            let admitted = self.kv.allocate_prompt(id, &s.tokens, s.extra_key).and_then(|alloc| {
                // The window pool holds the first chunk too, or nothing is taken.
                let end = alloc.num_cached_tokens + (total - alloc.num_cached_tokens).min(*budget);
                match self.kv.window_reserve(id, end) {
                    Ok(()) => Ok((alloc, end)),
                    Err(e) => {
                        let _ = self.kv.free(id);
                        Err(e)
                    }
                }
            });
            match admitted {
                Ok((alloc, reserved)) => {
                    self.waiting.pop_front();
                    let Some(s) = self.seqs.get_mut(&id) else { continue };
                    s.num_computed = alloc.num_cached_tokens;
                    s.running = true;
                    let resumed = s.preempted;
                    if s.segment {
                        let _ = self.kv.mark_segment(id);
                    }
                    let segments = self.resolve_segments(id, alloc.num_cached_tokens);
                    plan.admitted.push(Admitted {
                        seq: id,
                        cached_tokens: alloc.num_cached_tokens,
                        restored_blocks: alloc.num_restored_blocks,
                        resumed,
                        segments,
                    });
                    self.running.push(id);
                    let mut runs = std::mem::take(&mut self.runs);
                    let passed = self.plan_runs(id, *budget, &mut runs);
                    // Only runs past copied segments reach further than the
                    // first chunk reserved above, and segments never meet a
                    // window pool (the engine refuses them with one).
                    debug_assert!(
                        self.kv.window_num_blocks() == 0 || runs.last().is_none_or(|&(st, n)| st + n <= reserved),
                        "runs past the window pool's reservation"
                    );
                    self.take_runs(id, passed, runs, plan, budget);
                }
                Err(KvError::OutOfBlocks { .. }) if !self.running.is_empty() => break,
                Err(e) => {
                    // Nothing runs and it still does not fit: never will.
                    self.waiting.pop_front();
                    self.drop_seq(id);
                    plan.failed.push((id, e));
                }
            }
        }
    }

    /// Moves running sequence `i` back to the front of the queue.
    fn preempt(&mut self, i: usize, plan: &mut StepPlan) {
        let id = self.running.remove(i);
        self.drop_copies(id);
        let _ = self.kv.free(id);
        if let Some(s) = self.seqs.get_mut(&id) {
            s.num_computed = 0;
            s.running = false;
            s.preempted = true;
        }
        self.waiting.push_front(id);
        plan.preempted.push(id);
        self.num_preemptions += 1;
    }

    fn drop_seq(&mut self, id: SeqId) {
        self.drop_copies(id);
        if self.seqs.remove(&id).is_some_and(|s| s.running) {
            let _ = self.kv.free(id);
        }
    }

    /// Records that the step computed `n` more tokens of `seq` (its
    /// scheduled chunk) and enters newly full blocks in the prefix cache.
    /// Returns whether every known token is now computed.
    ///
    /// # Errors
    /// An unknown or not running sequence, or more tokens than it has slots.
    pub fn advance(&mut self, seq: SeqId, n: usize) -> Result<bool, SchedError> {
        let s = self.seqs.get_mut(&seq).ok_or(SchedError::Unknown(seq))?;
        if !s.running {
            return Err(SchedError::Unknown(seq));
        }
        let done = (s.num_computed + n).min(s.tokens.len());
        self.kv.commit_tokens(seq, &s.tokens[..done])?;
        s.num_computed = done;
        Ok(done == s.tokens.len())
    }

    /// Grows `seq`'s KV slots to `tokens` positions (speculative positions
    /// past its known tokens) without preempting anything; their contents
    /// only count once [`Scheduler::append`] and [`Scheduler::advance`]
    /// make them part of the sequence. Returns whether the slots are there.
    pub fn reserve(&mut self, seq: SeqId, tokens: usize) -> bool {
        let Ok(have) = self.kv.num_slots(seq) else { return false };
        (tokens <= have || self.kv.append_slots(seq, tokens - have).is_ok())
            && self.kv.window_reserve(seq, tokens).is_ok()
    }

    /// Appends a sampled token to `seq`; it is computed in a later step.
    ///
    /// # Errors
    /// An unknown sequence.
    pub fn append(&mut self, seq: SeqId, token: TokenId) -> Result<(), SchedError> {
        self.seqs.get_mut(&seq).ok_or(SchedError::Unknown(seq))?.tokens.push(token);
        Ok(())
    }

    /// Removes `seq` (finished or cancelled), waiting or running, and frees
    /// its blocks (full blocks stay cached for later prefix hits).
    ///
    /// # Errors
    /// An unknown sequence.
    pub fn finish(&mut self, seq: SeqId) -> Result<(), SchedError> {
        self.drop_copies(seq);
        let s = self.seqs.remove(&seq).ok_or(SchedError::Unknown(seq))?;
        if s.running {
            self.running.retain(|&r| r != seq);
            let _ = self.kv.free(seq);
        } else {
            self.waiting.retain(|&w| w != seq);
        }
        Ok(())
    }

    /// Context shift of a running sequence (its context is full): keeps its
    /// first `keep` tokens, drops the `discard` computed tokens after them
    /// and moves the rest of its computed K/V `discard` positions down,
    /// keys re-rotated ([`KvManager::shift`]: into fresh blocks, so nothing
    /// shared or cached is written). The copies come with the next
    /// [`StepPlan::copies`], before that step's forward pass; the tokens
    /// not computed yet follow. Returns the number of tokens now known.
    ///
    /// Without free blocks for the moved tokens, the sequence is requeued
    /// to compute its kept tokens again instead.
    ///
    /// # Errors
    /// An unknown or waiting sequence, or `keep + discard` past its
    /// computed tokens (nothing changes).
    pub fn shift(&mut self, seq: SeqId, keep: usize, discard: usize) -> Result<usize, SchedError> {
        let s = self.seqs.get(&seq).ok_or(SchedError::Unknown(seq))?;
        if !s.running || !s.copies.is_empty() {
            return Err(SchedError::Unknown(seq));
        }
        let mut raw = Vec::new();
        let old = match self.kv.shift(seq, keep, discard, s.num_computed, &mut raw) {
            Ok(old) => old,
            Err(KvError::OutOfBlocks { .. }) => return Ok(self.shift_by_recompute(seq, keep, discard)),
            Err(e) => return Err(e.into()),
        };
        let copies = raw.into_iter().map(|(src, dst, shift)| KvCopy { src, dst, shift }).collect();
        self.shifts.push((seq, copies, old));
        let s = self.seqs.get_mut(&seq).ok_or(SchedError::Unknown(seq))?;
        s.tokens.drain(keep..keep + discard);
        s.num_computed -= discard;
        Ok(s.tokens.len())
    }

    /// A context shift without free blocks for the moves: the sequence
    /// keeps its tokens less the dropped ones, frees its blocks and goes
    /// back to the front of the queue, to compute them again (as after a
    /// preemption: its head is found in the prefix cache).
    fn shift_by_recompute(&mut self, seq: SeqId, keep: usize, discard: usize) -> usize {
        self.running.retain(|&r| r != seq);
        self.drop_copies(seq);
        let _ = self.kv.free(seq);
        self.waiting.push_front(seq);
        let Some(s) = self.seqs.get_mut(&seq) else { return 0 };
        s.tokens.drain(keep..keep + discard);
        s.num_computed = 0;
        s.running = false;
        s.preempted = true;
        s.tokens.len()
    }

    /// Hands out the pending shifts' copies (of sequences still running);
    /// their old blocks are released at the next step.
    fn take_shifts(&mut self, plan: &mut StepPlan) {
        for (seq, copies, old) in std::mem::take(&mut self.shifts) {
            if self.seqs.get(&seq).is_some_and(|s| s.running) {
                plan.copies.extend(copies);
            }
            self.unpin_next.extend(old);
        }
    }

    /// Checks the internal invariants (tests).
    #[cfg(test)]
    pub(crate) fn check(&self) -> Result<(), String> {
        self.kv.check()?;
        if self.running.len() + self.waiting.len() != self.seqs.len() {
            return Err(format!(
                "{} running + {} waiting != {} seqs",
                self.running.len(),
                self.waiting.len(),
                self.seqs.len()
            ));
        }
        for id in &self.running {
            let s = self.seqs.get(id).ok_or(format!("running {id} unknown"))?;
            if !s.running || !self.kv.contains(*id) {
                return Err(format!("running {id} has no blocks"));
            }
        }
        for id in &self.waiting {
            let s = self.seqs.get(id).ok_or(format!("waiting {id} unknown"))?;
            if s.running || self.kv.contains(*id) || s.num_computed != 0 {
                return Err(format!("waiting {id} holds blocks or computed tokens"));
            }
        }
        if self.running.len() > self.cfg.max_running {
            return Err(format!("{} running > max {}", self.running.len(), self.cfg.max_running));
        }
        Ok(())
    }
}
