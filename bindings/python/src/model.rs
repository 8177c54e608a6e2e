//! `kiln.Model`: a loaded model and its engine.

use kiln_bind::{EngineHandle, LoadOptions, Prompt, Request, Style};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::options::{gen_options, raw_prompt, to_json};
use crate::stream::Stream;
use crate::to_py;

/// A model running in this process. Methods may be called from many
/// threads (or tasks) at once: their requests share the engine's
/// continuous batching.
#[pyclass(module = "kiln", frozen, subclass)]
pub(crate) struct Model {
    engine: EngineHandle,
    /// The name the model was loaded by.
    #[pyo3(get)]
    name: String,
}

impl Model {
    /// Checks the options and submits; errors come back at once.
    fn submit(
        &self,
        py: Python<'_>,
        prompt: Prompt,
        opts: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<kiln_bind::RequestStream> {
        let mut params = gen_options(opts)?.params(Style::Snake).map_err(to_py)?;
        params.chat_turn = matches!(prompt, Prompt::Chat(_));
        let engine = &self.engine;
        py.allow_threads(|| engine.submit(Request { prompt, params })).map_err(|e| to_py(e.into()))
    }

    fn chat_prompt(messages: &Bound<'_, PyAny>) -> PyResult<Prompt> {
        kiln_bind::chat_prompt(to_json(messages, "messages")?, None).map_err(to_py)
    }

    fn collect(&self, py: Python<'_>, prompt: Prompt, opts: Option<&Bound<'_, PyDict>>) -> PyResult<String> {
        let stream = self.submit(py, prompt, opts)?;
        py.allow_threads(|| kiln_bind::collect(stream)).map(|c| c.text).map_err(to_py)
    }

    fn acollect<'py>(
        &self,
        py: Python<'py>,
        prompt: Prompt,
        opts: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let mut stream = self.submit(py, prompt, opts)?;
        pyo3_async_runtimes::tokio::future_into_py(py, async move {
            kiln_bind::collect_async(&mut stream).await.map(|c| c.text).map_err(to_py)
        })
    }
}

#[pymethods]
impl Model {
    /// Loads `model` (`smollm2`, a `.gguf` file, a Hugging Face directory or
    /// `hf:org/repo`, fetched into the cache if needed) and starts its engine.
    #[new]
    #[pyo3(signature = (model = "smollm2", *, device = None, threads = None, ctx_size = None))]
    fn new(
        py: Python<'_>,
        model: &str,
        device: Option<String>,
        threads: Option<i64>,
        ctx_size: Option<i64>,
    ) -> PyResult<Self> {
        let opts = LoadOptions { device, threads, ctx_size };
        let engine = py.allow_threads(|| kiln_bind::load(model, &opts, Style::Snake)).map_err(to_py)?;
        Ok(Self { engine, name: model.to_string() })
    }

    /// The completion of a raw prompt (a `str` or token ids; no chat template).
    #[pyo3(signature = (prompt, **opts))]
    fn generate(
        &self,
        py: Python<'_>,
        prompt: &Bound<'_, PyAny>,
        opts: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<String> {
        self.collect(py, raw_prompt(prompt)?, opts)
    }

    /// The events of a raw prompt's completion, for `for` or `async for`.
    #[pyo3(signature = (prompt, **opts))]
    fn stream(&self, py: Python<'_>, prompt: &Bound<'_, PyAny>, opts: Option<&Bound<'_, PyDict>>) -> PyResult<Stream> {
        Ok(Stream::new(self.submit(py, raw_prompt(prompt)?, opts)?))
    }

    /// The assistant's answer to `messages` (`[{"role": ..., "content": ...}]`),
    /// rendered with the model's chat template.
    #[pyo3(signature = (messages, **opts))]
    fn chat(&self, py: Python<'_>, messages: &Bound<'_, PyAny>, opts: Option<&Bound<'_, PyDict>>) -> PyResult<String> {
        self.collect(py, Self::chat_prompt(messages)?, opts)
    }

    /// The events of the assistant's answer to `messages`.
    #[pyo3(signature = (messages, **opts))]
    fn chat_stream(
        &self,
        py: Python<'_>,
        messages: &Bound<'_, PyAny>,
        opts: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Stream> {
        Ok(Stream::new(self.submit(py, Self::chat_prompt(messages)?, opts)?))
    }

    /// `generate` as an asyncio future (`kiln.Model.agenerate` wraps it in a
    /// coroutine); cancelling it cancels the request.
    #[pyo3(signature = (prompt, **opts))]
    fn _agenerate<'py>(
        &self,
        py: Python<'py>,
        prompt: &Bound<'py, PyAny>,
        opts: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.acollect(py, raw_prompt(prompt)?, opts)
    }

    /// `stream` for `async for` (the same stream object).
    #[pyo3(signature = (prompt, **opts))]
    fn astream(&self, py: Python<'_>, prompt: &Bound<'_, PyAny>, opts: Option<&Bound<'_, PyDict>>) -> PyResult<Stream> {
        self.stream(py, prompt, opts)
    }

    /// `chat` as an asyncio future (`kiln.Model.achat` wraps it).
    #[pyo3(signature = (messages, **opts))]
    fn _achat<'py>(
        &self,
        py: Python<'py>,
        messages: &Bound<'py, PyAny>,
        opts: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.acollect(py, Self::chat_prompt(messages)?, opts)
    }

    /// Token ids of `text` (with the BOS token the model adds to prompts
    /// unless `add_special` is false).
    #[pyo3(signature = (text, *, add_special = true))]
    fn tokenize(&self, py: Python<'_>, text: &str, add_special: bool) -> PyResult<Vec<u32>> {
        py.allow_threads(|| kiln_bind::tokenize(&self.engine, text, add_special)).map_err(to_py)
    }

    /// Text of token ids.
    fn detokenize(&self, ids: Vec<i64>) -> PyResult<String> {
        kiln_bind::detokenize(&self.engine, &ids).map_err(to_py)
    }

    /// Context length in tokens.
    #[getter]
    fn ctx_size(&self) -> usize {
        self.engine.info().max_ctx
    }

    /// Where the model was loaded from.
    #[getter]
    fn path(&self) -> std::path::PathBuf {
        self.engine.info().path.clone()
    }

    /// Live engine counters (for tests): `running`, `waiting`, `kv_blocks_used`.
    fn _stats(&self) -> (usize, usize, usize) {
        let s = self.engine.stats();
        (s.running, s.waiting, s.kv_blocks_used)
    }

    /// The engine measured as `kiln bench --streams N` measures it (for
    /// bench.py): one generation of `gen_len` tokens per prompt, at once,
    /// each read by a Rust thread; `[(ttft_ms, decode_tok_s, tokens)]`.
    fn _bench_engine(
        &self,
        py: Python<'_>,
        prompts: Vec<Vec<u32>>,
        gen_len: usize,
        seed: u64,
    ) -> PyResult<Vec<(f64, f64, usize)>> {
        let samples =
            py.allow_threads(|| kiln_bind::bench_engine(&self.engine, prompts, gen_len, seed)).map_err(to_py)?;
        Ok(samples.into_iter().map(|s| (s.ttft_ms, s.decode_tok_s, s.tokens)).collect())
    }

    fn __repr__(&self) -> String {
        format!(
            "Model({:?}, device={:?}, ctx_size={})",
            self.name,
            self.engine.info().device.to_string(),
            self.ctx_size()
        )
    }
}
