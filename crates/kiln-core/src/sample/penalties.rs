//! The stages that reshape logits before any truncation: logit bias, the
//! multiplicative repetition penalty and the OpenAI presence / frequency
//! penalties. Each works in place on the full vocabulary.

use crate::types::TokenId;

/// Occurrence counts of the tokens in the penalty window.
///
/// Backed by a dense per-vocabulary array that is cleared entry by entry
/// after use, so filling and clearing cost O(window), not O(vocab), and no
/// memory is allocated once the array has grown to the vocabulary size.
#[derive(Debug, Default, Clone)]
pub(crate) struct TokenCounts {
    dense: Vec<u32>,
    unique: Vec<(TokenId, u32)>,
}

impl TokenCounts {
    /// Count the tokens of `window` that are inside a vocabulary of `vocab`.
    pub(crate) fn fill(&mut self, window: &[TokenId], vocab: usize) {
        self.unique.clear();
        if self.dense.len() < vocab {
            self.dense.resize(vocab, 0);
        }
        for &t in window {
            if let Some(c) = self.dense.get_mut(t as usize).filter(|_| (t as usize) < vocab) {
                *c += 1;
            }
        }
        for &t in window {
            if let Some(c) = self.dense.get_mut(t as usize) {
                if *c > 0 {
                    self.unique.push((t, *c));
                    *c = 0;
                }
            }
        }
    }

    /// Each distinct token of the window with its count, in order of first
    /// appearance.
    pub(crate) fn unique(&self) -> &[(TokenId, u32)] {
        &self.unique
    }
}

/// Add `bias` to the logits of the given tokens; ids outside the vocabulary
/// are ignored.
pub(crate) fn apply_logit_bias(logits: &mut [f32], bias: &[(TokenId, f32)]) {
    for &(t, b) in bias {
        if let Some(l) = logits.get_mut(t as usize) {
            *l += b;
        }
    }
}

/// HF / llama.cpp repetition penalty: a seen token's positive logit is
/// divided by `penalty`, a negative one multiplied by it.
pub(crate) fn apply_repetition_penalty(logits: &mut [f32], counts: &TokenCounts, penalty: f32) {
    if penalty == 1.0 {
        return;
    }
    for &(t, _) in counts.unique() {
        if let Some(l) = logits.get_mut(t as usize) {
            *l = if *l > 0.0 { *l / penalty } else { *l * penalty };
        }
    }
}

/// OpenAI penalties: `logit -= count * frequency + presence` for every token
/// seen at least once.
pub(crate) fn apply_presence_frequency(logits: &mut [f32], counts: &TokenCounts, presence: f32, frequency: f32) {
    if presence == 0.0 && frequency == 0.0 {
        return;
    }
    for &(t, c) in counts.unique() {
        if let Some(l) = logits.get_mut(t as usize) {
            *l -= c as f32 * frequency + presence;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(window: &[TokenId], vocab: usize) -> TokenCounts {
        let mut c = TokenCounts::default();
        c.fill(window, vocab);
        c
    }

    #[test]
    fn counts_are_exact_and_reusable() {
        let mut c = TokenCounts::default();
        c.fill(&[3, 1, 3, 3, 9, 1], 5);
        assert_eq!(c.unique(), &[(3, 3), (1, 2)]); // 9 is outside the vocab
        c.fill(&[2], 5);
        assert_eq!(c.unique(), &[(2, 1)]); // nothing left over from the last fill
    }

    #[test]
    fn logit_bias_adds_and_ignores_out_of_vocab() {
        let mut l = [0.0, 1.0, 2.0, 3.0];
        apply_logit_bias(&mut l, &[(1, 5.0), (3, -100.0), (99, 1.0)]);
        assert_eq!(l, [0.0, 6.0, 2.0, -97.0]);
    }

    #[test]
    fn repetition_penalty_divides_positive_multiplies_negative() {
        let mut l = [2.0, -2.0, 4.0, -1.0, 0.0];
        apply_repetition_penalty(&mut l, &counts(&[0, 1, 1, 4], 5), 2.0);
        assert_eq!(l, [1.0, -4.0, 4.0, -1.0, 0.0]);
    }

    #[test]
    fn presence_and_frequency_follow_openai() {
        let mut l = [1.0, 1.0, 1.0, 1.0];
        apply_presence_frequency(&mut l, &counts(&[2, 2, 2, 0], 4), 0.5, 0.25);
        // token 0: 1 - (1*0.25 + 0.5); token 2: 1 - (3*0.25 + 0.5)
        assert_eq!(l, [0.25, 1.0, -0.25, 1.0]);
    }
}
