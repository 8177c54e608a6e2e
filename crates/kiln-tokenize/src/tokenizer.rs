//! [`Tokenizer`]: one type over both sources (GGUF metadata, HF `tokenizer.json`).

use crate::error::{Result, TokenizeError};
use crate::gguf_vocab::GgufVocab;
use crate::hf::HfBackend;
use crate::spec::GgufTokenizerSpec;
use crate::vocab::VocabInfo;
use std::path::Path;

#[derive(Debug)]
enum Backend {
    Gguf(Box<GgufVocab>),
    Hf(Box<HfBackend>),
}

/// Options for [`Tokenizer::encode_with`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EncodeOptions {
    /// Add BOS/EOS as the model's flags say.
    pub add_special: bool,
    /// Recognize control tokens written literally in the text (`<|im_start|>`).
    /// Turn off for untrusted text that must not be able to forge turn markers.
    /// User-defined tokens are always recognized.
    pub parse_special: bool,
}

/// A text ↔ token-id converter with the model's special-token facts.
#[derive(Debug)]
pub struct Tokenizer {
    backend: Backend,
    info: VocabInfo,
    chat_template: Option<String>,
}

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|source| TokenizeError::Io { path: path.display().to_string(), source })
}

fn read_optional(path: &Path) -> Result<Option<String>> {
    if path.is_file() {
        read(path).map(Some)
    } else {
        Ok(None)
    }
}

impl Tokenizer {
    /// Builds the tokenizer described by GGUF metadata (`gpt2` byte-level BPE,
    /// `llama` SentencePiece BPE, `bert` WordPiece: `[CLS] … [SEP]` with special
    /// tokens, decoding `▁` as a space).
    pub fn from_gguf_spec(spec: &GgufTokenizerSpec) -> Result<Self> {
        let (vocab, info) = GgufVocab::build(spec)?;
        Ok(Self { backend: Backend::Gguf(Box::new(vocab)), info, chat_template: spec.chat_template.clone() })
    }

    /// Builds a tokenizer from the contents of `tokenizer.json` and, when given,
    /// `tokenizer_config.json` and `generation_config.json`.
    pub fn from_hf_json(
        tokenizer_json: &str,
        tokenizer_config: Option<&str>,
        generation_config: Option<&str>,
    ) -> Result<Self> {
        let (hf, info, chat_template) = HfBackend::load(tokenizer_json, tokenizer_config, generation_config)?;
        Ok(Self { backend: Backend::Hf(Box::new(hf)), info, chat_template })
    }

    /// Loads `tokenizer.json` (required), `tokenizer_config.json` and
    /// `generation_config.json` (optional) from a model directory. The chat
    /// template comes from `chat_template.jinja` where the directory has one
    /// (what transformers saves since it moved templates out of
    /// `tokenizer_config.json`), else from `tokenizer_config.json`.
    pub fn from_hf_dir(dir: &Path) -> Result<Self> {
        let tok = read(&dir.join("tokenizer.json"))?;
        let cfg = read_optional(&dir.join("tokenizer_config.json"))?;
        let gen = read_optional(&dir.join("generation_config.json"))?;
        let mut t = Self::from_hf_json(&tok, cfg.as_deref(), gen.as_deref())?;
        if let Some(template) = read_optional(&dir.join("chat_template.jinja"))? {
            t.chat_template = Some(template);
        }
        Ok(t)
    }

    /// Encodes text, recognizing special tokens written in it (as chat templates need);
    /// `add_special` adds BOS/EOS per the model's flags.
    pub fn encode(&self, text: &str, add_special: bool) -> Result<Vec<u32>> {
        self.encode_with(text, EncodeOptions { add_special, parse_special: true })
    }

    /// Encodes text with explicit options.
    pub fn encode_with(&self, text: &str, opts: EncodeOptions) -> Result<Vec<u32>> {
        match &self.backend {
            Backend::Gguf(v) => v.encode(text, opts.add_special, opts.parse_special),
            Backend::Hf(h) => h.encode(text, opts.add_special, opts.parse_special),
        }
    }

    /// Decodes ids to text; invalid UTF-8 becomes U+FFFD, unknown ids are ignored.
    /// `skip_special` drops control and end-of-generation tokens (not
    /// harmony's message markers: the chat layer reads them). A SentencePiece
    /// model's leading space (added when encoding) is removed from the first piece.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> String {
        let mut bytes = Vec::with_capacity(ids.len() * 4);
        for id in ids {
            if skip_special && self.is_skipped(*id) {
                continue;
            }
            let piece = self.token_to_bytes(*id).unwrap_or_default();
            if bytes.is_empty() && self.info.strip_first_space {
                bytes.extend_from_slice(piece.strip_prefix(b" ").unwrap_or(piece));
            } else {
                bytes.extend_from_slice(piece);
            }
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// The bytes token `id` stands for (special tokens: their text); `None` if out of range.
    pub fn token_to_bytes(&self, id: u32) -> Option<&[u8]> {
        self.info.pieces.get(id as usize).map(Vec::as_slice)
    }

    /// The vocabulary string of token `id` (e.g. `"Ġworld"` or `"▁world"`).
    pub fn token_text(&self, id: u32) -> Option<&str> {
        self.info.texts.get(id as usize).map(String::as_str)
    }

    /// The id whose vocabulary string is exactly `text`.
    pub fn token_id(&self, text: &str) -> Option<u32> {
        match &self.backend {
            Backend::Gguf(v) => v.token_id(text),
            Backend::Hf(h) => h.token_id(text),
        }
    }

    /// Number of tokens (including added tokens).
    pub fn vocab_size(&self) -> usize {
        self.info.pieces.len()
    }

    /// The beginning-of-sequence token, if the model has one.
    pub fn bos_id(&self) -> Option<u32> {
        self.info.bos
    }

    /// The model's primary end-of-sequence token.
    pub fn eos_id(&self) -> Option<u32> {
        self.info.eos
    }

    /// Every token that ends a generation (eos, eot, eom, `<|im_end|>`, `<|eot_id|>`, ...), sorted.
    pub fn eos_ids(&self) -> &[u32] {
        &self.info.eos_ids
    }

    /// Whether `id` ends a generation.
    pub fn is_eos(&self, id: u32) -> bool {
        self.info.eos_ids.binary_search(&id).is_ok()
    }

    /// Whether `id` is a control / special token (dropped by `skip_special`).
    pub fn is_special(&self, id: u32) -> bool {
        self.info.special.get(id as usize).copied().unwrap_or(false)
    }

    /// Whether decoding with `skip_special` drops token `id`: a special
    /// token, except harmony's message markers (`<|start|>`, `<|channel|>`,
    /// `<|message|>`, `<|constrain|>`, `<|end|>`) in a harmony vocabulary.
    pub fn is_skipped(&self, id: u32) -> bool {
        self.info.skipped.get(id as usize).copied().unwrap_or(false)
    }

    /// Whether `encode(.., add_special = true)` adds BOS.
    pub fn adds_bos(&self) -> bool {
        self.info.add_bos
    }

    /// Whether `encode(.., add_special = true)` adds EOS.
    pub fn adds_eos(&self) -> bool {
        self.info.add_eos
    }

    /// Whether decoding from the start of a sequence drops one leading space
    /// (SentencePiece models that prepend one when encoding).
    pub fn strips_first_space(&self) -> bool {
        self.info.strip_first_space
    }

    /// The chat template shipped with the model, if any.
    pub fn chat_template(&self) -> Option<&str> {
        self.chat_template.as_deref()
    }
}
