//! kiln for Node.js: the engine in process (no server), through napi-rs.
//!
//! This is the native half; `index.js` wraps it in the public API (`Model`,
//! async iterators, `AbortSignal`). Loading runs on libuv's thread pool;
//! waiting for events runs on tokio threads that resolve promises, so the
//! event loop never waits on the engine.
#![deny(clippy::all)]

mod model;
mod options;
mod stream;

use napi::{Error, Status};

/// A binding error as a JavaScript error: the caller's mistake becomes a
/// `TypeError` in `index.js` (status `InvalidArg`), the rest an `Error`,
/// with the engine's message either way.
pub(crate) fn to_js(e: kiln_bind::BindError) -> Error {
    let status = if e.is_invalid() { Status::InvalidArg } else { Status::GenericFailure };
    Error::new(status, e.to_string())
}

/// Writes a tiny random-weight encoder (a Hugging Face directory with its
/// tokenizer) to `path`, for tests; `rank`: a cross-encoder (reranker).
#[napi_derive::napi(js_name = "_writeTinyEncoder")]
pub fn write_tiny_encoder(path: String, rank: Option<bool>) -> napi::Result<()> {
    let tiny = kiln_models::testing::encoder::TinyEncoder { rank: rank.unwrap_or(false), ..Default::default() };
    tiny.write_servable(path.as_ref()).map_err(|e| Error::from_reason(e.to_string()))
}

/// Writes a tiny random-weight chat model (GGUF) with a context of `ctx`
/// tokens (default 256) to `path`, for tests; `template` replaces its chat
/// template.
#[napi_derive::napi(js_name = "_writeTinyModel")]
pub fn write_tiny_model(path: String, ctx: Option<u32>, template: Option<String>) -> napi::Result<()> {
    use kiln_models::testing::{tiny_tokenizer_metadata, tiny_weights, write_gguf, TinySpec};
    let (vocab, mut md) = tiny_tokenizer_metadata();
    if let Some(t) = template {
        md.retain(|(k, _)| k != "tokenizer.chat_template");
        md.push(("tokenizer.chat_template".into(), kiln_gguf::Value::from(t.as_str())));
    }
    let spec = TinySpec { vocab, ctx: ctx.unwrap_or(256) as usize, ..TinySpec::llama(kiln_gguf::GgmlType::F32) };
    write_gguf(&spec, &tiny_weights(&spec), path.as_ref(), &md).map_err(|e| Error::from_reason(e.to_string()))
}
