//! [`IncrementalDetokenizer`]: generated ids in, text deltas out, never broken UTF-8.

use std::ops::Deref;

use crate::tokenizer::Tokenizer;

/// Streams token ids to text.
///
/// Each [`push`](Self::push) appends the token's bytes to a small pending buffer and
/// returns the longest complete UTF-8 prefix; an unfinished multi-byte character (an
/// emoji split over byte-level BPE tokens, `<0xF0>` byte-fallback tokens) waits for
/// the next token. Work per token is proportional to the token's length. The
/// concatenation of every `push` plus [`flush`](Self::flush) equals
/// [`Tokenizer::decode`] of the same ids (for [`new`](Self::new)).
///
/// `T` is anything that derefs to the tokenizer: `&Tokenizer` for a borrow,
/// `Arc<Tokenizer>` for a detokenizer that lives in another thread.
#[derive(Debug)]
pub struct IncrementalDetokenizer<T: Deref<Target = Tokenizer>> {
    tok: T,
    skip_special: bool,
    /// Strip one leading space from the first bytes that arrive.
    strip_space: bool,
    /// Bytes not yet returned: at most an incomplete UTF-8 sequence (≤ 3 bytes).
    pending: Vec<u8>,
}

impl<T: Deref<Target = Tokenizer>> IncrementalDetokenizer<T> {
    /// Starts at the beginning of a sequence: like [`Tokenizer::decode`], a
    /// SentencePiece model's prepended space is removed from the first piece.
    pub fn new(tok: T, skip_special: bool) -> Self {
        let strip_space = tok.strips_first_space();
        Self { tok, skip_special, strip_space, pending: Vec::with_capacity(8) }
    }

    /// Continues after a prompt: every space is kept (a generated `▁Hello` after a
    /// prompt really is `" Hello"`).
    pub fn continuing(tok: T, skip_special: bool) -> Self {
        Self { strip_space: false, ..Self::new(tok, skip_special) }
    }

    /// Feeds one token; returns the newly visible text (possibly empty).
    pub fn push(&mut self, id: u32) -> String {
        if self.skip_special && self.tok.is_skipped(id) {
            return String::new();
        }
        let mut piece = self.tok.token_to_bytes(id).unwrap_or_default();
        if piece.is_empty() {
            return String::new();
        }
        if self.strip_space {
            piece = piece.strip_prefix(b" ").unwrap_or(piece);
            self.strip_space = false;
        }
        self.pending.extend_from_slice(piece);
        self.take_complete()
    }

    /// Returns whatever is still held (an incomplete character becomes U+FFFD).
    pub fn flush(&mut self) -> String {
        let out = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        out
    }

    /// Whether bytes of an unfinished character are being held back.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Moves every complete character (and U+FFFD for invalid bytes) out of `pending`.
    fn take_complete(&mut self) -> String {
        let mut out = String::with_capacity(self.pending.len());
        let mut rest: &[u8] = &self.pending;
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    out.push_str(s);
                    rest = &[];
                    break;
                }
                Err(e) => {
                    let (good, bad) = rest.split_at(e.valid_up_to());
                    // `good` is valid by construction; lossy conversion never allocates anew here.
                    out.push_str(&String::from_utf8_lossy(good));
                    match e.error_len() {
                        Some(n) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            rest = bad.get(n..).unwrap_or_default();
                        }
                        None => {
                            rest = bad;
                            break;
                        }
                    }
                }
            }
        }
        let keep = rest.len();
        let drop = self.pending.len() - keep;
        self.pending.drain(..drop);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::GgufTokenizerSpec;

    /// A tiny SentencePiece vocabulary with byte fallback.
    fn spm() -> Tokenizer {
        let mut tokens: Vec<String> = vec!["<unk>".into(), "<s>".into(), "</s>".into()];
        let mut types = vec![2, 3, 3];
        for b in 0..=255u8 {
            tokens.push(format!("<0x{b:02X}>"));
            types.push(6);
        }
        // Every prefix of the words, so SentencePiece merges can build them up.
        for w in ["\u{2581}Hello", "\u{2581}world"] {
            let ends = w.char_indices().map(|(i, c)| i + c.len_utf8());
            for end in ends {
                tokens.push(w[..end].into());
                types.push(1);
            }
        }
        for t in ["你", "好"] {
            tokens.push(t.into());
            types.push(1);
        }
        let scores = vec![0.0; tokens.len()];
        let spec =
            GgufTokenizerSpec { model: "llama".into(), tokens, token_types: types, scores, ..Default::default() };
        Tokenizer::from_gguf_spec(&spec).unwrap()
    }

    fn stream(tok: &Tokenizer, ids: &[u32], d: &mut IncrementalDetokenizer<&Tokenizer>) -> Vec<String> {
        let _ = tok;
        let mut out: Vec<String> = ids.iter().map(|id| d.push(*id)).collect();
        out.push(d.flush());
        out
    }

    #[test]
    fn byte_fallback_emoji_is_held_until_complete() {
        let tok = spm();
        let ids = tok.encode("Hello 🦙!", true).unwrap();
        // BOS, ▁Hello, ▁, then four byte tokens for the emoji, then '!' as a byte.
        assert_eq!(ids.len(), 1 + 2 + 4 + 1, "{ids:?}");
        let mut d = IncrementalDetokenizer::new(&tok, true);
        let parts = stream(&tok, &ids, &mut d);
        assert_eq!(parts, ["", "Hello", " ", "", "", "", "🦙", "!", ""]);
        assert_eq!(parts.concat(), tok.decode(&ids, true));
        assert_eq!(tok.decode(&ids, true), "Hello 🦙!");
    }

    #[test]
    fn leading_space_rules() {
        let tok = spm();
        let ids = tok.encode("Hello world", false).unwrap();
        let mut fresh = IncrementalDetokenizer::new(&tok, true);
        assert_eq!(stream(&tok, &ids, &mut fresh).concat(), "Hello world");
        let mut cont = IncrementalDetokenizer::continuing(&tok, true);
        assert_eq!(stream(&tok, &ids, &mut cont).concat(), " Hello world");
        // With specials kept, BOS comes first and the space after it stays.
        let ids = tok.encode("Hello", true).unwrap();
        assert_eq!(tok.decode(&ids, false), "<s> Hello");
    }

    #[test]
    fn cjk_and_invalid_bytes() {
        let tok = spm();
        let ids = tok.encode("你好", false).unwrap();
        let mut d = IncrementalDetokenizer::new(&tok, true);
        assert_eq!(stream(&tok, &ids, &mut d).concat(), "你好");
        // A lone continuation byte is invalid: replaced, not held forever.
        let x80 = tok.token_id("<0x80>").unwrap();
        let h = tok.token_id("<0x68>").unwrap();
        let mut d = IncrementalDetokenizer::new(&tok, true);
        assert_eq!(d.push(x80), "\u{FFFD}");
        assert!(!d.has_pending());
        // A truncated sequence at the end is flushed as one replacement character.
        let f0 = tok.token_id("<0xF0>").unwrap();
        assert_eq!(d.push(f0), "");
        assert!(d.has_pending());
        assert_eq!(d.push(h), "\u{FFFD}h");
        assert_eq!(d.push(f0), "");
        assert_eq!(d.flush(), "\u{FFFD}");
    }

    #[test]
    fn streaming_equals_decode_for_every_split() {
        let tok = spm();
        let ids = tok.encode("Hello 你好 wörld 🦙🚀", true).unwrap();
        for skip in [false, true] {
            let mut d = IncrementalDetokenizer::new(&tok, skip);
            assert_eq!(stream(&tok, &ids, &mut d).concat(), tok.decode(&ids, skip));
        }
    }
}
