//! The Hugging Face backend: `tokenizer.json` through the `tokenizers` crate, plus
//! `tokenizer_config.json` (BOS/EOS, chat template) and `generation_config.json`
//! (extra end-of-generation ids).

use crate::bytelevel::ByteLevel;
use crate::error::{Result, TokenizeError};
use crate::gguf_vocab::parse_byte_token;
use crate::vocab::{eog_ids, skipped_in_text, VocabInfo};
use serde_json::Value;
use std::str::FromStr;

/// Two copies of the tokenizer: one parsing special tokens in text, one not.
pub(crate) struct HfBackend {
    parse: tokenizers::Tokenizer,
    plain: tokenizers::Tokenizer,
}

impl std::fmt::Debug for HfBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HfBackend").finish_non_exhaustive()
    }
}

/// How normal tokens turn into bytes, read from the `decoder` section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PieceStyle {
    ByteLevel,
    SentencePiece,
    Raw,
}

fn json(what: &str, text: &str) -> Result<Value> {
    serde_json::from_str(text).map_err(|source| TokenizeError::Json { what: what.into(), source })
}

/// `"<s>"` or `{"content": "<s>", ...}`.
fn token_string(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("content")?.as_str().map(String::from),
        _ => None,
    }
}

fn ids_of(v: Option<&Value>) -> Vec<u32> {
    match v {
        Some(Value::Number(n)) => n.as_u64().and_then(|x| u32::try_from(x).ok()).into_iter().collect(),
        Some(Value::Array(a)) => a.iter().filter_map(|x| x.as_u64()).filter_map(|x| u32::try_from(x).ok()).collect(),
        _ => Vec::new(),
    }
}

/// Walks the decoder (and its `Sequence` children) collecting type names and flags.
fn decoder_facts(decoder: &Value, types: &mut Vec<String>, strip_start: &mut bool) {
    let ty = decoder.get("type").and_then(Value::as_str).unwrap_or_default();
    types.push(ty.to_string());
    match ty {
        "Sequence" => {
            for d in decoder.get("decoders").and_then(Value::as_array).into_iter().flatten() {
                decoder_facts(d, types, strip_start);
            }
        }
        "Strip" => {
            let start = decoder.get("start").and_then(Value::as_u64).unwrap_or(0);
            let content = decoder.get("content").and_then(Value::as_str).unwrap_or(" ");
            *strip_start |= start > 0 && content == " ";
        }
        "Metaspace" => {
            let scheme = decoder.get("prepend_scheme").and_then(Value::as_str);
            let legacy = decoder.get("add_prefix_space").and_then(Value::as_bool);
            *strip_start |= matches!(scheme, Some("first" | "always")) || legacy == Some(true);
        }
        _ => {}
    }
}

/// The chat template of a `tokenizer_config.json` (a string, or a list of named ones).
fn chat_template_of(cfg: &Value) -> Option<String> {
    match cfg.get("chat_template")? {
        Value::String(s) => Some(s.clone()),
        Value::Array(list) => {
            let named = |n: &str| {
                list.iter()
                    .find(|t| t.get("name").and_then(Value::as_str) == Some(n))
                    .and_then(|t| t.get("template")?.as_str().map(String::from))
            };
            named("default").or_else(|| list.first()?.get("template")?.as_str().map(String::from))
        }
        _ => None,
    }
}

impl HfBackend {
    /// Loads the backend; returns it with token info and the chat template, if any.
    pub(crate) fn load(
        tokenizer_json: &str,
        tokenizer_config: Option<&str>,
        generation_config: Option<&str>,
    ) -> Result<(Self, VocabInfo, Option<String>)> {
        let mut parse =
            tokenizers::Tokenizer::from_str(tokenizer_json).map_err(|e| TokenizeError::Hf(e.to_string()))?;
        // kiln decides sequence lengths itself. A `tokenizer.json` may configure
        // padding and truncation (sentence-transformers exports pad to 128), which
        // the `tokenizers` crate applies inside every `encode`.
        parse.with_padding(None);
        parse.with_truncation(None).map_err(|e| TokenizeError::Hf(e.to_string()))?;
        let mut plain = parse.clone();
        plain.set_encode_special_tokens(true);
        let raw = json("tokenizer.json", tokenizer_json)?;
        let cfg = tokenizer_config.map(|c| json("tokenizer_config.json", c)).transpose()?;
        let gen = generation_config.map(|c| json("generation_config.json", c)).transpose()?;
        let backend = Self { parse, plain };
        let info = backend.info(&raw, cfg.as_ref(), gen.as_ref())?;
        let template = cfg.as_ref().and_then(chat_template_of);
        Ok((backend, info, template))
    }

    fn info(&self, raw: &Value, cfg: Option<&Value>, gen: Option<&Value>) -> Result<VocabInfo> {
        let mut types = Vec::new();
        let mut strip_first_space = false;
        if let Some(d) = raw.get("decoder") {
            decoder_facts(d, &mut types, &mut strip_first_space);
        }
        let style = if types.iter().any(|t| t == "ByteLevel") {
            PieceStyle::ByteLevel
        } else if types.iter().any(|t| t == "ByteFallback" || t == "Metaspace" || t == "Replace") {
            PieceStyle::SentencePiece
        } else {
            PieceStyle::Raw
        };
        let n = self.parse.get_vocab_size(true);
        let added = self.parse.get_added_tokens_decoder();
        let bl = ByteLevel::new();
        let mut tokens = Vec::with_capacity(n);
        let mut pieces = Vec::with_capacity(n);
        let mut special = Vec::with_capacity(n);
        for id in 0..n as u32 {
            let text = self.parse.id_to_token(id).unwrap_or_default();
            let added_tok = added.get(&id);
            special.push(added_tok.is_some_and(|t| t.special));
            pieces.push(match (added_tok, style) {
                (Some(_), _) | (None, PieceStyle::Raw) => text.as_bytes().to_vec(),
                (None, PieceStyle::ByteLevel) => bl.decode(&text).unwrap_or_else(|| text.as_bytes().to_vec()),
                (None, PieceStyle::SentencePiece) => match parse_byte_token(&text) {
                    Some(b) => vec![b],
                    None => text.replace('\u{2581}', " ").into_bytes(),
                },
            });
            tokens.push(text);
        }
        let lookup = |v: Option<&Value>| token_string(v).and_then(|t| self.parse.token_to_id(&t));
        // BERT-family configs name `[CLS]` / `[SEP]` as cls / sep tokens and no bos / eos.
        let key = |k: &str| cfg.and_then(|c| c.get(k));
        let bos = lookup(key("bos_token"))
            .or_else(|| ids_of(gen.and_then(|g| g.get("bos_token_id"))).first().copied())
            .or_else(|| lookup(key("cls_token")));
        let gen_eos = ids_of(gen.and_then(|g| g.get("eos_token_id")));
        let eos = lookup(key("eos_token")).or_else(|| gen_eos.first().copied()).or_else(|| lookup(key("sep_token")));
        let explicit: Vec<Option<u32>> = gen_eos.iter().map(|i| Some(*i)).collect();
        let eos_ids = eog_ids(&tokens, eos, &explicit);
        for id in &eos_ids {
            if let Some(s) = special.get_mut(*id as usize) {
                *s = true;
            }
        }
        let skipped = skipped_in_text(&tokens, &special);
        let probe = self.encode("", true, false)?;
        Ok(VocabInfo {
            texts: tokens,
            pieces,
            special,
            skipped,
            bos,
            eos,
            add_bos: bos.is_some() && probe.first() == bos.as_ref(),
            add_eos: eos.is_some() && probe.last() == eos.as_ref(),
            eos_ids,
            strip_first_space,
        })
    }

    /// Encodes; `add_special` runs the post-processor (BOS/EOS templates).
    pub(crate) fn encode(&self, text: &str, add_special: bool, parse_special: bool) -> Result<Vec<u32>> {
        let tk = if parse_special { &self.parse } else { &self.plain };
        let enc = tk.encode_fast(text, add_special).map_err(|e| TokenizeError::Hf(e.to_string()))?;
        Ok(enc.get_ids().to_vec())
    }

    /// Exact vocabulary lookup.
    pub(crate) fn token_id(&self, text: &str) -> Option<u32> {
        self.parse.token_to_id(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A BERT-style `tokenizer.json` that, like sentence-transformers exports,
    /// configures truncation (to 4) and padding (to 8).
    const PADDED: &str = r###"{
      "version": "1.0",
      "truncation": {"max_length": 4, "strategy": "LongestFirst", "stride": 0},
      "padding": {"strategy": {"Fixed": 8}, "direction": "Right", "pad_to_multiple_of": null,
                  "pad_id": 0, "pad_type_id": 0, "pad_token": "[PAD]"},
      "added_tokens": [
        {"id": 0, "special": true, "content": "[PAD]", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false},
        {"id": 1, "special": true, "content": "[UNK]", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false},
        {"id": 2, "special": true, "content": "[CLS]", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false},
        {"id": 3, "special": true, "content": "[SEP]", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false}
      ],
      "normalizer": {"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true, "strip_accents": null, "lowercase": true},
      "pre_tokenizer": {"type": "BertPreTokenizer"},
      "post_processor": {"type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
        "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [2], "tokens": ["[CLS]"]}, "[SEP]": {"id": "[SEP]", "ids": [3], "tokens": ["[SEP]"]}}},
      "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": true},
      "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##", "max_input_chars_per_word": 100,
                "vocab": {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "a": 4, "b": 5, "##b": 6}}
    }"###;

    /// kiln decides sequence lengths itself: the file's padding and truncation
    /// must not reach `encode` (nor the add-BOS/EOS probe, which reads the ends).
    #[test]
    fn configured_padding_and_truncation_are_off() {
        let cfg = r#"{"cls_token": "[CLS]", "sep_token": "[SEP]", "unk_token": "[UNK]"}"#;
        let (hf, info, _) = HfBackend::load(PADDED, Some(cfg), None).unwrap();
        assert_eq!(hf.encode("a", true, true).unwrap(), [2, 4, 3]);
        assert_eq!(hf.encode("a", false, true).unwrap(), [4]);
        assert_eq!(hf.encode("a b ab a b", true, false).unwrap(), [2, 4, 5, 4, 6, 4, 5, 3]);
        assert_eq!(hf.encode("", false, false).unwrap(), Vec::<u32>::new());
        // No bos / eos token named: `[CLS]` and `[SEP]` stand for them.
        assert_eq!((info.bos, info.eos), (Some(2), Some(3)));
        assert!(info.add_bos && info.add_eos);
    }
}
