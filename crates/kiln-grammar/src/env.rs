//! [`KilnTokEnv`]: a kiln [`Tokenizer`] as llguidance's `TokenizerEnv`.
//!
//! The trie holds every token's bytes. Special (control) tokens are stored the
//! toktrie way, the marker byte `0xFF` followed by their name, so that a Lark
//! grammar can name them (`<|im_end|>`) and free text can never spell them: no
//! grammar byte sequence starts with `0xFF`, which is not valid UTF-8. Every
//! end-of-sequence id of the tokenizer is an EOS token of the trie.

use crate::GrammarError;
use kiln_tokenize::{EncodeOptions, Tokenizer};
use std::sync::Arc;
use toktrie::{TokEnv, TokRxInfo, TokTrie, TokenId, TokenizerEnv};

/// llguidance's view of one kiln tokenizer.
pub(crate) struct KilnTokEnv {
    trie: TokTrie,
    tok: Arc<Tokenizer>,
    /// Whether `encode` of a text fragment is the model's tokenization of that
    /// fragment (false for SentencePiece models that prepend a space).
    canonical: bool,
}

impl KilnTokEnv {
    /// Builds the trie from the tokenizer's vocabulary.
    pub(crate) fn env(tok: &Arc<Tokenizer>) -> Result<TokEnv, GrammarError> {
        let n = tok.vocab_size();
        let vocab_size = u32::try_from(n).map_err(|_| GrammarError::Tokenizer(format!("vocabulary of {n} tokens")))?;
        let mut eos: Vec<TokenId> = tok.eos_ids().iter().copied().filter(|&t| t < vocab_size).collect();
        if let Some(primary) = tok.eos_id().filter(|&t| t < vocab_size) {
            // The primary EOS first: llguidance reports it as `eos_token()`.
            eos.retain(|&t| t != primary);
            eos.insert(0, primary);
        }
        let Some(&first_eos) = eos.first() else {
            return Err(GrammarError::Tokenizer("the tokenizer has no end-of-sequence token".into()));
        };
        let words: Vec<Vec<u8>> = (0..vocab_size).map(|id| token_word(tok, id)).collect();
        let info = TokRxInfo {
            vocab_size,
            tok_eos: first_eos,
            tok_bos: tok.bos_id(),
            tok_pad: None,
            tok_unk: None,
            tok_end_of_turn: None,
        };
        let trie = TokTrie::from(&info, &words).with_eos_tokens(&eos);
        let canonical = !tok.strips_first_space();
        Ok(Arc::new(Self { trie, tok: Arc::clone(tok), canonical }))
    }
}

/// The trie entry of token `id`: its bytes, or `0xFF` + name for a special token.
fn token_word(tok: &Tokenizer, id: u32) -> Vec<u8> {
    let bytes = tok.token_to_bytes(id).unwrap_or_default();
    if tok.is_special(id) {
        let name = tok.token_text(id).map(str::as_bytes).unwrap_or(bytes);
        let mut w = Vec::with_capacity(name.len() + 1);
        w.push(TokTrie::SPECIAL_TOKEN_MARKER);
        w.extend_from_slice(name);
        w
    } else {
        bytes.to_vec()
    }
}

impl TokenizerEnv for KilnTokEnv {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    /// The model's own tokenization of `s`, special tokens written in it kept as
    /// text. Bytes that are not valid UTF-8 (a forced prefix may end inside a
    /// character) fall back to the trie's greedy tokenization.
    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        let opts = EncodeOptions { add_special: false, parse_special: false };
        let valid = match std::str::from_utf8(s) {
            Ok(text) => text,
            Err(e) => {
                // Safe split: `valid_up_to` is a char boundary.
                std::str::from_utf8(&s[..e.valid_up_to()]).unwrap_or_default()
            }
        };
        let mut ids = match self.tok.encode_with(valid, opts) {
            Ok(ids) => ids,
            Err(_) => return self.trie.greedy_tokenize(s),
        };
        if valid.len() < s.len() {
            ids.extend(self.trie.greedy_tokenize(&s[valid.len()..]));
        }
        ids
    }

    fn tokenize_is_canonical(&self) -> bool {
        self.canonical
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::tiny_tokenizer;

    #[test]
    fn specials_are_marked_and_eos_set_is_complete() {
        let tok = tiny_tokenizer();
        let env = KilnTokEnv::env(&tok).expect("env");
        let trie = env.tok_trie();
        assert_eq!(trie.vocab_size(), tok.vocab_size());
        let im_end = tok.token_id("<|im_end|>").expect("im_end");
        assert_eq!(trie.get_special_token("<|im_end|>"), Some(im_end));
        assert!(trie.is_special_token(im_end));
        let mut eos = trie.eos_tokens().to_vec();
        eos.sort_unstable();
        assert_eq!(eos, tok.eos_ids());
        // Text never spells a special token.
        assert!(!env.tokenize_bytes(b"<|im_end|>").contains(&im_end));
    }

    #[test]
    fn tokenize_bytes_matches_encode_and_survives_broken_utf8() {
        let tok = tiny_tokenizer();
        let env = KilnTokEnv::env(&tok).expect("env");
        let opts = EncodeOptions { add_special: false, parse_special: false };
        assert_eq!(env.tokenize_bytes(b" the thin"), tok.encode_with(" the thin", opts).expect("encode"));
        let ids = env.tokenize_bytes(&[b'a', 0xC3]);
        assert_eq!(env.tok_trie().decode_raw(&ids), vec![b'a', 0xC3]);
    }
}
