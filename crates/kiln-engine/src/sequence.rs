//! One request's state inside the engine, apart from its tokens (which the
//! scheduler holds).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use kiln_core::sample::Sampler;
use kiln_core::stop::StopMatcher;
use kiln_core::{FinishReason, Sampled, SamplingParams, StopParams, StreamEvent, Timings, TokenId};
use kiln_tokenize::{IncrementalDetokenizer, Tokenizer};
use tokio::sync::mpsc::UnboundedSender;

/// A request being served.
pub(crate) struct Sequence {
    pub(crate) id: u64,
    pub(crate) prompt_len: usize,
    /// Tokens generated so far.
    pub(crate) generated: usize,
    pub(crate) sampler: Sampler,
    /// The constraint's matcher, when the request has one.
    pub(crate) matcher: Option<kiln_grammar::Matcher>,
    pub(crate) stop: StopParams,
    pub(crate) stopper: StopMatcher,
    pub(crate) detok: IncrementalDetokenizer<Arc<Tokenizer>>,
    pub(crate) want_logprobs: bool,
    /// A chat turn (see [`crate::Request::chat_turn`]).
    pub(crate) chat_turn: bool,
    /// Computes its prompt only (no logits, no tokens): the engine's own
    /// jobs ([`Sequence::internal_prefill`]).
    pub(crate) prefill_only: bool,
    pub(crate) events: crate::event_tx::EventTx,
    pub(crate) cancel: Arc<AtomicBool>,
    pub(crate) timings: Timings,
    pub(crate) submitted: Instant,
    pub(crate) first_token_at: Option<Instant>,
    pub(crate) finished: Option<FinishReason>,
    /// Speculative decoding's proposer, when the request speculates.
    pub(crate) drafter: Option<crate::spec::Drafter>,
    /// The LoRA adapter of every row, held until the sequence is freed.
    pub(crate) lora: Option<crate::lora::LoraHold>,
    /// Marked segments of the prompt (taken when it is queued).
    pub(crate) segments: Vec<crate::request::SegmentSpan>,
    /// Leading tokens of each segment computed rather than copied.
    pub(crate) segment_recompute: usize,
    /// Most tokens of the prompt's head its segments are computed after.
    pub(crate) segment_context: usize,
}

impl Sequence {
    /// A prefill-only sequence of the engine's own (next-turn warm-ups,
    /// segment jobs): computes its `prompt_len` prompt tokens with no
    /// sampling, and sends its events to `events`, which nobody reads.
    pub(crate) fn internal_prefill(
        id: u64,
        prompt_len: usize,
        tokenizer: &Arc<Tokenizer>,
        events: &UnboundedSender<StreamEvent>,
        lora: Option<crate::lora::LoraHold>,
    ) -> Self {
        Self {
            id,
            prompt_len,
            generated: 0,
            sampler: Sampler::new(&SamplingParams::default())
                .unwrap_or_else(|_| unreachable!("the default sampling parameters are valid")),
            matcher: None,
            stopper: StopMatcher::new(&[]),
            stop: StopParams { max_tokens: 0, ..Default::default() },
            detok: IncrementalDetokenizer::continuing(Arc::clone(tokenizer), true),
            want_logprobs: false,
            chat_turn: false,
            prefill_only: true,
            events: crate::event_tx::EventTx::new(events.clone(), Arc::new(tokio::sync::Notify::new())),
            cancel: Arc::default(),
            timings: Timings { prompt_tokens: prompt_len, ..Default::default() },
            submitted: Instant::now(),
            first_token_at: None,
            finished: None,
            drafter: None,
            lora,
            segments: Vec::new(),
            segment_recompute: 0,
            segment_context: 0,
        }
    }

    pub(crate) fn is_cancelled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed) || self.events.is_closed()
    }

    /// Records a sampled token (the sequence then has `total` tokens),
    /// emits its text and decides whether to stop.
    pub(crate) fn push_token(&mut self, s: Sampled, eos: &[TokenId], max_ctx: usize, total: usize) {
        let now = Instant::now();
        let token = s.token;
        if self.first_token_at.is_none() {
            self.first_token_at = Some(now);
            self.timings.ttft_ms = ms(self.submitted, now);
        }
        self.generated += 1;
        let is_end = !self.stop.ignore_eos && (eos.contains(&token) || self.stop.stop_token_ids.contains(&token));
        if is_end {
            self.finished = Some(FinishReason::Stop);
            return;
        }
        let delta = self.detok.push(token);
        let out = self.stopper.push(&delta);
        let logprob = self.want_logprobs.then_some(s);
        let _ = self.events.send(StreamEvent::Token { token, text: out.text, logprob });
        if out.matched.is_some() {
            self.finished = Some(FinishReason::Stop);
        } else if self.generated >= self.stop.max_tokens {
            self.finished = Some(FinishReason::Length);
        } else if total >= max_ctx {
            self.finished = Some(FinishReason::ContextLength);
        }
    }

    /// Sends the final event.
    pub(crate) fn finish(&mut self, reason: FinishReason) {
        let now = Instant::now();
        let t = &mut self.timings;
        t.decode_tokens = self.generated;
        if let Some(d) = &self.drafter {
            (t.draft_proposed, t.draft_accepted) = (d.proposed, d.accepted);
        }
        if let Some(first) = self.first_token_at {
            t.decode_ms = ms(first, now);
        }
        t.total_ms = ms(self.submitted, now);
        let text = if self.stopper.is_stopped() {
            String::new()
        } else {
            // Bytes the detokenizer still held, then text held back as a
            // possible stop-string start: both are final now.
            let tail = self.detok.flush();
            let out = self.stopper.push(&tail);
            if out.matched.is_some() {
                out.text
            } else {
                out.text + &self.stopper.finish()
            }
        };
        // The adapter is free once the answer ends (before the event: a
        // client that unloads it on seeing the end must find it unused).
        self.lora = None;
        let _ = self.events.send(StreamEvent::Done { reason, text, timings: self.timings.clone() });
    }
}

pub(crate) fn ms(a: Instant, b: Instant) -> f64 {
    b.saturating_duration_since(a).as_secs_f64() * 1000.0
}
