//! The engine thread: schedule, execute, sample, update — one step at a
//! time, as vLLM's engine core reads.
//!
//! [`kiln_core::sched::Scheduler`] decides each step's work within a token
//! budget (`prefill_chunk`): decode tokens of the running sequences first,
//! then prompt chunks (chunked prefill), with automatic prefix caching and
//! preemption when KV blocks run out. This loop turns the plan into one
//! batched forward pass, samples each sequence that reached its last token
//! with its own sampler, and streams the results.

use std::collections::HashMap;
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::time::Instant;

use kiln_backend::{Backend, Draw};
use kiln_core::sched::{Scheduled, Scheduler};
use kiln_core::{FinishReason, Sampled, StreamEvent, TokenId};
use kiln_models::{ForwardBatch, LogitsWant, Runner};

use crate::sequence::{ms, Sequence};

/// Messages to the engine thread.
pub(crate) enum Command {
    /// A new request, its prompt tokens and the tokens a context shift
    /// keeps at its head.
    Submit(Box<Sequence>, Vec<TokenId>, usize),
    /// Attach a LoRA adapter's factors under an id (between two steps).
    LoraAttach(u32, Box<kiln_models::LoraAdapter>, std::sync::mpsc::Sender<crate::Result<()>>),
    /// Drop a LoRA adapter (no sequence uses it: the registry checked).
    LoraDetach(u32, std::sync::mpsc::Sender<crate::Result<()>>),
    Shutdown,
}

/// Everything the engine thread owns. One loop for every device: `B` is
/// the backend the model runs on.
pub(crate) struct EngineLoop<B: Backend> {
    /// The model with its KV memory (and host tier) on its device.
    pub(crate) runner: Runner<B>,
    /// Tokens per KV block.
    pub(crate) block_size: usize,
    pub(crate) sched: Scheduler,
    pub(crate) batch: ForwardBatch,
    pub(crate) logits: Vec<f32>,
    /// Per logit row of a step on a device sampler: what to draw there
    /// (`None`: the host samples the row from its logits).
    pub(crate) draws: Vec<Option<Draw>>,
    /// The device sampler's picks, per logit row.
    pub(crate) picks: Vec<TokenId>,
    pub(crate) eos: Vec<TokenId>,
    /// A sequence's window-pool block table (reused).
    pub(crate) window_table: Vec<u32>,
    /// Chat answers whose next turn's opening is prefilled (crate::next_turn).
    pub(crate) next_turn: crate::next_turn::NextTurn,
    pub(crate) max_ctx: usize,
    /// Where a sequence's tokens end it with `ContextLength`: `max_ctx`,
    /// or never with context shift on (it shifts at `max_ctx` instead).
    pub(crate) stop_ctx: usize,
    /// Context shift's state (`None`: off; crate::context_shift).
    pub(crate) ctx_shift: Option<crate::context_shift::ContextShift>,
    /// Per-request state other than tokens (those live in the scheduler).
    pub(crate) seqs: HashMap<u64, Sequence>,
    /// This step's work, copied out of the scheduler's plan (reused).
    pub(crate) work: Vec<Scheduled>,
    /// This step's speculative proposals, per work item (reused).
    pub(crate) drafts: crate::spec::StepDrafts,
    /// The draft model that proposes them (`None`: prompt lookup).
    pub(crate) draft: Option<crate::draft::DraftModel<B>>,
    /// The draft model's requests of this step (reused).
    pub(crate) wants: Vec<crate::draft::Want>,
    pub(crate) stats: crate::EngineStatsCell,
    /// Segment jobs and the requests that wait for them (crate::segments).
    pub(crate) segments: crate::segments::Segments,
    /// This step's segment copies, as the backend takes them (reused).
    pub(crate) shifts: Vec<kiln_backend::KvShift>,
}

impl<B: Backend> EngineLoop<B> {
    pub(crate) fn run(mut self, rx: Receiver<Command>) {
        // This thread runs every kernel job: keep it on the pool's CPU.
        self.runner.backend().enter_engine_thread();
        loop {
            let cmd = if self.seqs.is_empty() && self.segments.num_parked() == 0 {
                // Nothing to compute: wait for a request, or until a noted
                // next turn is due.
                match self.next_turn.due() {
                    None => match rx.recv() {
                        Ok(c) => Some(c),
                        Err(_) => return,
                    },
                    Some(due) => match rx.recv_timeout(due.saturating_duration_since(Instant::now())) {
                        Ok(c) => Some(c),
                        Err(RecvTimeoutError::Timeout) => {
                            self.start_due_prefills();
                            None
                        }
                        Err(RecvTimeoutError::Disconnected) => Some(Command::Shutdown),
                    },
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
                Some(Command::Submit(seq, tokens, keep)) => {
                    if let Some(cs) = self.ctx_shift.as_mut() {
                        cs.add(seq.id, keep);
                    }
                    self.add(*seq, tokens)
                }
                Some(Command::LoraAttach(id, ad, reply)) => {
                    let _ = reply.send(self.runner.lora_attach(id, &ad).map_err(Into::into));
                }
                Some(Command::LoraDetach(id, reply)) => {
                    let _ = reply.send(self.runner.lora_detach(id).map_err(Into::into));
                }
                None => self.step_guarded(),
            }
        }
    }

    fn add(&mut self, seq: Sequence, tokens: Vec<TokenId>) {
        // A request never waits for optional work.
        self.cancel_warm_ups();
        // Each adapter (and scale) is a prefix-cache namespace of its own.
        let extra_key = seq.lora.as_ref().map_or(0, crate::lora::LoraHold::cache_key);
        if !seq.segments.is_empty() {
            self.add_segmented(seq, tokens, extra_key);
            self.publish_stats();
            return;
        }
        match self.sched.add(seq.id, tokens, extra_key) {
            Ok(()) => {
                self.seqs.insert(seq.id, seq);
            }
            Err(e) => {
                let _ = seq.events.send(StreamEvent::Error(format!("cannot queue the request: {e}")));
            }
        }
        self.publish_stats();
    }

    /// Runs a step; a panic inside it (a bug, never input: input is
    /// validated before it reaches the engine) fails the requests of that
    /// step instead of killing the engine thread and every later request.
    fn step_guarded(&mut self) {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.step()));
        if r.is_err() {
            tracing::error!("an engine step panicked; failing its requests");
            let ids: Vec<u64> = self.work.iter().map(|w| w.seq).collect();
            for id in ids {
                self.fail(id, "internal error in the engine step (see the server log)");
            }
            self.publish_stats();
        }
    }

    fn step(&mut self) {
        self.reap_cancelled();
        self.wake_parked();
        self.plan();
        if self.work.is_empty() {
            self.publish_stats();
            return;
        }
        self.batch.clear();
        self.propose_drafts();
        let block_size = self.block_size;
        let windowed = self.sched.kv().window().is_some();
        for (i, w) in self.work.iter().enumerate() {
            let (Some(tokens), Some(table)) = (self.sched.tokens(w.seq), self.sched.block_table(w.seq)) else {
                continue;
            };
            // Chunks come from the scheduler, which sized the block table
            // (and reserved the slots of any proposal).
            let chunk = &tokens[w.start..w.start + w.len];
            let draft = self.drafts.of(i);
            let res = if draft.is_empty() {
                let want = if w.sample { LogitsWant::Last } else { LogitsWant::None };
                self.batch.push_seq(chunk, w.start, table, block_size, want)
            } else {
                // The last token and the proposal after it, a logit row each.
                let verify = self.drafts.with_last(chunk, i);
                self.batch.push_seq(verify, w.start, table, block_size, LogitsWant::All)
            };
            let res = res.and_then(|()| {
                if !windowed {
                    return Ok(());
                }
                self.sched.window_table(w.seq, &mut self.window_table);
                self.batch.set_window_table(&self.window_table, block_size)
            });
            match res {
                Ok(()) => self.batch.set_lora(self.seqs.get(&w.seq).and_then(|s| s.lora.as_ref()).map(|h| h.lora)),
                Err(e) => tracing::error!(seq = w.seq, "bad schedule: {e}"),
            }
        }
        self.execute();
        // Requests whose segments were computed in this step go next.
        self.wake_parked();
        self.publish_stats();
    }

    /// Asks the scheduler for the step's work and handles admissions,
    /// preemptions and sequences that can never fit.
    fn plan(&mut self) {
        let plan = self.sched.schedule();
        self.work.clear();
        self.work.extend_from_slice(&plan.scheduled);
        // A prefill-only request's last chunk wants no logits.
        for w in &mut self.work {
            w.sample &= !self.seqs.get(&w.seq).is_some_and(|s| s.prefill_only);
        }
        let now = Instant::now();
        for a in &plan.admitted {
            if let Some(seq) = self.seqs.get_mut(&a.seq) {
                if !a.resumed {
                    let reused = a.cached_tokens + a.segments.copied;
                    seq.timings.cached_tokens = reused;
                    seq.timings.segment_tokens = a.segments.copied;
                    seq.timings.segment_recomputed = a.segments.computed;
                    seq.timings.prefill_tokens = seq.prompt_len.saturating_sub(reused);
                    seq.timings.queue_ms = ms(seq.submitted, now);
                }
            }
        }
        let mut tier_err = None;
        if !plan.transfers.is_empty() {
            let t0 = Instant::now();
            match crate::tier::apply(self.runner.kv_mut(), &plan.transfers) {
                Ok((saved, loaded)) => self.stats.record_tier(saved, loaded, ms(t0, Instant::now())),
                Err(e) => tier_err = Some(e),
            }
        }
        if !plan.copies.is_empty() && tier_err.is_none() {
            // After the tier's copies (a segment restored from the tier is
            // computed by its job, never copied from a slot being loaded).
            self.shifts.clear();
            self.shifts.extend(plan.copies.iter().map(|c| kiln_backend::KvShift {
                src: c.src,
                dst: c.dst,
                shift: c.shift,
            }));
            let t0 = Instant::now();
            match self.runner.kv_shift(&self.shifts) {
                Ok(()) => self.stats.record_segment_copies(self.shifts.len(), ms(t0, Instant::now())),
                Err(e) => tier_err = Some(kiln_backend::BackendError::Batch(format!("segment copy: {e}"))),
            }
        }
        // A preempted sequence's blocks are gone: the draft model starts
        // it over (crate::draft).
        for id in &plan.preempted {
            if let Some(d) = self.seqs.get_mut(id).and_then(|s| s.drafter.as_mut()) {
                d.model_pos = 0;
            }
        }
        let preempted = plan.preempted.len();
        let failed: Vec<(u64, String)> = plan.failed.iter().map(|(id, e)| (*id, e.to_string())).collect();
        if preempted > 0 {
            self.stats.record_preemptions(preempted);
        }
        for (id, e) in failed {
            // The scheduler already dropped it.
            if let Some(mut seq) = self.seqs.remove(&id) {
                seq.lora = None;
                let _ = seq.events.send(StreamEvent::Error(format!("out of KV cache memory: {e}")));
            }
        }
        if let Some(e) = tier_err {
            // A block that was not restored must not be attended to.
            tracing::error!("host KV tier copy failed: {e}");
            let ids: Vec<u64> = self.work.drain(..).map(|w| w.seq).collect();
            for id in ids {
                self.fail(id, &format!("KV tier copy failed: {e}"));
            }
        }
    }

    fn execute(&mut self) {
        let t0 = Instant::now();
        self.draws.clear();
        if self.runner.backend().samples_on_device() {
            // One entry per logit row, in work order (= logit row order). A
            // constrained row is sampled on the host, after its mask.
            for (i, w) in self.work.iter().enumerate().filter(|(_, w)| w.sample) {
                let proposed = self.drafts.of(i).len();
                if proposed > 0 {
                    // Verified on the host, row by row.
                    self.draws.extend(std::iter::repeat_n(None, proposed + 1));
                    continue;
                }
                let seq = self.seqs.get_mut(&w.seq).filter(|s| s.matcher.is_none());
                self.draws.push(seq.and_then(|s| s.sampler.device_draw()).map(device_draw));
            }
        }
        let (res, mask_errors) = self.forward_and_mask();
        let dt = ms(t0, Instant::now());
        if let Err(e) = res {
            let ids: Vec<u64> = self.work.iter().map(|w| w.seq).collect();
            for id in ids {
                self.fail(id, &format!("forward pass failed: {e}"));
            }
            return;
        }
        for (id, e) in mask_errors {
            self.fail(id, &format!("the output constraint failed: {e}"));
        }
        let vocab = self.runner.config().vocab_size;
        let mut next_row = 0;
        for i in 0..self.work.len() {
            let w = self.work[i];
            // Logit rows follow the sampled work items in order (a
            // speculating item has one per proposed token more).
            let row = next_row;
            let proposed = self.drafts.of(i).len();
            next_row += usize::from(w.sample) * (1 + proposed);
            if proposed > 0 {
                self.verify(i, row, vocab);
                continue;
            }
            let Some(seq) = self.seqs.get_mut(&w.seq) else { continue };
            // A prompt with segments may have several runs in one step.
            let first_run = i == 0 || self.work[i - 1].seq != w.seq;
            if w.start < seq.prompt_len && first_run {
                seq.timings.prefill_ms += dt;
            }
            let computed = match self.sched.advance(w.seq, w.len) {
                Ok(all) => all,
                Err(e) => {
                    tracing::error!(seq = w.seq, "advance: {e}");
                    false
                }
            };
            if seq.prefill_only {
                if computed {
                    self.finish(w.seq, FinishReason::Length);
                }
                continue;
            }
            if !w.sample {
                continue;
            }
            let history = self.sched.tokens(w.seq).unwrap_or(&[]);
            let sampled = match (self.draws.get(row), self.picks.get(row)) {
                (Some(Some(_)), Some(&token)) => Sampled { token, logprob: 0.0, top_logprobs: Vec::new() },
                _ => match self.logits.get_mut(row * vocab..(row + 1) * vocab) {
                    Some(logits) => {
                        if let Some(m) = &seq.matcher {
                            m.apply_mask(logits);
                            let left = seq.stop.max_tokens.saturating_sub(seq.generated);
                            let budget = left.min(self.stop_ctx.saturating_sub(history.len()));
                            if budget <= closing_margin(seq.stop.max_tokens) {
                                m.apply_closing_bias(logits);
                            }
                        }
                        seq.sampler.sample(logits, history)
                    }
                    None => {
                        self.fail(w.seq, "internal error: the forward pass returned no logits for this sequence");
                        continue;
                    }
                },
            };
            let (token, total) = (sampled.token, history.len() + 1);
            seq.push_token(sampled, &self.eos, self.stop_ctx, total);
            let _ = self.sched.append(w.seq, token);
            if let Err(e) = self.follow_constraint(w.seq, token, total) {
                self.fail(w.seq, &format!("the output constraint failed: {e}"));
                continue;
            }
            if self.ctx_shift.is_some() {
                self.shift_if_full(w.seq);
            }
            if let Some(reason) = self.seqs.get(&w.seq).and_then(|s| s.finished) {
                self.finish(w.seq, reason);
            }
        }
        self.stats.record_step(self.batch.len(), dt);
    }

    /// Proposes tokens for each decoding sequence that speculates, within
    /// its room (tokens left to generate, context left) and the KV slots
    /// the scheduler can reserve without preempting anyone.
    fn propose_drafts(&mut self) {
        self.drafts.clear(self.work.len());
        if self.draft.is_some() {
            return self.propose_with_model();
        }
        for (i, w) in self.work.iter().enumerate() {
            if !w.sample || w.len != 1 {
                continue;
            }
            let Some(seq) = self.seqs.get_mut(&w.seq) else { continue };
            let Some(drafter) = seq.drafter.as_mut() else { continue };
            let Some(tokens) = self.sched.tokens(w.seq) else { continue };
            // Verifying k proposals yields up to k + 1 tokens.
            let left = seq.stop.max_tokens.saturating_sub(seq.generated + 1);
            let room = left.min(self.max_ctx.saturating_sub(tokens.len() + 1));
            let total = tokens.len();
            let proposal = self.drafts.propose(i, drafter, tokens, room);
            if proposal > 0 && !self.sched.reserve(w.seq, total + proposal) {
                self.drafts.drop_last(i);
            }
        }
    }

    /// [`Self::propose_drafts`] with the draft model: each speculating
    /// sequence gets its proposal length and reserves the slots, then the
    /// draft catches up on its tokens (within the step's catch-up rows)
    /// and proposes for all of them at once. A failed draft pass costs
    /// this step's proposals only: the requests go on without them.
    fn propose_with_model(&mut self) {
        let Some(draft) = self.draft.as_mut() else { return };
        self.wants.clear();
        let mut catch_up = draft.catch_up;
        for (i, w) in self.work.iter().enumerate() {
            if !w.sample || w.len != 1 {
                continue;
            }
            let Some(seq) = self.seqs.get_mut(&w.seq) else { continue };
            // The first token comes from the prompt's step alone (a prompt
            // found in the prefix cache computes its last token as a
            // one-row step): catching the draft up on the prompt would
            // delay it.
            if seq.generated == 0 {
                continue;
            }
            let Some(drafter) = seq.drafter.as_mut() else { continue };
            let Some(tokens) = self.sched.tokens(w.seq) else { continue };
            let total = tokens.len();
            let left = seq.stop.max_tokens.saturating_sub(seq.generated + 1);
            // The draft writes positions up to total + k - 2.
            let ctx = self.max_ctx.min(draft.max_ctx() + 1);
            let room = left.min(ctx.saturating_sub(total + 1));
            let mut k = drafter.next_len(room);
            if k == 0 || catch_up == 0 {
                // Paused (or no room): the draft catches up when the
                // sequence proposes again.
                continue;
            }
            let from = drafter.model_pos.min(total - 1);
            let behind = total - from;
            if behind > catch_up {
                // Catch up what the step allows; propose in a later one.
                k = 0;
            }
            let rows = behind.min(catch_up);
            catch_up -= rows;
            if k > 0 && !self.sched.reserve(w.seq, total + k) {
                k = 0;
            }
            self.wants.push(crate::draft::Want { item: i, from, total: from + rows, k });
        }
        if self.wants.is_empty() {
            return;
        }
        let (sched, wants) = (&self.sched, &self.wants);
        let seq_of = |w: &crate::draft::Want| self.work[w.item].seq;
        let res = draft.propose(
            wants,
            |w| sched.tokens(seq_of(w)).unwrap_or_default(),
            |w| sched.block_table(seq_of(w)).unwrap_or_default(),
            self.block_size,
        );
        match res {
            Ok(proposals) => {
                for (w, p) in wants.iter().zip(proposals) {
                    // Positions written: the catch-up rows, then each
                    // proposal but the last.
                    let held = w.total + p.len().saturating_sub(1);
                    let id = self.work[w.item].seq;
                    if let Some(d) = self.seqs.get_mut(&id).and_then(|s| s.drafter.as_mut()) {
                        d.model_pos = held;
                    }
                    if !p.is_empty() {
                        self.drafts.set(w.item, p);
                    }
                }
            }
            Err(e) => {
                tracing::warn!("the draft model's pass failed; this step goes without proposals: {e}");
                for w in wants {
                    let id = self.work[w.item].seq;
                    if let Some(d) = self.seqs.get_mut(&id).and_then(|s| s.drafter.as_mut()) {
                        d.model_pos = 0;
                    }
                }
            }
        }
    }

    /// Verifies item `i`'s proposal against its logit rows from `row` on:
    /// samples each row with the sequence's own sampler and history (the
    /// module docs of `spec` say why that is exact), keeps the tokens while
    /// they agree with the proposal, and ends at the first that does not
    /// (it is kept too: it is what plain decoding would have drawn there),
    /// or after a token past the whole proposal.
    fn verify(&mut self, i: usize, row: usize, vocab: usize) {
        let w = self.work[i];
        let proposed = self.drafts.of(i).len();
        if let Err(e) = self.sched.advance(w.seq, 1) {
            tracing::error!(seq = w.seq, "advance: {e}");
        }
        let mut kept = 0;
        for (j, logits) in self.logits[row * vocab..].chunks_exact_mut(vocab).take(proposed + 1).enumerate() {
            let Some(seq) = self.seqs.get_mut(&w.seq) else { return };
            let history = self.sched.tokens(w.seq).unwrap_or(&[]);
            let sampled = seq.sampler.sample(logits, history);
            let (token, total) = (sampled.token, history.len() + 1);
            seq.push_token(sampled, &self.eos, self.stop_ctx, total);
            let _ = self.sched.append(w.seq, token);
            let agrees = self.drafts.of(i).get(j) == Some(&token);
            if agrees {
                kept += 1;
            }
            if !agrees || seq.finished.is_some() {
                break;
            }
            // Its K/V were computed in this step, at the proposal's position.
            if let Err(e) = self.sched.advance(w.seq, 1) {
                tracing::error!(seq = w.seq, "advance: {e}");
            }
        }
        let Some(seq) = self.seqs.get_mut(&w.seq) else { return };
        if let Some(d) = seq.drafter.as_mut() {
            d.record(proposed, kept);
            // The draft model's rows past the last kept proposal were
            // for tokens that were not kept.
            d.model_pos = d.model_pos.min(w.start + 1 + kept);
        }
        self.stats.record_draft(proposed, kept);
        if let Some(reason) = seq.finished {
            self.finish(w.seq, reason);
        } else if self.ctx_shift.is_some() {
            self.shift_if_full(w.seq);
        }
    }

    /// Runs the forward pass and computes the masks of the constrained
    /// sequences that sample in this step: on another thread while the pass
    /// runs on a device, before it on the CPU (nothing is spawned when no
    /// sequence is constrained). Returns the pass's result and the
    /// sequences whose mask failed.
    fn forward_and_mask(&mut self) -> (kiln_models::Result<()>, Vec<(u64, String)>) {
        if self.seqs.values().all(|s| s.matcher.is_none()) {
            // The common step: nothing constrained, nothing gathered.
            return (self.runner.forward(&self.batch, &self.draws, &mut self.picks, &mut self.logits), Vec::new());
        }
        let sampled: Vec<u64> = self.work.iter().filter(|w| w.sample).map(|w| w.seq).collect();
        let mut matchers: Vec<(u64, &mut kiln_grammar::Matcher)> = self
            .seqs
            .iter_mut()
            .filter(|(id, _)| sampled.contains(id))
            .filter_map(|(&id, s)| Some((id, s.matcher.as_mut()?)))
            .collect();
        let (runner, batch, draws, picks, logits) =
            (&mut self.runner, &self.batch, &self.draws, &mut self.picks, &mut self.logits);
        if matchers.is_empty() {
            return (runner.forward(batch, draws, picks, logits), Vec::new());
        }
        // On the CPU the kernel threads use every core during the pass: a
        // mask thread would only slow them (measured: docs/structured-output.md).
        if !runner.backend().samples_on_device() {
            let errors = compute_masks(&mut matchers);
            return (runner.forward(batch, draws, picks, logits), errors);
        }
        std::thread::scope(|scope| {
            let masks = scope.spawn(move || compute_masks(&mut matchers));
            let res = runner.forward(batch, draws, picks, logits);
            let errors = masks.join().unwrap_or_else(|_| sampled.iter().map(|&id| (id, "panicked".into())).collect());
            (res, errors)
        })
    }

    /// Advances a constrained sequence's matcher over its new token, then
    /// appends the tokens the grammar forces (they are computed in the next
    /// step, as one chunk) and ends the sequence when the grammar allows
    /// nothing more.
    fn follow_constraint(&mut self, id: u64, token: TokenId, mut total: usize) -> Result<(), String> {
        let Some(seq) = self.seqs.get_mut(&id) else { return Ok(()) };
        if seq.finished.is_some() {
            return Ok(());
        }
        let Some(m) = seq.matcher.as_mut() else { return Ok(()) };
        m.commit(token).map_err(|e| e.to_string())?;
        let forced = m.forced_tokens();
        let stopped = m.is_stopped();
        for t in forced {
            total += 1;
            let s = Sampled { token: t, logprob: 0.0, top_logprobs: Vec::new() };
            seq.push_token(s, &self.eos, self.stop_ctx, total);
            let _ = self.sched.append(id, t);
            if seq.finished.is_some() {
                return Ok(());
            }
        }
        if stopped {
            seq.finished = Some(FinishReason::Stop);
        }
        Ok(())
    }

    fn reap_cancelled(&mut self) {
        let cancelled: Vec<u64> = self.seqs.iter().filter(|(_, s)| s.is_cancelled()).map(|(&id, _)| id).collect();
        for id in cancelled {
            self.finish(id, FinishReason::Cancelled);
        }
    }

    /// Ends a sequence: sends the final event, notes a chat answer's next
    /// turn (crate::next_turn), then frees its blocks.
    pub(crate) fn finish(&mut self, id: u64, reason: FinishReason) {
        self.segment_job_done(id);
        // A shifted conversation is not what its client sends next.
        let shifted = self.ctx_shift.as_mut().map_or(0, |c| c.remove(id));
        if let Some(mut seq) = self.seqs.remove(&id) {
            seq.finish(reason);
            if seq.prefill_only {
                self.warm_up_done(id);
            } else {
                self.stats.record_finish(&seq.timings);
                if shifted == 0 {
                    self.note_for_next_turn(id, &seq, reason);
                }
            }
        }
        let _ = self.sched.finish(id);
    }

    /// Ends a sequence with an error event.
    fn fail(&mut self, id: u64, msg: &str) {
        self.segment_job_done(id);
        if let Some(c) = self.ctx_shift.as_mut() {
            c.remove(id);
        }
        let _ = self.sched.finish(id);
        if let Some(mut seq) = self.seqs.remove(&id) {
            if seq.prefill_only {
                self.warm_up_done(id);
            }
            seq.lora = None;
            let _ = seq.events.send(StreamEvent::Error(msg.to_string()));
        }
    }

    fn publish_stats(&self) {
        let kv = self.sched.kv();
        self.stats.set_queue(
            self.sched.num_waiting() + self.segments.num_parked(),
            self.sched.num_running().saturating_sub(self.next_turn.num_warming()),
            kv.num_free_blocks(),
            kv.num_used_blocks(),
        );
    }

    fn abort_all(&mut self, why: &str) {
        self.abort_parked(why);
        let ids: Vec<u64> = self.seqs.keys().copied().collect();
        for id in ids {
            self.fail(id, why);
        }
    }
}

/// Computes each matcher's next mask; returns the sequences whose mask failed.
fn compute_masks(matchers: &mut [(u64, &mut kiln_grammar::Matcher)]) -> Vec<(u64, String)> {
    matchers.iter_mut().filter_map(|(id, m)| m.compute_mask().err().map(|e| (*id, e.to_string()))).collect()
}

/// How many tokens before the end of its budget a constrained sequence is
/// steered to close its answer ([`kiln_grammar::Matcher::apply_closing_bias`]):
/// 32, or a third of a small budget.
fn closing_margin(max_tokens: usize) -> usize {
    (max_tokens / 3).min(32)
}

/// The host sampler's draw for a row, as the backends take it.
fn device_draw(d: kiln_core::sample::DeviceDraw) -> Draw {
    Draw {
        greedy: d.greedy,
        temperature: d.temperature,
        top_k: d.top_k,
        top_p: d.top_p,
        min_p: d.min_p,
        uniform: d.uniform,
    }
}
