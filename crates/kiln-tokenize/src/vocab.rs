//! Token information shared by every backend: the bytes of each token, which tokens
//! are special, and the BOS / end-of-generation ids.

use crate::special::is_end_of_generation_text;

/// What the public [`crate::Tokenizer`] needs to know about each token.
#[derive(Debug, Clone)]
pub(crate) struct VocabInfo {
    /// The vocabulary string of each token.
    pub(crate) texts: Vec<String>,
    /// The bytes each token decodes to (special tokens: their text).
    pub(crate) pieces: Vec<Vec<u8>>,
    /// Control / unknown / end-of-generation tokens.
    pub(crate) special: Vec<bool>,
    /// The tokens `skip_special` drops ([`skipped_in_text`]).
    pub(crate) skipped: Vec<bool>,
    pub(crate) bos: Option<u32>,
    pub(crate) eos: Option<u32>,
    /// Every id that ends a generation, sorted.
    pub(crate) eos_ids: Vec<u32>,
    pub(crate) add_bos: bool,
    pub(crate) add_eos: bool,
    /// SentencePiece-style models prepend a space when encoding; decoding a sequence
    /// from its start removes it again.
    pub(crate) strip_first_space: bool,
}

/// All end-of-generation ids: `eos`, the explicit ids (eot, eom, generation config)
/// and every token whose text is a known end-of-turn marker.
///
/// In a harmony vocabulary ([`is_harmony`]), `<|end|>` ends one message of
/// a turn (the analysis before the final answer), not the generation, so it
/// is never among the ids.
pub(crate) fn eog_ids(tokens: &[String], eos: Option<u32>, explicit: &[Option<u32>]) -> Vec<u32> {
    let n = tokens.len();
    let mut ids: Vec<u32> =
        eos.into_iter().chain(explicit.iter().flatten().copied()).filter(|i| (*i as usize) < n).collect();
    ids.extend(tokens.iter().enumerate().filter(|(_, t)| is_end_of_generation_text(t)).map(|(i, _)| i as u32));
    if is_harmony(tokens) {
        ids.retain(|&i| tokens[i as usize] != "<|end|>");
    }
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// gpt-oss's harmony vocabulary: it has the channel, message, return and
/// call markers.
pub(crate) fn is_harmony(tokens: &[String]) -> bool {
    let has = |text: &str| tokens.iter().any(|t| t == text);
    ["<|channel|>", "<|message|>", "<|return|>", "<|call|>"].into_iter().all(has)
}

/// Harmony's message markers, which the chat layer parses out of the text.
const HARMONY_MARKERS: [&str; 5] = ["<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>"];

/// Which tokens decoding skips (`skip_special`): the special ones, except
/// harmony's message markers in a harmony vocabulary. Those are part of the
/// generated text (channels, recipients and calls are read from them);
/// they stay special tokens for encoding and grammars, and `<|return|>` and
/// `<|call|>` stay skipped (they end the generation).
pub(crate) fn skipped_in_text(tokens: &[String], special: &[bool]) -> Vec<bool> {
    let harmony = is_harmony(tokens);
    tokens.iter().zip(special).map(|(t, &s)| s && !(harmony && HARMONY_MARKERS.contains(&t.as_str()))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vocab(texts: &[&str]) -> Vec<String> {
        texts.iter().map(|t| t.to_string()).collect()
    }

    #[test]
    fn harmony_messages_end_without_ending_the_generation() {
        let harmony = vocab(&[
            "a",
            "<|start|>",
            "<|end|>",
            "<|message|>",
            "<|return|>",
            "<|call|>",
            "<|endoftext|>",
            "<|channel|>",
        ]);
        // `<|end|>` (2) is left out even when named explicitly.
        assert_eq!(eog_ids(&harmony, Some(4), &[Some(2)]), [4, 5, 6]);
        // The markers are text; the ends stay skipped, `a` is text anyway.
        let mut special = vec![true; harmony.len()];
        special[0] = false;
        assert_eq!(skipped_in_text(&harmony, &special), [false, false, false, false, true, true, true, false]);
        // Without the channel marker it is not harmony.
        assert!(skipped_in_text(&harmony[..6], &[true; 6]).iter().all(|&s| s));
        assert_eq!(eog_ids(&harmony[..6], Some(4), &[]), [2, 4, 5]);
        // Elsewhere (Phi-3) `<|end|>` ends the turn.
        let phi = vocab(&["a", "<|end|>", "<|endoftext|>"]);
        assert_eq!(eog_ids(&phi, Some(2), &[]), [1, 2]);
        // Out-of-range explicit ids are dropped.
        assert_eq!(eog_ids(&phi, Some(9), &[None]), [1, 2]);
    }
}
