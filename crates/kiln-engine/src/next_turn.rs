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
//! request is active, its sequence is freed as any other (its blocks stay
//! in the prefix cache) and the conversation as the follow-up will send it
//! (up to the opening) is noted. If the engine stays idle for a while
//! ([`crate::EngineConfig::next_turn_idle_ms`]: a person has not typed the
//! next message yet), that conversation is submitted as an ordinary
//! *prefill-only* request: the scheduler finds all but its opening cached,
//! computes the rest, and the engine frees it with no logits and no events.
//! A request that arrives first cancels the warm-ups, so it never waits for
//! this work (a client that answers at machine speed, e.g. an agent loop,
//! gets nothing and loses nothing); one that arrives during a warm-up's
//! step waits for that step (one forward pass of a few tokens). The opening
//! replaces the sampled end-of-turn token (the template writes its own), or
//! follows the answer's last token when the limit ended it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kiln_core::{FinishReason, StreamEvent, TokenId};
use kiln_tokenize::Tokenizer;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

use crate::engine_loop::EngineLoop;
use crate::sequence::Sequence;

/// Warm-up requests' ids: apart from the handle's, which count up from 1.
const WARM_IDS: u64 = 1 << 63;

/// The engine's next-turn state.
pub(crate) struct NextTurn {
    /// The chat template's tokens between an answer and the next user
    /// message (empty: off, or the template has none).
    opening: Vec<TokenId>,
    /// Idle time after an answer before its opening is computed.
    idle: Duration,
    /// Conversations to warm (up to the next user message), when, and
    /// how many of their tokens are not computed yet.
    noted: Vec<(Vec<TokenId>, Instant, usize)>,
    /// Warm-up requests submitted and not finished.
    warming: Vec<u64>,
    next_id: u64,
    tokenizer: Arc<Tokenizer>,
    /// Where warm-ups' (unread) events go.
    events: (UnboundedSender<StreamEvent>, UnboundedReceiver<StreamEvent>),
}

impl NextTurn {
    pub(crate) fn new(opening: Vec<TokenId>, idle: Duration, tokenizer: Arc<Tokenizer>) -> Self {
        let events = unbounded_channel();
        Self { opening, idle, noted: Vec::new(), warming: Vec::new(), next_id: WARM_IDS, tokenizer, events }
    }

    /// When the earliest noted conversation is due.
    pub(crate) fn due(&self) -> Option<Instant> {
        self.noted.iter().map(|n| n.1).min()
    }

    /// Warm-up requests running.
    pub(crate) fn num_warming(&self) -> usize {
        self.warming.len()
    }

    /// A prefill-only request of `tokens` (no sampling, no events read).
    fn warm_up(&mut self, tokens: usize) -> Sequence {
        while self.events.1.try_recv().is_ok() {}
        let id = self.next_id;
        self.next_id += 1;
        self.warming.push(id);
        Sequence::internal_prefill(id, tokens, &self.tokenizer, &self.events.0, None)
    }
}

impl<B: kiln_backend::Backend> EngineLoop<B> {
    /// Called with a chat answer that just ended (its last event sent,
    /// before it is freed): notes its conversation up to the next user
    /// message if it qualifies (see the module docs).
    pub(crate) fn note_for_next_turn(&mut self, id: u64, seq: &Sequence, reason: FinishReason) {
        let others = self.seqs.len() > self.next_turn.warming.len();
        // Warm-ups run on the base model: an adapter's answers are not noted.
        if self.next_turn.opening.is_empty() || !seq.chat_turn || others || seq.lora.is_some() {
            return;
        }
        let keep_last = match reason {
            FinishReason::Length => true,
            FinishReason::Stop if !seq.stopper.is_stopped() => false,
            _ => return,
        };
        let (Some(tokens), Some(done)) = (self.sched.tokens(id), self.sched.num_computed(id)) else {
            return;
        };
        let mut conv = tokens[..if keep_last { tokens.len() } else { done }].to_vec();
        conv.extend_from_slice(&self.next_turn.opening);
        if conv.len() <= self.max_ctx {
            let fresh = conv.len() - done;
            self.next_turn.noted.push((conv, Instant::now() + self.next_turn.idle, fresh));
        }
    }

    /// Submits the noted conversations that are due (the engine was idle
    /// until now) as prefill-only requests.
    pub(crate) fn start_due_prefills(&mut self) {
        let now = Instant::now();
        let (due, wait): (Vec<_>, Vec<_>) =
            std::mem::take(&mut self.next_turn.noted).into_iter().partition(|n| n.1 <= now);
        self.next_turn.noted = wait;
        for (conv, _, fresh) in due {
            let seq = self.next_turn.warm_up(conv.len());
            if self.sched.add(seq.id, conv, 0).is_ok() {
                self.stats.record_next_turn_prefill(fresh);
                self.seqs.insert(seq.id, seq);
            } else {
                self.next_turn.warming.retain(|&w| w != seq.id);
            }
        }
    }

    /// Cancels every warm-up and forgets the noted conversations: a
    /// request arrived, and it must not wait for optional work (what the
    /// warm-ups computed so far stays cached).
    pub(crate) fn cancel_warm_ups(&mut self) {
        self.next_turn.noted.clear();
        for id in std::mem::take(&mut self.next_turn.warming) {
            let _ = self.sched.finish(id);
            self.seqs.remove(&id);
        }
    }

    /// A warm-up ended (computed, preempted or failed).
    pub(crate) fn warm_up_done(&mut self, id: u64) {
        self.next_turn.warming.retain(|&w| w != id);
    }
}
