//! SentencePiece Unigram (`tokenizer.ggml.model = "t5"`: T5, XLM-RoBERTa
//! and the embedding and reranking models built on it).
//!
//! Encoding a text fragment:
//! 1. normalize: the precompiled map ([`Charsmap`]) rewrites the longest
//!    mapped prefix at each position; spaces become `▁`, one `▁` opens the
//!    text (`add_space_prefix`), and with `remove_extra_whitespaces` every
//!    run of spaces folds into the `▁` before the next word and spaces at
//!    either end go;
//! 2. the most likely split (Viterbi over the normalized bytes): each piece
//!    adds its log-probability; a character no piece starts with becomes
//!    the unknown piece, scored 10 below the least likely piece, and
//!    neighbouring unknowns merge into one.
//!
//! Only normal pieces take part in the split: control, unknown, unused and
//! user-defined entries are matched (or not) as literals before it, as
//! SentencePiece and llama.cpp do.

use crate::charsmap::Charsmap;
use crate::error::{Result, TokenizeError};
use crate::spec::{GgufTokenizerSpec, TokenType};
use std::collections::HashMap;

/// How far below the least likely piece an unknown character scores.
const UNK_PENALTY: f64 = 10.0;

/// The Unigram model of one vocabulary.
#[derive(Debug)]
pub(crate) struct Unigram {
    charsmap: Option<Charsmap>,
    add_space_prefix: bool,
    merge_spaces: bool,
    /// Per id: a normal piece (the split may use it).
    normal: Vec<bool>,
    /// The longest normal piece, in bytes.
    max_piece: usize,
    unk: u32,
    unk_score: f64,
}

impl Unigram {
    /// Reads the model from the GGUF keys; `unk` is the unknown piece.
    pub(crate) fn new(spec: &GgufTokenizerSpec, unk: u32) -> Result<Self> {
        let n = spec.tokens.len();
        if spec.scores.len() != n {
            return Err(TokenizeError::Invalid(format!(
                "Unigram vocabulary of {n} pieces has {} scores",
                spec.scores.len()
            )));
        }
        let normal: Vec<bool> = (0..n).map(|i| spec.token_type(i) == TokenType::Normal && i != unk as usize).collect();
        let mut min_score = f64::INFINITY;
        let mut max_piece = 0;
        for (i, t) in spec.tokens.iter().enumerate().filter(|(i, _)| normal[*i]) {
            min_score = min_score.min(f64::from(spec.scores[i]));
            max_piece = max_piece.max(t.len());
        }
        let charsmap = if spec.precompiled_charsmap.is_empty() {
            None
        } else {
            Some(Charsmap::parse(&spec.precompiled_charsmap)?)
        };
        Ok(Self {
            charsmap,
            add_space_prefix: spec.add_space_prefix.unwrap_or(true),
            merge_spaces: spec.remove_extra_whitespaces.unwrap_or(true),
            normal,
            max_piece,
            unk,
            unk_score: if min_score.is_finite() { min_score - UNK_PENALTY } else { -UNK_PENALTY },
        })
    }

    /// The normalized form of `raw`, as step 1 of the module docs says.
    fn normalize(&self, raw: &str) -> String {
        let mapped;
        let text = match &self.charsmap {
            Some(m) => {
                mapped = m.normalize(raw);
                mapped.as_str()
            }
            None => raw,
        };
        let mut out = String::with_capacity(text.len() + text.len() / 2 + 3);
        let mut in_word = false;
        let mut prefixed = false;
        for c in text.chars() {
            if c == ' ' {
                in_word = false;
                if !self.merge_spaces {
                    out.push('\u{2581}');
                }
                continue;
            }
            if !in_word {
                in_word = true;
                if (self.add_space_prefix && !prefixed) || self.merge_spaces {
                    out.push('\u{2581}');
                    prefixed = true;
                }
            }
            out.push(c);
        }
        out
    }

    /// Appends the tokens of one text fragment.
    pub(crate) fn encode(&self, raw: &str, ids: &HashMap<String, u32>, scores: &[f32], out: &mut Vec<u32>) {
        let text = self.normalize(raw);
        if text.is_empty() {
            return;
        }
        // best[i]: the likeliest split of text[..i] as (score, last token, its start).
        let n = text.len();
        let mut best: Vec<(f64, u32, usize)> = vec![(f64::NEG_INFINITY, 0, 0); n + 1];
        best[0].0 = 0.0;
        for (start, _) in text.char_indices() {
            let base = best[start].0;
            if base == f64::NEG_INFINITY {
                continue;
            }
            let first_len = text[start..].chars().next().map_or(1, char::len_utf8);
            let mut single = false;
            let limit = (start + self.max_piece).min(n);
            let mut end = start + first_len;
            while end <= limit {
                if let Some(&id) = ids.get(&text[start..end]) {
                    if self.normal.get(id as usize) == Some(&true) {
                        single |= end == start + first_len;
                        let score = base + f64::from(scores.get(id as usize).copied().unwrap_or(0.0));
                        if score > best[end].0 {
                            best[end] = (score, id, start);
                        }
                    }
                }
                end += text[end..].chars().next().map_or(1, char::len_utf8);
            }
            if !single {
                let end = start + first_len;
                let score = base + self.unk_score;
                if score > best[end].0 {
                    best[end] = (score, self.unk, start);
                }
            }
        }
        let mut rev = Vec::new();
        let mut at = n;
        while at > 0 {
            let (_, id, start) = best[at];
            if !(id == self.unk && rev.last() == Some(&self.unk)) {
                rev.push(id);
            }
            at = start;
        }
        out.extend(rev.iter().rev());
    }
}

#[cfg(test)]
mod tests {
    use crate::{EncodeOptions, GgufTokenizerSpec, Tokenizer};

    /// A small XLM-R-shaped vocabulary: specials first, then pieces.
    fn spec() -> GgufTokenizerSpec {
        let pieces: &[(&str, f32, i32)] = &[
            ("<s>", 0.0, 3),
            ("<pad>", 0.0, 3),
            ("</s>", 0.0, 3),
            ("<unk>", 0.0, 2),
            ("\u{2581}", -2.0, 1),
            ("\u{2581}hello", -3.0, 1),
            ("\u{2581}he", -4.0, 1),
            ("llo", -4.5, 1),
            ("h", -6.0, 1),
            ("e", -6.0, 1),
            ("l", -6.0, 1),
            ("o", -6.0, 1),
            ("\u{2581}world", -3.5, 1),
            ("<", -7.0, 1),
            ("s", -7.0, 1),
            (">", -7.0, 1),
            ("<mask>", 0.0, 3),
        ];
        GgufTokenizerSpec {
            model: "t5".into(),
            tokens: pieces.iter().map(|p| p.0.to_string()).collect(),
            scores: pieces.iter().map(|p| p.1).collect(),
            token_types: pieces.iter().map(|p| p.2).collect(),
            bos_token_id: Some(0),
            eos_token_id: Some(2),
            unknown_token_id: Some(3),
            padding_token_id: Some(1),
            add_bos_token: Some(true),
            add_eos_token: Some(true),
            add_space_prefix: Some(true),
            remove_extra_whitespaces: Some(true),
            ..Default::default()
        }
    }

    #[test]
    fn viterbi_prefers_the_likeliest_split() {
        let tok = Tokenizer::from_gguf_spec(&spec()).unwrap();
        // "▁hello" (-3) beats "▁he" + "llo" (-8.5).
        assert_eq!(tok.encode("hello world", false).unwrap(), [5, 12]);
        assert_eq!(tok.encode("hello world", true).unwrap(), [0, 5, 12, 2]);
        // Extra whitespace folds and the ends are stripped.
        assert_eq!(tok.encode("  hello    world  ", false).unwrap(), [5, 12]);
        // Unknown characters map to one <unk> per run.
        assert_eq!(tok.encode("hello zzz", false).unwrap(), [5, 4, 3]);
        assert_eq!(tok.decode(&[0, 5, 12, 2], true), "hello world");
    }

    #[test]
    fn control_pieces_never_match_text() {
        let tok = Tokenizer::from_gguf_spec(&spec()).unwrap();
        let plain = EncodeOptions { add_special: false, parse_special: false };
        // `<s>` as text is three ordinary pieces, not the control token.
        assert_eq!(tok.encode_with("<s>", plain).unwrap(), [4, 13, 14, 15]);
        // Parsing specials, the literal is the control token.
        let parse = EncodeOptions { add_special: false, parse_special: true };
        assert_eq!(tok.encode_with("<s>", parse).unwrap(), [0]);
        assert_eq!(tok.bos_id(), Some(0));
        assert_eq!(tok.eos_id(), Some(2));
    }

    #[test]
    fn bad_vocabularies_are_errors() {
        let mut s = spec();
        s.scores.pop();
        assert!(Tokenizer::from_gguf_spec(&s).is_err());
        let mut s = spec();
        s.unknown_token_id = None;
        s.token_types[3] = 1;
        assert!(Tokenizer::from_gguf_spec(&s).is_err());
        let mut s = spec();
        s.precompiled_charsmap = vec![1, 2];
        assert!(Tokenizer::from_gguf_spec(&s).is_err());
    }
}
