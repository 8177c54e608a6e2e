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
    /// Control / unknown / end-of-generation tokens (skipped by `skip_special`).
    pub(crate) special: Vec<bool>,
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
/// In a harmony vocabulary (gpt-oss: it has `<|return|>` and `<|call|>`),
/// `<|end|>` ends one message of a turn (the analysis before the final
/// answer), not the generation, so it is never among the ids.
pub(crate) fn eog_ids(tokens: &[String], eos: Option<u32>, explicit: &[Option<u32>]) -> Vec<u32> {
    let n = tokens.len();
    let mut ids: Vec<u32> =
        eos.into_iter().chain(explicit.iter().flatten().copied()).filter(|i| (*i as usize) < n).collect();
    ids.extend(tokens.iter().enumerate().filter(|(_, t)| is_end_of_generation_text(t)).map(|(i, _)| i as u32));
    let has = |text: &str| tokens.iter().any(|t| t == text);
    if has("<|return|>") && has("<|call|>") {
        ids.retain(|&i| tokens[i as usize] != "<|end|>");
    }
    ids.sort_unstable();
    ids.dedup();
    ids
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vocab(texts: &[&str]) -> Vec<String> {
        texts.iter().map(|t| t.to_string()).collect()
    }

    #[test]
    fn harmony_messages_end_without_ending_the_generation() {
        let harmony = vocab(&["a", "<|start|>", "<|end|>", "<|message|>", "<|return|>", "<|call|>", "<|endoftext|>"]);
        // `<|end|>` (2) is left out even when named explicitly.
        assert_eq!(eog_ids(&harmony, Some(4), &[Some(2)]), [4, 5, 6]);
        // Elsewhere (Phi-3) `<|end|>` ends the turn.
        let phi = vocab(&["a", "<|end|>", "<|endoftext|>"]);
        assert_eq!(eog_ids(&phi, Some(2), &[]), [1, 2]);
        // Out-of-range explicit ids are dropped.
        assert_eq!(eog_ids(&phi, Some(9), &[None]), [1, 2]);
    }
}
