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

/// Writes a tiny random-weight chat model (GGUF) to `path`, for tests.
#[napi_derive::napi(js_name = "_writeTinyModel")]
pub fn write_tiny_model(path: String) -> napi::Result<()> {
    kiln_models::testing::write_tiny_chat_model(path.as_ref(), kiln_gguf::GgmlType::F32, 256)
        .map(|_| ())
        .map_err(|e| Error::from_reason(e.to_string()))
}
