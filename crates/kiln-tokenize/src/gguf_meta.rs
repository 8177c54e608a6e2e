//! Reading a [`GgufTokenizerSpec`] out of kiln-gguf's [`Metadata`].

use crate::error::{Result, TokenizeError};
use crate::spec::GgufTokenizerSpec;
use crate::tokenizer::Tokenizer;
use kiln_gguf::{Array, Metadata};

fn gguf_err(e: kiln_gguf::GgufError) -> TokenizeError {
    TokenizeError::Invalid(e.to_string())
}

/// An optional token id; negative values (some converters write -1) mean "none".
fn opt_id(meta: &Metadata, key: &str) -> Result<Option<u32>> {
    let v = meta.opt_i64(key).map_err(gguf_err)?;
    Ok(v.and_then(|x| u32::try_from(x).ok()))
}

fn opt_bool(meta: &Metadata, key: &str) -> Result<Option<bool>> {
    meta.opt_bool(key).map_err(gguf_err)
}

fn opt_string(meta: &Metadata, key: &str) -> Result<Option<String>> {
    Ok(meta.opt_str(key).map_err(gguf_err)?.map(String::from))
}

/// Token scores may be stored as f32 or as integers.
fn scores(meta: &Metadata) -> Result<Vec<f32>> {
    match meta.opt_array("tokenizer.ggml.scores").map_err(gguf_err)? {
        None => Ok(Vec::new()),
        Some(Array::F32(v)) => Ok(v.clone()),
        Some(a) => a
            .integers()
            .map(|v| v.into_iter().map(|x| x as f32).collect())
            .ok_or_else(|| TokenizeError::Invalid("tokenizer.ggml.scores is not numeric".into())),
    }
}

fn token_types(meta: &Metadata) -> Result<Vec<i32>> {
    match meta.opt_array("tokenizer.ggml.token_type").map_err(gguf_err)? {
        None => Ok(Vec::new()),
        Some(Array::I32(v)) => Ok(v.clone()),
        Some(a) => a
            .integers()
            .map(|v| v.into_iter().map(|x| i32::try_from(x).unwrap_or(1)).collect())
            .ok_or_else(|| TokenizeError::Invalid("tokenizer.ggml.token_type is not integer".into())),
    }
}

/// The SentencePiece normalization map, stored as bytes (gguf-py writes u8;
/// some writers use i8).
fn charsmap(meta: &Metadata) -> Result<Vec<u8>> {
    match meta.opt_array("tokenizer.ggml.precompiled_charsmap").map_err(gguf_err)? {
        None => Ok(Vec::new()),
        Some(Array::U8(v)) => Ok(v.clone()),
        Some(Array::I8(v)) => Ok(v.iter().map(|b| *b as u8).collect()),
        Some(_) => Err(TokenizeError::Invalid("tokenizer.ggml.precompiled_charsmap is not a byte array".into())),
    }
}

impl GgufTokenizerSpec {
    /// Collects the `tokenizer.*` keys (and `general.name`) of a GGUF file.
    pub fn from_gguf_metadata(meta: &Metadata) -> Result<Self> {
        let k = |s: &str| format!("tokenizer.ggml.{s}");
        let strs = |key: &str| -> Result<Vec<String>> {
            Ok(meta.opt_str_array(key).map_err(gguf_err)?.map(<[String]>::to_vec).unwrap_or_default())
        };
        Ok(Self {
            model: meta.get_str(&k("model")).map_err(gguf_err)?.to_string(),
            pre: opt_string(meta, &k("pre"))?,
            tokens: strs(&k("tokens"))?,
            token_types: token_types(meta)?,
            scores: scores(meta)?,
            merges: strs(&k("merges"))?,
            bos_token_id: opt_id(meta, &k("bos_token_id"))?,
            eos_token_id: opt_id(meta, &k("eos_token_id"))?,
            eot_token_id: opt_id(meta, &k("eot_token_id"))?,
            eom_token_id: opt_id(meta, &k("eom_token_id"))?,
            unknown_token_id: opt_id(meta, &k("unknown_token_id"))?,
            padding_token_id: opt_id(meta, &k("padding_token_id"))?,
            sep_token_id: opt_id(meta, &k("seperator_token_id"))?,
            cls_token_id: opt_id(meta, &k("cls_token_id"))?,
            add_sep_token: opt_bool(meta, &k("add_sep_token"))?,
            add_bos_token: opt_bool(meta, &k("add_bos_token"))?,
            add_eos_token: opt_bool(meta, &k("add_eos_token"))?,
            add_space_prefix: opt_bool(meta, &k("add_space_prefix"))?,
            remove_extra_whitespaces: opt_bool(meta, &k("remove_extra_whitespaces"))?,
            precompiled_charsmap: charsmap(meta)?,
            chat_template: opt_string(meta, "tokenizer.chat_template")?,
            model_name: opt_string(meta, "general.name")?,
        })
    }
}

impl Tokenizer {
    /// Builds the tokenizer stored in a GGUF file's metadata.
    pub fn from_gguf_metadata(meta: &Metadata) -> Result<Self> {
        Self::from_gguf_spec(&GgufTokenizerSpec::from_gguf_metadata(meta)?)
    }
}
