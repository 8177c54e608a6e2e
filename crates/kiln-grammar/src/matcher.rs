//! [`Matcher`]: one sequence's position in a compiled grammar and its last mask.
//!
//! Per step: [`Matcher::compute_mask`] (may run on another thread while the
//! forward pass runs), [`Matcher::apply_mask`] on the logits, sample,
//! [`Matcher::commit`] the token, then append [`Matcher::forced_tokens`] to the
//! sequence. Forced tokens advance the matcher, so the next step computes a new
//! mask before sampling again.

use std::sync::Arc;

use crate::closing::{JsonScan, TokenClasses};
use crate::GrammarError;
use toktrie::SimpleVob;

/// One sequence's matcher. `Send`; a clone continues independently (forks,
/// speculative checks) and shares the compiled lexer cache.
#[derive(Clone)]
pub struct Matcher {
    inner: llguidance::Matcher,
    /// The last computed mask, `vocab_size` bits; empty before the first.
    mask: SimpleVob,
    vocab_size: usize,
    classes: Arc<TokenClasses>,
    /// The answer's JSON so far (for [`Matcher::apply_closing_bias`]).
    scan: JsonScan,
}

impl Matcher {
    pub(crate) fn new(
        inner: llguidance::Matcher,
        vocab_size: usize,
        classes: Arc<TokenClasses>,
        scan: JsonScan,
    ) -> Self {
        Self { inner, mask: SimpleVob::alloc(vocab_size), vocab_size, classes, scan }
    }

    /// Steers the next token toward the shortest valid ending: each allowed
    /// token's logit moves by 20 nats per step it brings the answer's JSON
    /// closer to complete (a string, container or owed value closed), or
    /// further from it; an end-of-sequence token gains the most. Applied
    /// after [`Matcher::apply_mask`] in the last tokens of a sequence's
    /// budget, so that an answer cut by its token limit is still complete
    /// (docs/structured-output.md).
    pub fn apply_closing_bias(&self, logits: &mut [f32]) {
        self.classes.bias(&self.scan, logits, self.allowed_ids());
    }

    /// Computes the mask of tokens allowed next: EOS tokens are allowed when the
    /// grammar accepts; when it is stopped only EOS tokens are.
    pub fn compute_mask(&mut self) -> Result<(), GrammarError> {
        match self.inner.compute_mask_or_eos() {
            Ok(mask) => {
                self.mask = mask;
                Ok(())
            }
            Err(e) => {
                self.mask.set_all(false);
                Err(GrammarError::Matcher(e.to_string()))
            }
        }
    }

    /// Sets every logit outside the last computed mask to `-inf`. Rows past the
    /// tokenizer's vocabulary (padding of the output matrix) are always `-inf`.
    pub fn apply_mask(&self, logits: &mut [f32]) {
        let words = self.mask.as_slice();
        for (chunk, &word) in logits.chunks_mut(32).zip(words) {
            match word {
                u32::MAX => {}
                0 => chunk.fill(f32::NEG_INFINITY),
                _ => {
                    // Branch-free, so the compiler vectorizes the select.
                    for (bit, l) in chunk.iter_mut().enumerate() {
                        let keep = (word >> bit) & 1 != 0;
                        *l = if keep { *l } else { f32::NEG_INFINITY };
                    }
                }
            }
        }
        // Logits past the mask's words (and the mask's own bits past the
        // vocabulary are never set).
        let covered = words.len() * 32;
        if logits.len() > covered {
            logits[covered..].fill(f32::NEG_INFINITY);
        }
    }

    /// The allowed token ids of the last computed mask, in order.
    pub(crate) fn allowed_ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.mask.as_slice().iter().enumerate().flat_map(|(w, &word)| {
            let mut bits = word;
            std::iter::from_fn(move || {
                (bits != 0).then(|| {
                    let b = bits.trailing_zeros();
                    bits &= bits - 1;
                    (w * 32) as u32 + b
                })
            })
        })
    }

    /// Whether `token` is allowed by the last computed mask.
    pub fn allows(&self, token: u32) -> bool {
        (token as usize) < self.vocab_size && self.mask.is_allowed(token)
    }

    /// Number of tokens the last computed mask allows.
    pub fn num_allowed(&self) -> usize {
        self.mask.num_set()
    }

    /// Advances over a sampled token. An EOS token is fine when the grammar
    /// accepts (the matcher then stops) or has already stopped.
    pub fn commit(&mut self, token: u32) -> Result<(), GrammarError> {
        if (token as usize) >= self.vocab_size {
            return Err(GrammarError::Matcher(format!("token {token} is outside the vocabulary")));
        }
        if self.inner.is_stopped() {
            if let Some(e) = self.inner.get_error() {
                return Err(GrammarError::Matcher(e));
            }
            return if self.is_eos(token) {
                Ok(())
            } else {
                Err(GrammarError::Matcher(format!("token {token} after the grammar stopped")))
            };
        }
        self.inner.consume_token(token).map_err(|e| GrammarError::Matcher(e.to_string()))?;
        self.scan.push(self.classes.bytes(token));
        Ok(())
    }

    /// Tokens the grammar forces next (fast-forward), already consumed by the
    /// matcher; empty when none (or when the tokenizer's tokenization of text
    /// fragments is not canonical, as with SentencePiece).
    pub fn forced_tokens(&mut self) -> Vec<u32> {
        if self.inner.is_stopped() {
            return Vec::new();
        }
        let forced = self.inner.consume_ff_tokens();
        for &t in &forced {
            self.scan.push(self.classes.bytes(t));
        }
        forced
    }

    /// The grammar is complete and allows nothing more but end-of-sequence (or
    /// the matcher failed: see [`Matcher::error`]).
    pub fn is_stopped(&self) -> bool {
        self.inner.is_stopped()
    }

    /// Whether the output so far is a complete match (EOS would be allowed).
    pub fn is_accepting(&mut self) -> bool {
        self.inner.is_accepting().unwrap_or(false)
    }

    /// Why the matcher failed, if it did.
    pub fn error(&self) -> Option<String> {
        self.inner.get_error()
    }

    fn is_eos(&self, token: u32) -> bool {
        self.inner.tok_env().is_ok_and(|env| env.tok_trie().eos_tokens().contains(&token))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::tiny_tokenizer;
    use crate::{Constraint, GrammarLimits, Grammars};

    fn _assert_send<T: Send>() {}
    fn _assert_send_sync<T: Send + Sync>() {}
    #[allow(dead_code)]
    fn assert_thread_bounds() {
        _assert_send::<Matcher>();
        _assert_send_sync::<Grammars>();
        _assert_send_sync::<crate::Compiled>();
    }

    #[test]
    fn apply_mask_blocks_disallowed_and_padding() {
        let tok = tiny_tokenizer();
        let g = Grammars::new(&tok, GrammarLimits::default()).expect("grammars");
        let mut m = g.compile(&Constraint::Lark("start: \"in\" | \"x\"".into())).expect("compile").matcher();
        m.compute_mask().expect("mask");
        let n = tok.vocab_size();
        let mut logits = vec![1.0f32; n + 40];
        m.apply_mask(&mut logits);
        let allowed: Vec<usize> = (0..logits.len()).filter(|&i| logits[i].is_finite()).collect();
        let want: Vec<usize> = (0..n as u32).filter(|&t| m.allows(t)).map(|t| t as usize).collect();
        assert_eq!(allowed, want);
        assert!(m.allows(u32::from(b'x')));
        assert!(!m.allows(u32::from(b'y')));
        assert!(!m.allows(u32::MAX));
    }
}
