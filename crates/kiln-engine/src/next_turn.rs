//! Prefilling the next chat turn while the user reads the answer.
//!
//! A chat client's follow-up repeats the whole conversation, the model's
//! answer, then the template's opening of the next user turn (ChatML:
//! `<|im_end|>\n<|im_start|>user\n`) and the new message. Prefix caching
//! already reuses everything up to the answer's last computed token; this
//! computes the opening too, so the follow-up computes only its message.
//!
//! When a chat answer ends (at an end-of-turn token or its token limit, not
//! a stop string, which cuts the answer inside its tokens) and no other
//! request is active, its sequence is *parked*: its blocks stay, nothing is
//! scheduled. If the engine stays idle for a while
//! ([`crate::EngineConfig::next_turn_idle_ms`]: a person has not typed the
//! next message yet), the opening becomes the sequence's pending
//! tokens and it runs as *background* work: no logits, no events, freed once
//! computed, its blocks left in the prefix cache. A request that arrives
//! first frees every parked sequence before it is planned, so it never waits
//! for this work and finds the same cached prefix as without it (a client
//! that answers at machine speed, e.g. an agent loop, gets nothing and loses
//! nothing); one that arrives during the background step waits for that
//! step (one forward pass of a few tokens). The pending tokens are the
//! opening in place of the sampled end-of-turn token (the template writes
//! its own), or after the answer's last token when the limit ended it.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use kiln_core::{FinishReason, TokenId};

use crate::engine_loop::EngineLoop;
use crate::sequence::Sequence;

/// A sequence whose answer is delivered, holding its blocks.
struct Parked {
    id: u64,
    /// Its tokens to compute when it is started.
    pending: Vec<TokenId>,
    due: Instant,
}

/// The engine's next-turn state.
pub(crate) struct NextTurn {
    /// The chat template's tokens between an answer and the next user
    /// message (empty: off, or the template has none).
    opening: Vec<TokenId>,
    /// Idle time after an answer before its opening is computed.
    idle: Duration,
    parked: Vec<Parked>,
    /// Started: computing their pending tokens.
    background: HashSet<u64>,
}

impl NextTurn {
    pub(crate) fn new(opening: Vec<TokenId>, idle: Duration) -> Self {
        Self { opening, idle, parked: Vec::new(), background: HashSet::new() }
    }

    /// Whether `id` is background work (no logits, no events). Asked per
    /// work item of every step: the empty set answers without hashing.
    pub(crate) fn is_background(&self, id: u64) -> bool {
        !self.background.is_empty() && self.background.contains(&id)
    }

    /// Whether background work is running.
    pub(crate) fn has_background(&self) -> bool {
        !self.background.is_empty()
    }

    /// When the earliest parked sequence is due.
    pub(crate) fn due(&self) -> Option<Instant> {
        self.parked.iter().map(|p| p.due).min()
    }

    /// Scheduler sequences that are not requests (parked or background).
    pub(crate) fn num_held(&self) -> usize {
        self.parked.len() + self.background.len()
    }
}

impl<B: kiln_backend::Backend> EngineLoop<B> {
    /// Called with a chat answer that just ended (its last event sent):
    /// parks its sequence if it qualifies (see the module docs). Returns
    /// whether it did; otherwise the caller frees it.
    pub(crate) fn park_for_next_turn(&mut self, id: u64, seq: &Sequence, reason: FinishReason) -> bool {
        if self.next_turn.opening.is_empty() || !seq.chat_turn || !self.seqs.is_empty() {
            return false;
        }
        let keep_last = match reason {
            FinishReason::Length => true,
            FinishReason::Stop if !seq.stopper.is_stopped() => false,
            _ => return false,
        };
        let (Some(tokens), Some(done)) = (self.sched.tokens(id), self.sched.num_computed(id)) else {
            return false;
        };
        let mut pending = if keep_last { tokens[done..].to_vec() } else { Vec::new() };
        pending.extend_from_slice(&self.next_turn.opening);
        if done + pending.len() > self.max_ctx || !matches!(self.sched.replace_pending(id, &[]), Ok(true)) {
            return false;
        }
        self.next_turn.parked.push(Parked { id, pending, due: Instant::now() + self.next_turn.idle });
        true
    }

    /// Starts the parked sequences that are due (the engine was idle until
    /// now); one that cannot get its blocks without touching the reserve is
    /// freed instead.
    pub(crate) fn start_due_prefills(&mut self) {
        let now = Instant::now();
        let (due, wait): (Vec<Parked>, Vec<Parked>) =
            std::mem::take(&mut self.next_turn.parked).into_iter().partition(|p| p.due <= now);
        self.next_turn.parked = wait;
        for p in due {
            if matches!(self.sched.replace_pending(p.id, &p.pending), Ok(true)) {
                self.next_turn.background.insert(p.id);
                self.stats.record_next_turn_prefill(p.pending.len());
            } else {
                let _ = self.sched.finish(p.id);
            }
        }
    }

    /// Frees every parked sequence: a request arrived, and it must neither
    /// wait for optional work nor miss their last blocks (freed, they are
    /// cached like any finished sequence's).
    pub(crate) fn drop_parked(&mut self) {
        for p in std::mem::take(&mut self.next_turn.parked) {
            let _ = self.sched.finish(p.id);
        }
    }

    /// Records a step's chunk of background sequence `id`; frees it once
    /// its pending tokens are computed.
    pub(crate) fn advance_background(&mut self, id: u64, len: usize) {
        if !matches!(self.sched.advance(id, len), Ok(false)) {
            self.forget_held(id);
        }
    }

    /// Frees `id` if it is parked or background work (it was preempted, or
    /// its step failed). Returns whether it was.
    pub(crate) fn forget_held(&mut self, id: u64) -> bool {
        let parked = self.next_turn.parked.iter().position(|p| p.id == id).map(|i| self.next_turn.parked.remove(i));
        let held = self.next_turn.background.remove(&id) || parked.is_some();
        if held {
            let _ = self.sched.finish(id);
        }
        held
    }
}
