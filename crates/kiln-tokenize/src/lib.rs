//! kiln's tokenization layer.
//!
//! * [`Tokenizer`] turns text into token ids and back. Build it from a GGUF file's
//!   tokenizer keys ([`GgufTokenizerSpec`], [`Tokenizer::from_gguf_spec`]) or from a
//!   Hugging Face `tokenizer.json` ([`Tokenizer::from_hf_dir`]). GGUF vocabularies are
//!   encoded by kiln's own code (BPE: byte-level `gpt2` with the family's
//!   pre-tokenizer, SentencePiece `llama` with byte fallback; WordPiece: `bert`, the
//!   vocabulary of BERT-family embedding models; SentencePiece Unigram:
//!   `t5`, XLM-R's) and checked against llama.cpp's
//!   reference vectors; `tokenizer.json` goes through the `tokenizers` crate, with
//!   any padding or truncation it configures turned off.
//! * [`IncrementalDetokenizer`] turns a stream of generated ids into text deltas that
//!   are always valid UTF-8, at a cost proportional to each token's length.
//! * [`ChatTemplate`] renders a conversation with the model's Jinja chat template in a
//!   sandbox with fuel and output limits; [`ChatTemplate::chatml`] is the fallback.
//!   [`GoChatTemplate`] renders one with an Ollama Modelfile `TEMPLATE` (Go
//!   `text/template`, [`kiln_gotmpl`]) as Ollama does.
//!
//! ```no_run
//! # fn main() -> kiln_tokenize::Result<()> {
//! use kiln_tokenize::{ChatMessage, ChatTemplate, IncrementalDetokenizer, Tokenizer};
//! let tok = Tokenizer::from_hf_dir(std::path::Path::new("model/"))?;
//! let template = match tok.chat_template() {
//!     Some(src) => ChatTemplate::new(src)?,
//!     None => ChatTemplate::chatml(),
//! };
//! let prompt = template.render(&[ChatMessage::new("user", "Hi!")], true, &Default::default())?;
//! let ids = tok.encode(&prompt, true)?;
//! let mut detok = IncrementalDetokenizer::continuing(&tok, true);
//! for id in ids {
//!     print!("{}", detok.push(id));
//! }
//! # Ok(()) }
//! ```
#![warn(missing_docs, unreachable_pub)]
#![deny(unused_must_use)]

mod bytelevel;
mod charsmap;
mod chat;
mod detok;
mod error;
mod gguf_meta;
mod gguf_vocab;
mod go_chat;
mod hf;
mod merge;
mod pretok;
mod spec;
mod special;
mod strftime;
mod token_cache;
mod tokenizer;
mod unigram;
mod vocab;
mod wordpiece;

pub use chat::{
    ChatContext, ChatMessage, ChatTemplate, TemplateFunctionCall, TemplateLimits, TemplateToolCall, CHATML_TEMPLATE,
    GEMMA_TEMPLATE,
};
pub use detok::IncrementalDetokenizer;
pub use error::{Result, TokenizeError};
pub use go_chat::GoChatTemplate;
pub use kiln_gotmpl;
pub use spec::{GgufTokenizerSpec, TokenType};
pub use tokenizer::{EncodeOptions, Tokenizer};

/// Whether a GGUF `tokenizer.ggml.pre` family is implemented by [`Tokenizer::from_gguf_spec`]
/// (a BPE question: WordPiece ignores `pre`; see [`supports_tokenizer_model`]).
pub fn supports_pre_tokenizer(pre: &str) -> bool {
    pretok::is_known_family(pre)
}

/// Whether [`Tokenizer::from_gguf_spec`] implements a GGUF `tokenizer.ggml.model`
/// with this `tokenizer.ggml.pre` (`None`: the key is absent): `llama`, `bert` and
/// `t5` whatever `pre` says, `gpt2` when [`supports_pre_tokenizer`] knows the family.
pub fn supports_tokenizer_model(model: &str, pre: Option<&str>) -> bool {
    match model {
        "llama" | "bert" | "gemma4" | "t5" => true,
        "gpt2" => supports_pre_tokenizer(pre.unwrap_or("default")),
        _ => false,
    }
}
