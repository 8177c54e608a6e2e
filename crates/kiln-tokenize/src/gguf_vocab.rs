//! The GGUF tokenizer: byte-level BPE (`gpt2`), SentencePiece BPE (`llama`),
//! SentencePiece Unigram (`t5`) and WordPiece (`bert`), built from a
//! [`GgufTokenizerSpec`].

use crate::bytelevel::ByteLevel;
use crate::error::{Result, TokenizeError};
use crate::merge::{merge_word, RankTable, ScoreTable};
use crate::pretok::{FamilyFlags, PreTokenizer};
use crate::spec::{GgufTokenizerSpec, TokenType};
use crate::special::{Fragment, Literal, Literals};
use crate::token_cache::TokenCache;
use crate::unigram::Unigram;
use crate::vocab::{eog_ids, skipped_in_text, VocabInfo};
use crate::wordpiece::{WordPiece, WordPieceSpecials};
use std::collections::HashMap;

#[derive(Debug)]
enum Kind {
    /// SentencePiece BPE over `▁`-escaped text with byte fallback.
    Spm,
    /// BPE with merges after a family pre-tokenizer.
    Bpe { pretok: PreTokenizer, flags: FamilyFlags },
    /// BERT's WordPiece over the converter's `▁`-marked word starts.
    Wpm(WordPiece),
    /// SentencePiece Unigram: normalization map, then the likeliest split.
    Unigram(Unigram),
}

/// Encoder state for one GGUF vocabulary.
#[derive(Debug)]
pub(crate) struct GgufVocab {
    kind: Kind,
    ids: HashMap<String, u32>,
    scores: Vec<f32>,
    ranks: HashMap<(u32, u32), u32>,
    literals: Literals,
    /// Per byte: the token that stands for it alone (`<0xXX>` or a byte-level char).
    byte_tokens: [Option<u32>; 256],
    byte_level: ByteLevel,
    unk: Option<u32>,
    add_space_prefix: bool,
    /// Decoding drops the first piece's leading space (SentencePiece's
    /// prepended one, WordPiece's word-start marker).
    strip_first_space: bool,
    add_bos: bool,
    add_eos: bool,
    bos: Option<u32>,
    eos: Option<u32>,
    /// BPE words merged before, with their tokens. A chat resends its whole
    /// history every turn and prose repeats its words, so most words of a
    /// prompt are hits that skip the merges. A word's tokens depend on
    /// nothing but the word (the family's flags are fixed per vocabulary),
    /// so a hit is exact. Bounded: emptied when full.
    word_cache: TokenCache,
    /// BPE tokens of whole text fragments (the text between two special
    /// tokens: in a chat prompt, one message's role and content). A chat
    /// resends its history every turn, so with this a follow-up tokenizes
    /// only its new messages.
    fragment_cache: TokenCache,
}

/// Bytes [`GgufVocab::word_cache`] holds (some 25 000 words).
const WORD_CACHE_BYTES: usize = 2 << 20;
/// Longer words are merged every time (rare, and costly to keep).
const WORD_CACHE_MAX_BYTES: usize = 64;
/// Bytes [`GgufVocab::fragment_cache`] holds.
const FRAGMENT_CACHE_BYTES: usize = 4 << 20;
/// Fragments shorter than this are a few words (the word cache has them);
/// longer than the max, a document rather than a message: neither is kept.
const FRAGMENT_MIN_BYTES: usize = 64;
const FRAGMENT_MAX_BYTES: usize = 1 << 20;

impl GgufVocab {
    /// Builds the encoder and the shared token information.
    pub(crate) fn build(spec: &GgufTokenizerSpec) -> Result<(Self, VocabInfo)> {
        let n = spec.tokens.len();
        if n == 0 || n > u32::MAX as usize / 2 {
            return Err(TokenizeError::Invalid(format!("vocabulary of {n} tokens")));
        }
        if spec.model == "bert" {
            return Self::build_wordpiece(spec);
        }
        if spec.model == "t5" {
            return Self::build_unigram(spec);
        }
        let (kind, spm) = match spec.model.as_str() {
            "llama" => (Kind::Spm, true),
            "gpt2" => {
                let pre = spec.pre.as_deref().unwrap_or("default");
                let (pretok, flags) = PreTokenizer::for_family(pre)?;
                (Kind::Bpe { pretok, flags }, false)
            }
            "gemma4" => {
                let (pretok, flags) = PreTokenizer::for_family("gemma4")?;
                (Kind::Bpe { pretok, flags }, false)
            }
            other => {
                return Err(TokenizeError::Unsupported(format!(
                    "tokenizer model {other:?} (kiln reads \"gpt2\", \"llama\", \"gemma4\", \"bert\" and \"t5\")"
                )));
            }
        };
        let ids = id_map(spec);
        let flags = match &kind {
            Kind::Bpe { flags, .. } => *flags,
            Kind::Spm | Kind::Wpm(_) | Kind::Unigram(_) => FamilyFlags::default(),
        };
        let ranks = parse_merges(&spec.merges, &ids);
        if matches!(kind, Kind::Bpe { .. }) && ranks.is_empty() {
            return Err(TokenizeError::Invalid("BPE vocabulary without merges".into()));
        }
        let (def_bos, def_eos, def_unk) = if spm { (Some(1), Some(2), Some(0)) } else { (Some(11), Some(11), None) };
        let in_range = |i: &u32| (*i as usize) < n;
        let bos = spec.bos_token_id.or(def_bos).filter(in_range);
        let eos = spec.eos_token_id.or(def_eos).filter(in_range);
        let unk = spec.unknown_token_id.or(def_unk).filter(in_range);
        let byte_level = ByteLevel::new();
        let add_space_prefix = spec.add_space_prefix.unwrap_or(spm);
        let vocab = GgufVocab {
            byte_tokens: byte_tokens(spec, &ids, &byte_level, flags.byte_encode),
            literals: Literals::new(literals(spec)),
            scores: spec.scores.clone(),
            add_space_prefix,
            strip_first_space: add_space_prefix,
            add_bos: spec.add_bos_token.unwrap_or(spm || flags.add_bos),
            add_eos: spec.add_eos_token.unwrap_or(false),
            kind,
            ids,
            ranks,
            byte_level,
            unk,
            bos,
            eos,
            word_cache: TokenCache::new(WORD_CACHE_BYTES),
            fragment_cache: TokenCache::new(FRAGMENT_CACHE_BYTES),
        };
        let info = vocab.info(spec);
        Ok((vocab, info))
    }

    /// WordPiece: `[CLS] … [SEP]` with special tokens. `add_bos_token` may
    /// turn `[CLS]` off; the closing token is added when `add_sep_token`
    /// (true when absent) or `add_eos_token` says so, as llama.cpp does
    /// (gguf-py writes `add_sep_token = false, add_eos_token = true` for
    /// all-MiniLM, and llama.cpp closes its inputs with `[SEP]`).
    fn build_wordpiece(spec: &GgufTokenizerSpec) -> Result<(Self, VocabInfo)> {
        let ids = id_map(spec);
        let specials = WordPieceSpecials::of(spec, &ids)?;
        let byte_level = ByteLevel::new();
        let vocab = GgufVocab {
            kind: Kind::Wpm(WordPiece::new(spec, specials.unk)),
            byte_tokens: [None; 256],
            literals: Literals::new(literals(spec)),
            scores: Vec::new(),
            add_space_prefix: false,
            strip_first_space: true,
            add_bos: spec.add_bos_token.unwrap_or(true),
            add_eos: spec.add_sep_token.unwrap_or(true) || spec.add_eos_token.unwrap_or(false),
            ids,
            ranks: HashMap::new(),
            byte_level,
            unk: Some(specials.unk),
            bos: specials.cls,
            eos: specials.sep,
            word_cache: TokenCache::new(0),
            fragment_cache: TokenCache::new(0),
        };
        let info = vocab.info(spec);
        Ok((vocab, info))
    }

    /// SentencePiece Unigram: `<s> … </s>` by default (XLM-R), control and
    /// unknown pieces as literals.
    fn build_unigram(spec: &GgufTokenizerSpec) -> Result<(Self, VocabInfo)> {
        let n = spec.tokens.len();
        let ids = id_map(spec);
        let in_range = |i: &u32| (*i as usize) < n;
        let unk = spec
            .unknown_token_id
            .filter(in_range)
            .or_else(|| (0..n).find(|&i| spec.token_type(i) == TokenType::Unknown).map(|i| i as u32))
            .ok_or_else(|| TokenizeError::Invalid("Unigram vocabulary without an unknown piece".into()))?;
        let unigram = Unigram::new(spec, unk)?;
        let add_space_prefix = spec.add_space_prefix.unwrap_or(true);
        let vocab = GgufVocab {
            kind: Kind::Unigram(unigram),
            byte_tokens: [None; 256],
            literals: Literals::new(literals(spec)),
            scores: spec.scores.clone(),
            add_space_prefix,
            strip_first_space: add_space_prefix || spec.remove_extra_whitespaces.unwrap_or(true),
            add_bos: spec.add_bos_token.unwrap_or(true),
            add_eos: spec.add_eos_token.unwrap_or(true),
            ids,
            ranks: HashMap::new(),
            byte_level: ByteLevel::new(),
            unk: Some(unk),
            bos: spec.bos_token_id.filter(in_range),
            eos: spec.eos_token_id.filter(in_range),
            word_cache: TokenCache::new(0),
            fragment_cache: TokenCache::new(0),
        };
        let info = vocab.info(spec);
        Ok((vocab, info))
    }

    fn info(&self, spec: &GgufTokenizerSpec) -> VocabInfo {
        let n = spec.tokens.len();
        let byte_encode = matches!(&self.kind, Kind::Bpe { flags, .. } if flags.byte_encode);
        let mut pieces = Vec::with_capacity(n);
        let mut special = Vec::with_capacity(n);
        for (i, text) in spec.tokens.iter().enumerate() {
            let ty = spec.token_type(i);
            special.push(matches!(ty, TokenType::Control | TokenType::Unknown));
            pieces.push(piece_bytes(text, ty, byte_encode, &self.byte_level));
        }
        let explicit = [spec.eos_token_id, spec.eot_token_id, spec.eom_token_id];
        let eos_ids = eog_ids(&spec.tokens, self.eos, &explicit);
        for id in &eos_ids {
            if let Some(s) = special.get_mut(*id as usize) {
                *s = true;
            }
        }
        let skipped = skipped_in_text(&spec.tokens, &special);
        VocabInfo {
            texts: spec.tokens.clone(),
            pieces,
            special,
            skipped,
            bos: self.bos,
            eos: self.eos,
            eos_ids,
            add_bos: self.add_bos,
            add_eos: self.add_eos,
            strip_first_space: self.strip_first_space,
        }
    }

    /// Encodes text; `add_special` adds BOS/EOS per the model's flags.
    pub(crate) fn encode(&self, text: &str, add_special: bool, parse_special: bool) -> Result<Vec<u32>> {
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        if add_special && self.add_bos {
            out.extend(self.bos);
        }
        let mut prev_special = true;
        for frag in self.literals.partition(text, parse_special) {
            match frag {
                Fragment::Token(id) => {
                    out.push(id);
                    prev_special = true;
                }
                Fragment::Text(s, e) => {
                    let raw = text.get(s..e).unwrap_or_default();
                    self.encode_fragment(raw, prev_special, &mut out)?;
                    prev_special = false;
                }
            }
        }
        if add_special && self.add_eos {
            out.extend(self.eos);
        }
        Ok(out)
    }

    /// [`Self::encode_text`] through the fragment cache (BPE only: an SPM
    /// fragment's tokens also depend on what precedes it).
    fn encode_fragment(&self, raw: &str, prev_special: bool, out: &mut Vec<u32>) -> Result<()> {
        let cacheable =
            matches!(self.kind, Kind::Bpe { .. }) && (FRAGMENT_MIN_BYTES..=FRAGMENT_MAX_BYTES).contains(&raw.len());
        if !cacheable {
            return self.encode_text(raw, prev_special, out);
        }
        if self.fragment_cache.extend(raw, out) {
            return Ok(());
        }
        let start = out.len();
        self.encode_text(raw, prev_special, out)?;
        self.fragment_cache.insert(raw, &out[start..]);
        Ok(())
    }

    fn encode_text(&self, raw: &str, prev_special: bool, out: &mut Vec<u32>) -> Result<()> {
        match &self.kind {
            Kind::Spm => {
                let mut text = String::with_capacity(raw.len() + 4);
                if self.add_space_prefix && prev_special {
                    text.push(' ');
                }
                text.push_str(raw);
                let text = text.replace(' ', "\u{2581}");
                self.spm_word(&text, out);
            }
            Kind::Bpe { pretok, flags } => {
                let escaped;
                let raw = if flags.escape_whitespace {
                    escaped = raw.replace(' ', "\u{2581}");
                    escaped.as_str()
                } else {
                    raw
                };
                for word in pretok.split(raw)? {
                    if flags.byte_encode {
                        let enc = self.byte_level.encode(word.as_bytes());
                        self.bpe_word(&enc, *flags, out);
                    } else {
                        self.bpe_word(word, *flags, out);
                    }
                }
            }
            Kind::Wpm(wp) => wp.encode(raw, &self.ids, out),
            Kind::Unigram(u) => u.encode(raw, &self.ids, &self.scores, out),
        }
        Ok(())
    }

    fn spm_word(&self, word: &str, out: &mut Vec<u32>) {
        let table = ScoreTable { ids: &self.ids, scores: &self.scores };
        for (s, e) in merge_word(word, &table) {
            let span = word.get(s..e).unwrap_or_default();
            match self.ids.get(span) {
                Some(id) => out.push(*id),
                None => self.push_bytes(span.as_bytes(), out),
            }
        }
    }

    fn bpe_word(&self, word: &str, flags: FamilyFlags, out: &mut Vec<u32>) {
        let cacheable = word.len() <= WORD_CACHE_MAX_BYTES;
        if cacheable && self.word_cache.extend(word, out) {
            return;
        }
        let start = out.len();
        self.bpe_word_uncached(word, flags, out);
        if cacheable {
            self.word_cache.insert(word, &out[start..]);
        }
    }

    fn bpe_word_uncached(&self, word: &str, flags: FamilyFlags, out: &mut Vec<u32>) {
        let whole_newlines = !flags.byte_encode && word.bytes().all(|b| b == b'\n');
        if flags.ignore_merges || whole_newlines {
            if let Some(id) = self.ids.get(word) {
                out.push(*id);
                return;
            }
        }
        let table = RankTable { ids: &self.ids, ranks: &self.ranks };
        for (s, e) in merge_word(word, &table) {
            let span = word.get(s..e).unwrap_or_default();
            if let Some(id) = self.ids.get(span) {
                out.push(*id);
            } else if flags.byte_encode {
                // Each byte-level character is one byte; emit its token if present.
                let bytes = self.byte_level.decode(span).unwrap_or_default();
                for b in bytes {
                    out.extend(self.byte_tokens[usize::from(b)]);
                }
            } else {
                self.push_bytes(span.as_bytes(), out);
            }
        }
    }

    /// Exact vocabulary lookup.
    pub(crate) fn token_id(&self, text: &str) -> Option<u32> {
        self.ids.get(text).copied()
    }

    /// Byte fallback: `<0xXX>` tokens, or the unknown token when a byte has none.
    fn push_bytes(&self, bytes: &[u8], out: &mut Vec<u32>) {
        for b in bytes {
            if let Some(id) = self.byte_tokens[usize::from(*b)].or(self.unk) {
                out.push(id);
            }
        }
    }
}

/// Token text to id (a text listed twice maps to its last id).
fn id_map(spec: &GgufTokenizerSpec) -> HashMap<String, u32> {
    spec.tokens.iter().enumerate().map(|(i, t)| (t.clone(), i as u32)).collect()
}

/// Parses `"left right"` merges into ranks keyed by the ids of both halves.
fn parse_merges(merges: &[String], ids: &HashMap<String, u32>) -> HashMap<(u32, u32), u32> {
    let mut ranks = HashMap::with_capacity(merges.len());
    for (rank, m) in merges.iter().enumerate() {
        // The separator is the first space after the first byte (a half may start with one).
        let first = m.chars().next().map_or(1, char::len_utf8);
        let Some(pos) = m.get(first..).and_then(|t| t.find(' ')).map(|p| p + first) else {
            continue;
        };
        let (a, b) = (&m[..pos], &m[pos + 1..]);
        if let (Some(ia), Some(ib)) = (ids.get(a), ids.get(b)) {
            ranks.entry((*ia, *ib)).or_insert(rank as u32);
        }
    }
    ranks
}

fn byte_tokens(
    spec: &GgufTokenizerSpec,
    ids: &HashMap<String, u32>,
    bl: &ByteLevel,
    byte_encode: bool,
) -> [Option<u32>; 256] {
    let mut t = [None; 256];
    for (b, slot) in t.iter_mut().enumerate() {
        let b = b as u8;
        let hex = format!("<0x{b:02X}>");
        *slot = if byte_encode {
            ids.get(bl.char_of(b).to_string().as_str()).copied()
        } else {
            ids.get(hex.as_str())
                .copied()
                .filter(|id| spec.token_type(*id as usize) == TokenType::Byte)
                .or_else(|| ids.get(hex.as_str()).copied())
        };
    }
    t
}

/// Tokens matched literally in text: control, unknown and user-defined ones.
fn literals(spec: &GgufTokenizerSpec) -> Vec<Literal> {
    let phi3 =
        spec.model_name.as_deref().map(str::to_lowercase).is_some_and(|n| n.contains("phi-3") || n.contains("phi3"));
    spec.tokens
        .iter()
        .enumerate()
        .filter_map(|(i, text)| {
            let ty = spec.token_type(i);
            let needs = match ty {
                TokenType::Control | TokenType::Unknown => true,
                TokenType::UserDefined => false,
                _ => return None,
            };
            let keeps_space = matches!(text.as_str(), "<unk>" | "<s>" | "<|endoftext|>");
            Some(Literal {
                id: i as u32,
                text: text.clone(),
                needs_parse_special: needs,
                lstrip: false,
                rstrip: phi3 && !keeps_space,
            })
        })
        .collect()
}

/// The bytes a token stands for when decoding.
fn piece_bytes(text: &str, ty: TokenType, byte_encode: bool, bl: &ByteLevel) -> Vec<u8> {
    match ty {
        TokenType::Control | TokenType::Unknown | TokenType::UserDefined => text.as_bytes().to_vec(),
        TokenType::Unused => Vec::new(),
        TokenType::Byte => parse_byte_token(text).map_or_else(|| text.as_bytes().to_vec(), |b| vec![b]),
        TokenType::Normal if byte_encode => bl.decode(text).unwrap_or_else(|| text.as_bytes().to_vec()),
        TokenType::Normal => text.replace('\u{2581}', " ").into_bytes(),
    }
}

/// Parses `<0xAB>`.
pub(crate) fn parse_byte_token(text: &str) -> Option<u8> {
    let hex = text.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}
