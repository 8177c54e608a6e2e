//! kiln for Python: the engine in process (no server), through pyo3.
//!
//! The module is `kiln._kiln`; `kiln/__init__.py` re-exports it. Every
//! blocking wait (loading, generating, each event of a stream) releases
//! the GIL; the async methods await the engine's channel on a tokio thread
//! and resolve asyncio futures (one wake of the event loop per engine step:
//! `wake`), so no Python thread waits at all.

mod model;
mod options;
mod reply;
mod stream;
mod wake;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

pyo3::create_exception!(kiln, KilnError, PyRuntimeError, "The engine failed or refused a request.");

/// A binding error as a Python exception: the caller's mistake is a
/// `ValueError`, everything else a `KilnError` (a `RuntimeError`).
pub(crate) fn to_py(e: kiln_bind::BindError) -> PyErr {
    if e.is_invalid() {
        PyValueError::new_err(e.to_string())
    } else {
        KilnError::new_err(e.to_string())
    }
}

/// Writes a tiny random-weight chat model (GGUF) with a context of `ctx`
/// tokens to `path`, for tests; `template` replaces its chat template.
#[pyfunction]
#[pyo3(signature = (path, ctx = 256, template = None))]
fn _write_tiny_model(path: std::path::PathBuf, ctx: usize, template: Option<String>) -> PyResult<()> {
    use kiln_models::testing::{tiny_tokenizer_metadata, tiny_weights, write_gguf, TinySpec};
    let (vocab, mut md) = tiny_tokenizer_metadata();
    if let Some(t) = template {
        md.retain(|(k, _)| k != "tokenizer.chat_template");
        md.push(("tokenizer.chat_template".into(), kiln_gguf::Value::from(t.as_str())));
    }
    let spec = TinySpec { vocab, ctx, ..TinySpec::llama(kiln_gguf::GgmlType::F32) };
    write_gguf(&spec, &tiny_weights(&spec), &path, &md).map_err(|e| KilnError::new_err(e.to_string()))
}

/// Writes a tiny random-weight encoder (a Hugging Face directory with its
/// tokenizer) to `path`, for tests; `rank`: a cross-encoder (reranker).
#[pyfunction]
#[pyo3(signature = (path, rank = false))]
fn _write_tiny_encoder(path: std::path::PathBuf, rank: bool) -> PyResult<()> {
    let tiny = kiln_models::testing::encoder::TinyEncoder { rank, ..Default::default() };
    tiny.write_servable(&path).map_err(|e| KilnError::new_err(e.to_string()))
}

#[pymodule]
fn _kiln(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<model::Model>()?;
    m.add_class::<stream::Stream>()?;
    m.add_class::<stream::Event>()?;
    m.add_class::<reply::Reply>()?;
    m.add_class::<reply::ToolCall>()?;
    m.add("KilnError", m.py().get_type::<KilnError>())?;
    m.add_function(wrap_pyfunction!(_write_tiny_model, m)?)?;
    m.add_function(wrap_pyfunction!(_write_tiny_encoder, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
