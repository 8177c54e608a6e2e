//! Speculative decoding by prompt lookup: propose the tokens that followed
//! the latest earlier occurrence of the sequence's last few tokens, verify
//! them in one forward pass, keep the longest agreeing run.
//!
//! **Exactness.** A lookup proposal is deterministic, so speculative
//! sampling's rule (accept a proposed token `d` with probability `p(d)`,
//! else draw from `p` without `d`) is the same as drawing `t ~ p` with the
//! sequence's own sampler and keeping it, accepted when `t == d`. The
//! verifier does exactly that, position by position, with the history
//! grown by the tokens kept so far: every sampler option (penalties, bias,
//! top-k/p, min-p, logprobs) sees what plain decoding would, and the
//! sampler's random stream is consumed one draw per output token, as in
//! plain decoding. With the same logits, the output equals plain decoding's
//! token for token, greedy or sampled, seed for seed.
//!
//! **Adaptive.** The proposal length grows after a fully accepted run and
//! halves after a rejection at its first token; after several proposals in
//! a row that kept nothing, the sequence stops proposing for a while (text
//! that does not repeat pays for no verification rows).

use kiln_core::TokenId;

/// Longest n-gram looked up (then shorter ones, down to [`MIN_NGRAM`]).
const MAX_NGRAM: usize = 4;
/// Shortest: two-token matches (". The", "of the") propose too much that
/// is wrong in text that does not repeat: on the summarize and chat
/// workloads 3 cut the proposals by 70% and 47% for the same or nearly the
/// same tokens kept, and the rewrite kept as many (benches/ngram_sim.py).
const MIN_NGRAM: usize = 3;
/// How far back the lookup searches (tokens).
const SEARCH_WINDOW: usize = 8192;
/// Proposals that keep nothing, in a row, before a pause.
const MISSES_BEFORE_PAUSE: u32 = 3;
/// Decode steps of a pause (doubling with each pause in a row, to a cap).
const PAUSE_STEPS: u32 = 16;
const MAX_PAUSE_STEPS: u32 = 256;

/// Engine-wide speculation settings.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SpecConfig {
    /// Most tokens proposed per step (0: speculation off).
    pub max_draft: usize,
}

impl SpecConfig {
    /// Prompt lookup with up to `max_draft` tokens per step.
    pub fn ngram(max_draft: usize) -> Self {
        Self { max_draft }
    }

    /// Whether speculation is on.
    pub fn enabled(&self) -> bool {
        self.max_draft > 0
    }
}

/// One sequence's proposer and its acceptance record.
#[derive(Debug, Clone)]
pub(crate) struct Drafter {
    max: usize,
    /// Tokens to propose next time.
    len: usize,
    misses: u32,
    pause: u32,
    next_pause: u32,
    pub(crate) proposed: usize,
    pub(crate) accepted: usize,
    /// With a draft model: positions `0..model_pos` of the draft's KV
    /// hold this sequence's tokens (the rest is caught up before the
    /// next proposal; crate::draft).
    pub(crate) model_pos: usize,
}

impl Drafter {
    pub(crate) fn new(max: usize) -> Self {
        Self {
            max,
            len: max.clamp(1, 4),
            misses: 0,
            pause: 0,
            next_pause: PAUSE_STEPS,
            proposed: 0,
            accepted: 0,
            model_pos: 0,
        }
    }

    /// Appends to `out` up to the current proposal length (and at most
    /// `room`) of tokens that may follow `history`, or nothing (paused, or
    /// no earlier occurrence).
    pub(crate) fn propose(&mut self, history: &[TokenId], room: usize, out: &mut Vec<TokenId>) {
        let want = self.next_len(room);
        if want > 0 {
            lookup(history, want, out);
        }
    }

    /// How many tokens to propose this step (at most `room`): 0 while
    /// paused (a paused step counts down the pause).
    pub(crate) fn next_len(&mut self, room: usize) -> usize {
        if self.pause > 0 {
            self.pause -= 1;
            return 0;
        }
        self.len.min(room)
    }

    /// Records how many of `proposed` tokens were kept.
    pub(crate) fn record(&mut self, proposed: usize, kept: usize) {
        if proposed == 0 {
            return;
        }
        self.proposed += proposed;
        self.accepted += kept;
        if kept == proposed {
            self.len = (self.len + 2).min(self.max);
        } else if kept == 0 {
            self.len = (self.len / 2).max(1);
        } else {
            self.len = kept.clamp(1, self.max);
        }
        if kept == 0 {
            self.misses += 1;
            if self.misses >= MISSES_BEFORE_PAUSE {
                self.pause = self.next_pause;
                self.next_pause = (self.next_pause * 2).min(MAX_PAUSE_STEPS);
                self.misses = 0;
            }
        } else {
            self.misses = 0;
            self.next_pause = PAUSE_STEPS;
        }
    }
}

/// The proposals of one engine step, per work item, in one buffer.
#[derive(Debug, Default)]
pub(crate) struct StepDrafts {
    tokens: Vec<TokenId>,
    /// Per work item: where its proposal starts in `tokens`, and its length.
    spans: Vec<(usize, usize)>,
    /// The verification chunk being built (the last token, then the proposal).
    verify: Vec<TokenId>,
}

impl StepDrafts {
    /// Forgets the last step's proposals; `items` work items follow.
    pub(crate) fn clear(&mut self, items: usize) {
        self.tokens.clear();
        self.spans.clear();
        self.spans.resize(items, (0, 0));
    }

    /// Item `i`'s proposal (empty when it has none).
    pub(crate) fn of(&self, i: usize) -> &[TokenId] {
        let (at, n) = self.spans.get(i).copied().unwrap_or_default();
        self.tokens.get(at..at + n).unwrap_or_default()
    }

    /// Asks `drafter` for item `i`'s proposal; returns its length.
    pub(crate) fn propose(&mut self, i: usize, drafter: &mut Drafter, history: &[TokenId], room: usize) -> usize {
        let at = self.tokens.len();
        drafter.propose(history, room, &mut self.tokens);
        let n = self.tokens.len() - at;
        if let Some(s) = self.spans.get_mut(i) {
            *s = (at, n);
        }
        n
    }

    /// Sets item `i`'s proposal (a draft model's, made for every item at
    /// once).
    pub(crate) fn set(&mut self, i: usize, proposal: &[TokenId]) {
        let at = self.tokens.len();
        self.tokens.extend_from_slice(proposal);
        if let Some(s) = self.spans.get_mut(i) {
            *s = (at, proposal.len());
        }
    }

    /// Withdraws item `i`'s proposal (the last one made).
    pub(crate) fn drop_last(&mut self, i: usize) {
        if let Some(s) = self.spans.get_mut(i) {
            self.tokens.truncate(s.0);
            s.1 = 0;
        }
    }

    /// `chunk` (the item's last token) followed by item `i`'s proposal.
    pub(crate) fn with_last(&mut self, chunk: &[TokenId], i: usize) -> &[TokenId] {
        let (at, n) = self.spans.get(i).copied().unwrap_or_default();
        self.verify.clear();
        self.verify.extend_from_slice(chunk);
        self.verify.extend_from_slice(self.tokens.get(at..at + n).unwrap_or_default());
        &self.verify
    }
}

/// Prompt lookup: the tokens after the latest earlier occurrence of the
/// longest suffix of `history` (of [`MAX_NGRAM`] down to [`MIN_NGRAM`]
/// tokens) within the search window; at most `want` of them. One backward
/// pass over the window: each earlier copy of the last token is extended
/// backwards, the longest match wins, the latest among equals.
fn lookup(history: &[TokenId], want: usize, out: &mut Vec<TokenId>) {
    let n = history.len();
    let Some(&last) = history.last() else { return };
    let lo = n.saturating_sub(SEARCH_WINDOW);
    // (match length, end of the match) of the best occurrence so far.
    let mut best = (0, 0);
    // A match ends at `end` (exclusive) before the suffix's own last token.
    for end in (lo.max(1)..n).rev() {
        if history[end - 1] != last {
            continue;
        }
        let len = (1..=MAX_NGRAM.min(end)).take_while(|&k| history[end - k] == history[n - k]).last().unwrap_or(0);
        if len > best.0 {
            best = (len, end);
            if len == MAX_NGRAM {
                break;
            }
        }
    }
    let (len, from) = best;
    if len >= MIN_NGRAM {
        out.extend_from_slice(&history[from..(from + want).min(n)]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_follows_the_latest_occurrence() {
        let mut out = Vec::new();
        // "a b c d | x a b c e | a b c" → after the latest "a b c": "e a b".
        let h = [1, 2, 3, 4, 9, 1, 2, 3, 5, 1, 2, 3];
        lookup(&h, 3, &mut out);
        assert_eq!(out, [5, 1, 2]);
        // Proposals stop at the end of the history.
        out.clear();
        lookup(&h, 10, &mut out);
        assert_eq!(out, [5, 1, 2, 3]);
        // No earlier occurrence of any suffix of three or more tokens.
        out.clear();
        lookup(&[1, 2, 3, 4], 3, &mut out);
        assert!(out.is_empty());
        // One or two repeated tokens are not enough.
        lookup(&[7, 1, 2, 7], 3, &mut out);
        assert!(out.is_empty());
        lookup(&[7, 8, 1, 2, 7, 8], 3, &mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn length_adapts_and_misses_pause() {
        let mut d = Drafter::new(8);
        let h: Vec<TokenId> = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10].iter().chain(&[1, 2, 3]).copied().collect();
        let mut out = Vec::new();
        let mut propose = |d: &mut Drafter, room: usize| {
            out.clear();
            d.propose(&h, room, &mut out);
            out.clone()
        };
        assert_eq!(propose(&mut d, 100), [4, 5, 6, 7]);
        d.record(4, 4);
        assert_eq!(propose(&mut d, 100).len(), 6);
        assert_eq!(propose(&mut d, 2).len(), 2, "never more than the room left");
        for _ in 0..MISSES_BEFORE_PAUSE {
            d.record(3, 0);
        }
        for _ in 0..PAUSE_STEPS {
            assert!(propose(&mut d, 100).is_empty());
        }
        let out = propose(&mut d, 100);
        assert!(!out.is_empty(), "the pause ends");
        assert_eq!((d.proposed, d.accepted), (4 + 3 * MISSES_BEFORE_PAUSE as usize, 4));
    }
}
