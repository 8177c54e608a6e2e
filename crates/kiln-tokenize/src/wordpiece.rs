//! WordPiece (`tokenizer.ggml.model = "bert"`): BERT's basic tokenizer, then
//! greedy longest-match-first subwords, over the vocabulary that llama.cpp's
//! `convert_hf_to_gguf.py` writes for BERT-family encoders (all-MiniLM, bge,
//! nomic-bert).
//!
//! The converter stores a word-initial token with a leading `▁` (HF `hello` is
//! `▁hello`) and a continuation without a prefix (HF `##lo` is `lo`); bracketed
//! specials (`[CLS]`) stay as they are. A word is looked up as `▁` + word, so
//! the piece at offset 0 is a word-initial token and every later piece a
//! continuation: the same greedy walk as HF's `##` lookups.
//!
//! References: HF `tokenizers` (`BertNormalizer`, `BertPreTokenizer`,
//! `models::wordpiece`), which these models were trained with, and llama.cpp's
//! `llm_tokenizer_wpm`. Where they differ, kiln follows HF: a word over 100
//! characters is `[UNK]`, combining marks typed separately are dropped with the
//! accents, and a piece inside a word never matches a word-initial token.

use crate::error::{Result, TokenizeError};
use crate::spec::{GgufTokenizerSpec, TokenType};
use std::collections::HashMap;
use unicode_categories::UnicodeCategories;
use unicode_normalization_alignments::UnicodeNormalization;

/// The word-start marker of the converted vocabulary.
const WORD_START: &str = "\u{2581}";
/// HF `WordPiece::max_input_chars_per_word`: longer words are `[UNK]`.
const MAX_WORD_CHARS: usize = 100;

/// Encoder state of a WordPiece vocabulary (the lookups use the vocabulary's id map).
#[derive(Debug)]
pub(crate) struct WordPiece {
    /// Lowercase and strip accents (an uncased model).
    uncased: bool,
    /// The longest token in bytes: no lookup is longer.
    max_token_bytes: usize,
    unk: u32,
}

/// The special ids a WordPiece vocabulary uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WordPieceSpecials {
    /// `[CLS]`, added first.
    pub(crate) cls: Option<u32>,
    /// `[SEP]`, added last.
    pub(crate) sep: Option<u32>,
    /// `[UNK]`, for words that cannot be split.
    pub(crate) unk: u32,
}

impl WordPieceSpecials {
    /// Reads the ids from the spec: `bos` or `cls` for `[CLS]`, `sep` or `eos`
    /// for `[SEP]`, falling back to the tokens of those names.
    pub(crate) fn of(spec: &GgufTokenizerSpec, ids: &HashMap<String, u32>) -> Result<Self> {
        let n = spec.tokens.len();
        let in_range = |i: &u32| (*i as usize) < n;
        let named = |t: &str| ids.get(t).copied();
        let cls = spec.bos_token_id.or(spec.cls_token_id).filter(in_range).or_else(|| named("[CLS]"));
        let sep = spec.sep_token_id.or(spec.eos_token_id).filter(in_range).or_else(|| named("[SEP]"));
        let unk = spec
            .unknown_token_id
            .filter(in_range)
            .or_else(|| named("[UNK]"))
            .ok_or_else(|| TokenizeError::Invalid("WordPiece vocabulary without an unknown token".into()))?;
        Ok(Self { cls, sep, unk })
    }
}

impl WordPiece {
    /// Builds the encoder; `unk` replaces words that cannot be split.
    pub(crate) fn new(spec: &GgufTokenizerSpec, unk: u32) -> Self {
        let max_token_bytes = spec.tokens.iter().map(String::len).max().unwrap_or(0);
        Self { uncased: is_uncased(spec), max_token_bytes, unk }
    }

    /// Appends the tokens of `text` (no special tokens are added).
    pub(crate) fn encode(&self, text: &str, ids: &HashMap<String, u32>, out: &mut Vec<u32>) {
        let emit = |word: &str, chars: usize, out: &mut Vec<u32>| self.word(word, chars, ids, out);
        for_each_word(text, self.uncased, out, emit);
    }

    /// Greedy longest-match-first over `▁word` (`chars`: the word's length in
    /// characters without the marker); `[UNK]` if some position has no token.
    fn word(&self, word: &str, chars: usize, ids: &HashMap<String, u32>, out: &mut Vec<u32>) {
        if chars > MAX_WORD_CHARS {
            out.push(self.unk);
            return;
        }
        let first = out.len();
        let mut start = 0;
        while start < word.len() {
            match self.longest_match(word, start, ids) {
                Some((id, end)) => {
                    out.push(id);
                    start = end;
                }
                None => {
                    out.truncate(first);
                    out.push(self.unk);
                    return;
                }
            }
        }
    }

    /// The longest token at byte `start` of `word`, with its end. At 0 it must
    /// cover more than the marker; later it must not begin with one (HF would
    /// look up `##▁…`, which the converted vocabulary cannot hold).
    fn longest_match(&self, word: &str, start: usize, ids: &HashMap<String, u32>) -> Option<(u32, usize)> {
        let min_end = if start == 0 { WORD_START.len() + 1 } else { start + 1 };
        let mut end = floor_char_boundary(word, start.saturating_add(self.max_token_bytes));
        while end >= min_end {
            let piece = word.get(start..end)?;
            if start > 0 && piece.starts_with(WORD_START) {
                return None;
            }
            if let Some(id) = ids.get(piece) {
                return Some((*id, end));
            }
            end = floor_char_boundary(word, end - 1);
        }
        None
    }
}

/// The largest char boundary of `s` at or below `i`.
fn floor_char_boundary(s: &str, i: usize) -> usize {
    let mut i = i.min(s.len());
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// An uncased vocabulary (all-MiniLM, bge, nomic-bert) holds lowercase text
/// only; a cased one (`bert-base-cased`) holds thousands of capitalized words.
/// GGUF metadata does not record HF's `do_lower_case`, so it is read off the
/// vocabulary: uncased when under 1% of the normal tokens change when
/// lowercased. (llama.cpp always lowercases.)
fn is_uncased(spec: &GgufTokenizerSpec) -> bool {
    let normal = |(i, _): &(usize, &String)| spec.token_type(*i) == TokenType::Normal;
    let (mut total, mut cased) = (0usize, 0usize);
    for (_, t) in spec.tokens.iter().enumerate().filter(normal) {
        total += 1;
        if t.chars().any(|c| c.to_lowercase().ne(std::iter::once(c))) {
            cased += 1;
        }
    }
    cased * 100 < total.max(1)
}

/// HF `BertNormalizer`'s control characters: Cc, Cf, Co except tab, LF, CR.
fn is_control(c: char) -> bool {
    !matches!(c, '\t' | '\n' | '\r') && c.is_other()
}

/// HF `BertNormalizer`'s whitespace: Unicode White_Space plus tab, LF, CR.
fn is_whitespace(c: char) -> bool {
    c.is_whitespace()
}

/// ASCII punctuation (which includes `$+<=>^`|~`) and every Unicode P* category.
fn is_punctuation(c: char) -> bool {
    c.is_ascii_punctuation() || c.is_punctuation()
}

/// The CJK ideograph blocks BERT splits into one-character words (the ranges
/// of HF `tokenizers`, whose Extension C/D bound reads 0x2B920, not 0x2B820).
fn is_chinese_char(c: char) -> bool {
    matches!(
        u32::from(c),
        0x4E00..=0x9FFF
            | 0x3400..=0x4DBF
            | 0x20000..=0x2A6DF
            | 0x2A700..=0x2B73F
            | 0x2B740..=0x2B81F
            | 0x2B920..=0x2CEAF
            | 0xF900..=0xFAFF
            | 0x2F800..=0x2FA1F
    )
}

/// BERT's basic tokenizer: cleans the text (drops NUL, U+FFFD and control
/// characters; whitespace becomes a space), isolates CJK ideographs, and for an
/// uncased model decomposes (NFD), drops non-spacing marks and lowercases; then
/// splits on whitespace and isolates each punctuation character. Calls `emit`
/// with `▁word` and the word's length in characters, in order.
fn for_each_word<T>(text: &str, uncased: bool, sink: &mut T, mut emit: impl FnMut(&str, usize, &mut T)) {
    let cleaned = text
        .chars()
        .filter(|c| !matches!(*c, '\0' | '\u{FFFD}') && !is_control(*c))
        .flat_map(|c| match c {
            c if is_whitespace(c) => [Some(' '), None, None],
            c if is_chinese_char(c) => [Some(' '), Some(c), Some(' ')],
            c => [Some(c), None, None],
        })
        .flatten();
    let mut splitter = Splitter { word: String::from(WORD_START), chars: 0 };
    if uncased {
        let normalized = cleaned.nfd().map(|(c, _)| c).filter(|c| !c.is_mark_nonspacing()).flat_map(char::to_lowercase);
        for c in normalized {
            splitter.push(c, sink, &mut emit);
        }
    } else {
        for c in cleaned {
            splitter.push(c, sink, &mut emit);
        }
    }
    splitter.finish(sink, &mut emit);
}

/// The word being collected: `▁` and its characters so far.
struct Splitter {
    word: String,
    chars: usize,
}

impl Splitter {
    fn push<T>(&mut self, c: char, sink: &mut T, emit: &mut impl FnMut(&str, usize, &mut T)) {
        if is_whitespace(c) {
            self.finish(sink, emit);
        } else if is_punctuation(c) {
            self.finish(sink, emit);
            self.word.push(c);
            self.chars = 1;
            self.finish(sink, emit);
        } else {
            self.word.push(c);
            self.chars += 1;
        }
    }

    fn finish<T>(&mut self, sink: &mut T, emit: &mut impl FnMut(&str, usize, &mut T)) {
        if self.chars > 0 {
            emit(&self.word, self.chars, sink);
        }
        self.word.truncate(WORD_START.len());
        self.chars = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str, uncased: bool) -> Vec<String> {
        let mut v = Vec::new();
        for_each_word(text, uncased, &mut v, |w, _, v: &mut Vec<String>| {
            v.push(w.trim_start_matches(WORD_START).to_string())
        });
        v
    }

    #[test]
    fn basic_tokenizer_splits_like_bert() {
        assert_eq!(words("Hello, World!", true), ["hello", ",", "world", "!"]);
        assert_eq!(words("Hello, World!", false), ["Hello", ",", "World", "!"]);
        assert_eq!(words("  \t\n ", true), Vec::<String>::new());
        assert_eq!(words("Äpfel café", true), ["apfel", "cafe"]);
        // A combining mark typed separately goes too; a ZWJ (Cf) is dropped.
        assert_eq!(words("e\u{301}x a\u{200d}b", true), ["ex", "ab"]);
        assert_eq!(words("我想apple", true), ["我", "想", "apple"]);
        assert_eq!(words("a$b+c", true), ["a", "$", "b", "+", "c"]);
        assert_eq!(words("x\u{0}y\u{FFFD}z", true), ["xyz"]);
    }

    fn tiny() -> (WordPiece, HashMap<String, u32>) {
        let toks = ["[UNK]", "▁un", "▁unaff", "able", "aff", "▁a", "b", "▁!", "a"];
        let ids: HashMap<String, u32> = toks.iter().enumerate().map(|(i, t)| (t.to_string(), i as u32)).collect();
        let spec = GgufTokenizerSpec {
            model: "bert".into(),
            tokens: toks.iter().map(|t| t.to_string()).collect(),
            token_types: toks.iter().map(|t| if t.starts_with('[') { 3 } else { 1 }).collect(),
            ..Default::default()
        };
        (WordPiece::new(&spec, 0), ids)
    }

    #[test]
    fn greedy_longest_match_and_unknown_words() {
        let (wp, ids) = tiny();
        let enc = |t: &str| {
            let mut out = Vec::new();
            wp.encode(t, &ids, &mut out);
            out
        };
        assert_eq!(enc("unaffable!"), [2, 3, 7]);
        assert_eq!(enc("UNAFF ab"), [2, 5, 6]);
        // "b" is a continuation only; a word that cannot be split is one [UNK].
        assert_eq!(enc("bab unx"), [0, 0]);
        // A marker inside a word is not a word start.
        assert_eq!(enc("a\u{2581}a"), [0]);
        let long = "ab".repeat(50);
        assert_eq!(enc(&long).len(), 100);
        assert_eq!(enc(&format!("{long}b")), [0]);
        assert_eq!(enc(""), Vec::<u32>::new());
    }
}
