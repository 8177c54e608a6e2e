//! [`IncrementalDetokenizer`]: generated ids in, text deltas out, never broken UTF-8.

use crate::tokenizer::Tokenizer;

/// Streams token ids to text.
///
/// Each [`push`](Self::push) appends the token's bytes to a small pending buffer and
/// returns the longest complete UTF-8 prefix; an unfinished multi-byte character (an
/// emoji split over byte-level BPE tokens, `<0xF0>` byte-fallback tokens) waits for
/// the next token. Work per token is proportional to the token's length. The
/// concatenation of every `push` plus [`flush`](Self::flush) equals
/// [`Tokenizer::decode`] of the same ids (for [`new`](Self::new)).
#[derive(Debug)]
pub struct IncrementalDetokenizer<'t> {
    tok: &'t Tokenizer,
    skip_special: bool,
    /// Strip one leading space from the first bytes that arrive.
    strip_space: bool,
    /// Bytes not yet returned: at most an incomplete UTF-8 sequence (≤ 3 bytes).
    pending: Vec<u8>,
}

impl<'t> IncrementalDetokenizer<'t> {
    /// Starts at the beginning of a sequence: like [`Tokenizer::decode`], a
    /// SentencePiece model's prepended space is removed from the first piece.
    pub fn new(tok: &'t Tokenizer, skip_special: bool) -> Self {
        Self {
            tok,
            skip_special,
            strip_space: tok.strips_first_space(),
            pending: Vec::with_capacity(8),
        }
    }

    /// Continues after a prompt: every space is kept (a generated `▁Hello` after a
    /// prompt really is `" Hello"`).
    pub fn continuing(tok: &'t Tokenizer, skip_special: bool) -> Self {
        Self {
            strip_space: false,
            ..Self::new(tok, skip_special)
        }
    }

    /// Feeds one token; returns the newly visible text (possibly empty).
    pub fn push(&mut self, id: u32) -> String {
        if self.skip_special && self.tok.is_special(id) {
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
