//! The Hugging Face backend: `tokenizer.json` through the `tokenizers` crate, plus
//! `tokenizer_config.json` (BOS/EOS, chat template) and `generation_config.json`
//! (extra end-of-generation ids).

use crate::bytelevel::ByteLevel;
use crate::error::{Result, TokenizeError};
use crate::gguf_vocab::parse_byte_token;
use crate::vocab::{eog_ids, VocabInfo};
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
        // Padding and truncation in a tokenizer.json are a training
        // pipeline's settings (all-MiniLM's pads every input to 128 ids);
        // kiln decides lengths itself, with errors that name the limit.
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
        let bos = lookup(cfg.and_then(|c| c.get("bos_token")))
            .or_else(|| ids_of(gen.and_then(|g| g.get("bos_token_id"))).first().copied());
        let gen_eos = ids_of(gen.and_then(|g| g.get("eos_token_id")));
        let eos = lookup(cfg.and_then(|c| c.get("eos_token"))).or_else(|| gen_eos.first().copied());
        let explicit: Vec<Option<u32>> = gen_eos.iter().map(|i| Some(*i)).collect();
        let eos_ids = eog_ids(&tokens, eos, &explicit);
        for id in &eos_ids {
            if let Some(s) = special.get_mut(*id as usize) {
                *s = true;
            }
        }
        let probe = self.encode("", true, false)?;
        Ok(VocabInfo {
            texts: tokens,
            pieces,
            special,
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
