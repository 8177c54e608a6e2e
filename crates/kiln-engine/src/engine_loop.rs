//! The engine thread: admit, schedule, forward, sample, emit — one step at a
//! time. The step reads like vLLM's: schedule → execute → sample → update.
//!
//! Each step fills a token budget (`prefill_chunk`) with one decode token per
//! running sequence, then with chunks of prompts (chunked prefill), so a long
//! prompt never stalls the sequences already decoding.

use std::collections::VecDeque;
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::Instant;

use kiln_core::kv::KvManager;
use kiln_core::{FinishReason, StreamEvent, TokenId};
use kiln_kernels::ThreadPool;
use kiln_models::{ForwardBatch, ForwardScratch, KvCache, LogitsWant, Model};

use crate::sequence::{ms, Sequence};

/// Messages to the engine thread.
pub(crate) enum Command {
    Submit(Box<Sequence>),
    Shutdown,
}

/// Everything the engine thread owns.
pub(crate) struct EngineLoop {
    pub(crate) model: Model,
    pub(crate) pool: ThreadPool,
    pub(crate) kv: KvCache,
    pub(crate) blocks: KvManager,
    pub(crate) scratch: ForwardScratch,
    pub(crate) batch: ForwardBatch,
    pub(crate) logits: Vec<f32>,
    pub(crate) eos: Vec<TokenId>,
    pub(crate) max_ctx: usize,
    pub(crate) prefill_chunk: usize,
    pub(crate) max_running: usize,
    pub(crate) waiting: VecDeque<Box<Sequence>>,
    pub(crate) running: Vec<Box<Sequence>>,
    pub(crate) stats: crate::EngineStatsCell,
}

impl EngineLoop {
    pub(crate) fn run(mut self, rx: Receiver<Command>) {
        loop {
            let idle = self.waiting.is_empty() && self.running.is_empty();
            let cmd = if idle {
                match rx.recv() {
                    Ok(c) => Some(c),
                    Err(_) => return,
                }
            } else {
                match rx.try_recv() {
                    Ok(c) => Some(c),
                    Err(TryRecvError::Empty) => None,
                    Err(TryRecvError::Disconnected) => Some(Command::Shutdown),
                }
            };
            match cmd {
                Some(Command::Shutdown) => {
                    self.abort_all("the engine is shutting down");
                    return;
                }
                // Drain every pending submission before stepping.
                Some(Command::Submit(seq)) => self.waiting.push_back(seq),
                None => self.step_guarded(),
            }
        }
    }

    /// Runs a step; a panic inside it (a bug, never input: input is
    /// validated before it reaches the engine) fails the requests of that
    /// step instead of killing the engine thread and every later request.
    fn step_guarded(&mut self) {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.step()));
        if r.is_err() {
            tracing::error!("an engine step panicked; failing its requests");
            for mut seq in self.running.drain(..) {
                let _ = self.blocks.free(seq.id);
                let _ = seq
                    .events
                    .send(StreamEvent::Error("internal error in the engine step (see the server log)".into()));
                seq.finished = Some(FinishReason::Cancelled);
            }
            self.publish_stats();
        }
    }

    fn step(&mut self) {
        self.reap_cancelled();
        self.admit();
        if self.running.is_empty() {
            self.publish_stats();
            return;
        }
        self.batch.clear();
        let mut budget = self.prefill_chunk.max(1);
        let mut scheduled: Vec<(usize, usize)> = Vec::with_capacity(self.running.len());
        // Decodes first, then prompt chunks, in arrival order.
        let order: Vec<usize> = {
            let mut o: Vec<usize> = (0..self.running.len()).collect();
            o.sort_by_key(|&i| (self.running[i].pending() > 1, i));
            o
        };
        for i in order {
            if budget == 0 {
                break;
            }
            let seq = &mut self.running[i];
            let n = seq.pending().min(budget);
            if n == 0 {
                continue;
            }
            let have = self.blocks.num_slots(seq.id).unwrap_or(0);
            let grow = (seq.num_computed + n).saturating_sub(have);
            if let Err(e) = self.blocks.append_slots(seq.id, grow) {
                tracing::warn!(seq = seq.id, "cannot grow KV: {e}");
                let _ = seq.events.send(StreamEvent::Error(format!("out of KV cache memory: {e}")));
                seq.finished = Some(FinishReason::Cancelled);
                continue;
            }
            let table = self.blocks.block_table(seq.id).unwrap_or(&[]);
            let want = if seq.num_computed + n == seq.tokens.len() { LogitsWant::Last } else { LogitsWant::None };
            let chunk = &seq.tokens[seq.num_computed..seq.num_computed + n];
            if let Err(e) = self.batch.push_seq(chunk, seq.num_computed, table, self.kv.block_size(), want) {
                let _ = seq.events.send(StreamEvent::Error(e.to_string()));
                seq.finished = Some(FinishReason::Cancelled);
                continue;
            }
            scheduled.push((i, n));
            budget -= n;
        }
        if !scheduled.is_empty() {
            self.execute(&scheduled);
        }
        self.retire();
        self.publish_stats();
    }

    fn publish_stats(&self) {
        self.stats.set_queue(
            self.waiting.len(),
            self.running.len(),
            self.blocks.num_free_blocks(),
            self.blocks.num_used_blocks(),
        );
    }

    fn execute(&mut self, scheduled: &[(usize, usize)]) {
        let t0 = Instant::now();
        let res = self.model.forward(&self.pool, &self.batch, &mut self.kv, &mut self.scratch, &mut self.logits);
        let dt = ms(t0, Instant::now());
        if let Err(e) = res {
            for &(i, _) in scheduled {
                let seq = &mut self.running[i];
                let _ = seq.events.send(StreamEvent::Error(format!("forward pass failed: {e}")));
                seq.finished = Some(FinishReason::Cancelled);
            }
            return;
        }
        let vocab = self.model.config().vocab_size;
        let mut row = 0;
        for &(i, n) in scheduled {
            let seq = &mut self.running[i];
            let was_prefill = seq.num_computed < seq.prompt_len;
            seq.num_computed += n;
            if was_prefill {
                seq.timings.prefill_ms += dt;
            }
            let _ = self.blocks.commit_tokens(seq.id, &seq.tokens[..seq.num_computed]);
            if seq.num_computed < seq.tokens.len() {
                continue;
            }
            let logits = &mut self.logits[row * vocab..(row + 1) * vocab];
            row += 1;
            let sampled = seq.sampler.sample(logits, &seq.tokens);
            seq.push_token(sampled, &self.eos, self.max_ctx);
        }
        self.stats.record_step(self.batch.len(), dt);
    }

    /// Moves waiting requests into the running set while KV blocks allow.
    fn admit(&mut self) {
        while self.running.len() < self.max_running {
            let Some(mut seq) = self.waiting.pop_front() else { break };
            if seq.is_cancelled() {
                seq.finish(FinishReason::Cancelled);
                continue;
            }
            match self.blocks.allocate_prompt(seq.id, &seq.tokens, 0) {
                Ok(alloc) => {
                    seq.num_computed = alloc.num_cached_tokens;
                    seq.timings.cached_tokens = alloc.num_cached_tokens;
                    seq.timings.prefill_tokens = seq.prompt_len - alloc.num_cached_tokens;
                    seq.timings.queue_ms = ms(seq.submitted, Instant::now());
                    seq.admitted = true;
                    self.running.push(seq);
                }
                Err(e) if !self.running.is_empty() => {
                    tracing::debug!("request {} waits for KV blocks: {e}", seq.id);
                    self.waiting.push_front(seq);
                    break;
                }
                Err(e) => {
                    let _ = seq.events.send(StreamEvent::Error(format!("cannot allocate KV cache: {e}")));
                }
            }
        }
        self.publish_stats();
    }

    fn reap_cancelled(&mut self) {
        for seq in self.running.iter_mut() {
            if seq.finished.is_none() && seq.is_cancelled() {
                seq.finished = Some(FinishReason::Cancelled);
            }
        }
        self.retire();
    }

    /// Finishes sequences that are done and frees their KV blocks.
    fn retire(&mut self) {
        let mut i = 0;
        while i < self.running.len() {
            if let Some(reason) = self.running[i].finished {
                let mut seq = self.running.remove(i);
                let _ = self.blocks.free(seq.id);
                seq.finish(reason);
                self.stats.record_finish(&seq.timings);
            } else {
                i += 1;
            }
        }
    }

    fn abort_all(&mut self, why: &str) {
        for seq in self.running.drain(..).chain(self.waiting.drain(..)) {
            let _ = seq.events.send(StreamEvent::Error(why.to_string()));
        }
    }
}
