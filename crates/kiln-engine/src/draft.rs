//! Speculative decoding with a draft model: a smaller model with the
//! target's vocabulary, loaded in the same engine on the same device,
//! proposes the next tokens; the target verifies them in one pass
//! (crate::spec says why the verification is exact).
//!
//! **Greedy drafts.** The draft proposes its most likely token at each
//! position, whatever the request's sampler. A proposal is then a
//! deterministic function of the text so far, and speculative sampling's
//! acceptance rule reduces to the one prompt lookup uses (draw from the
//! target, keep the draw while it equals the proposal): the output is
//! plain decoding's, token for token and seed for seed. Sampling the draft
//! from its own distribution would accept a little more at high
//! temperatures but give up that identity.
//!
//! **KV.** The draft has its own paged KV memory with the target's block
//! layout (same block size, same number of blocks): a sequence's block
//! table addresses both, so the draft needs no block manager of its own,
//! and what frees, preempts or reserves the target's blocks does the same
//! for the draft's. The draft computes a sequence's tokens lazily: before
//! each proposal it catches up from the last position it holds (the whole
//! prompt the first time, in pieces of at most `catch_up` rows per step;
//! then one or two tokens per step). Positions it wrote for proposals that
//! were rejected are simply computed again. A block that the target's
//! prefix cache shares may hold another sequence's draft values for the
//! same tokens, or none: that can only lower acceptance, never change
//! output, so the draft starts every sequence at position 0.

use kiln_backend::{Backend, Draw};
use kiln_core::TokenId;
use kiln_models::{ForwardBatch, LogitsWant, Runner};

/// One sequence's request for proposals in a step.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Want {
    /// Its work item in the step.
    pub(crate) item: usize,
    /// First position the draft does not hold yet.
    pub(crate) from: usize,
    /// Tokens of the sequence (the last one is at `total - 1`).
    pub(crate) total: usize,
    /// Proposals wanted (0: catch up only).
    pub(crate) k: usize,
}

/// A draft model on the engine's device.
pub(crate) struct DraftModel<B: Backend> {
    runner: Runner<B>,
    /// Most catch-up rows per step, over all sequences.
    pub(crate) catch_up: usize,
    batch: ForwardBatch,
    logits: Vec<f32>,
    picks: Vec<TokenId>,
    draws: Vec<Option<Draw>>,
    /// Per want: the proposal so far.
    proposals: Vec<Vec<TokenId>>,
    /// Wants with a logit row in the current round.
    rows: Vec<usize>,
}

impl<B: Backend> DraftModel<B> {
    pub(crate) fn new(runner: Runner<B>, catch_up: usize) -> Self {
        Self {
            runner,
            catch_up: catch_up.max(1),
            batch: ForwardBatch::new(),
            logits: Vec::new(),
            picks: Vec::new(),
            draws: Vec::new(),
            proposals: Vec::new(),
            rows: Vec::new(),
        }
    }

    /// Positions the draft can compute (its context may be shorter than
    /// the target's).
    pub(crate) fn max_ctx(&self) -> usize {
        self.runner.max_ctx()
    }

    /// Proposals for `wants`, each computed over `tokens(want)` (the
    /// sequence's tokens) and its block table `table(want)`: first the
    /// catch-up rows `from..total` in one pass, whose last row drafts the
    /// first token, then one pass per further token. Returns each want's
    /// proposal (empty where it wanted none), or the pass's error (then
    /// the draft's KV for these sequences is unknown).
    pub(crate) fn propose<'a>(
        &mut self,
        wants: &[Want],
        tokens: impl Fn(&Want) -> &'a [TokenId],
        table: impl Fn(&Want) -> &'a [u32],
        block_size: usize,
    ) -> kiln_models::Result<&[Vec<TokenId>]> {
        self.proposals.resize_with(wants.len(), Vec::new);
        self.proposals.iter_mut().for_each(Vec::clear);
        self.batch.clear();
        self.rows.clear();
        for (j, w) in wants.iter().enumerate() {
            let chunk = tokens(w).get(w.from..w.total).unwrap_or_default();
            if chunk.is_empty() {
                continue;
            }
            let want = if w.k > 0 { LogitsWant::Last } else { LogitsWant::None };
            self.batch.push_seq(chunk, w.from, table(w), block_size, want)?;
            if w.k > 0 {
                self.rows.push(j);
            }
        }
        let mut round = 0;
        while !self.batch.is_empty() {
            self.pass()?;
            round += 1;
            // The next round: one row per want that wants more.
            self.batch.clear();
            let rows = std::mem::take(&mut self.rows);
            for &j in &rows {
                let w = &wants[j];
                let Some(&last) = self.proposals[j].last() else { continue };
                if round < w.k {
                    // The token just proposed, at its position.
                    self.batch.push_seq(&[last], w.total - 1 + round, table(w), block_size, LogitsWant::Last)?;
                    self.rows.push(j);
                }
            }
        }
        Ok(&self.proposals)
    }

    /// Runs the batch and appends each logit row's greedy token to its
    /// want's proposal.
    fn pass(&mut self) -> kiln_models::Result<()> {
        let device = self.runner.backend().samples_on_device();
        self.draws.clear();
        if device {
            self.draws.resize(self.rows.len(), Some(Draw::GREEDY));
        }
        self.runner.forward(&self.batch, &self.draws, &mut self.picks, &mut self.logits)?;
        let vocab = self.runner.config().vocab_size;
        for (r, &j) in self.rows.iter().enumerate() {
            let token = if device {
                self.picks.get(r).copied()
            } else {
                self.logits.get(r * vocab..(r + 1) * vocab).map(argmax)
            };
            if let Some(t) = token {
                self.proposals[j].push(t);
            }
        }
        Ok(())
    }
}

/// The index of the largest value (the lowest among equals), as greedy
/// sampling picks.
fn argmax(row: &[f32]) -> TokenId {
    let mut best = 0;
    for (i, &v) in row.iter().enumerate() {
        if v > row[best] {
            best = i;
        }
    }
    best as TokenId
}

/// Opens the draft model at `path` for `target`, whose tokenizer is
/// `vocab`: a text generation model whose tokenizer gives every token the
/// same id (checked token by token), or a clear error.
pub(crate) fn open(
    path: &std::path::Path,
    target: &kiln_models::OpenedModel,
    vocab: &kiln_tokenize::Tokenizer,
) -> crate::Result<kiln_models::OpenedModel> {
    use crate::EngineError::InvalidRequest;
    let name = path.display();
    let opened = kiln_models::open(path)?;
    if opened.config.arch.is_encoder() {
        return Err(InvalidRequest(format!("draft model {name}: an encoder cannot draft text")));
    }
    let tok_err = |e: kiln_tokenize::TokenizeError| crate::EngineError::Tokenizer(format!("draft model {name}: {e}"));
    let tokenizer = match opened.gguf.as_ref() {
        Some(g) => kiln_tokenize::Tokenizer::from_gguf_metadata(g.metadata()).map_err(tok_err)?,
        None => kiln_tokenize::Tokenizer::from_hf_dir(path).map_err(tok_err)?,
    };
    if let Some(why) = vocab_mismatch(vocab, &tokenizer) {
        return Err(InvalidRequest(format!(
            "draft model {name} does not share the model's vocabulary ({why}): a draft must tokenize text the same way"
        )));
    }
    if opened.config.vocab_size > target.config.vocab_size {
        return Err(InvalidRequest(format!(
            "draft model {name} has {} logits per token; the model has {}",
            opened.config.vocab_size, target.config.vocab_size
        )));
    }
    Ok(opened)
}

/// Why two tokenizers give some token different ids, if they do.
fn vocab_mismatch(a: &kiln_tokenize::Tokenizer, b: &kiln_tokenize::Tokenizer) -> Option<String> {
    if a.vocab_size() != b.vocab_size() {
        return Some(format!("{} tokens against {}", a.vocab_size(), b.vocab_size()));
    }
    (0..a.vocab_size() as u32).find(|&id| a.token_to_bytes(id) != b.token_to_bytes(id)).map(|id| {
        let show = |t: &kiln_tokenize::Tokenizer| {
            String::from_utf8_lossy(t.token_to_bytes(id).unwrap_or_default()).into_owned()
        };
        format!("token {id} is {:?} against {:?}", show(a), show(b))
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn argmax_takes_the_lowest_of_ties() {
        assert_eq!(super::argmax(&[0.0, 2.0, 1.0, 2.0]), 1);
        assert_eq!(super::argmax(&[f32::NEG_INFINITY, -1.0]), 1);
    }
}
