//! `kiln.Model`: a loaded model and its engine.

use kiln_bind::{EmbedOptions, Events, GenOptions, LoadOptions, Prompt, Style};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};

use crate::options::{gen_options, raw_prompt, to_json};
use crate::reply::Reply;
use crate::stream::Stream;
use crate::to_py;

/// A model running in this process: a text generation model, or an
/// embedding model (`embed`, and `rerank` for a cross-encoder). Methods
/// may be called from many threads (or tasks) at once: their requests
/// share the engine's continuous batching.
#[pyclass(module = "kiln", frozen, subclass)]
pub(crate) struct Model {
    model: kiln_bind::Model,
    /// The name the model was loaded by.
    #[pyo3(get)]
    name: String,
}

/// The texts of `embed`: a `str` (one vector back) or a list of them.
fn texts(texts: &Bound<'_, PyAny>) -> PyResult<(Vec<String>, bool)> {
    if texts.is_instance_of::<PyString>() {
        return Ok((vec![texts.extract()?], true));
    }
    texts.extract().map(|t| (t, false)).map_err(|_| PyTypeError::new_err("`texts` must be a str or a list of str"))
}

fn vectors_to_py(py: Python<'_>, mut vectors: Vec<Vec<f32>>, one: bool) -> PyResult<PyObject> {
    if one {
        return Ok(vectors.pop().unwrap_or_default().into_pyobject(py)?.into_any().unbind());
    }
    Ok(PyList::new(py, vectors)?.into_any().unbind())
}

impl Model {
    /// Checks the options and submits; errors come back at once.
    fn submit(&self, py: Python<'_>, method: &str, prompt: Prompt, opts: &GenOptions) -> PyResult<Events> {
        let engine = self.model.generator(method).map_err(to_py)?;
        py.allow_threads(|| kiln_bind::submit(engine, prompt, opts, Style::Snake)).map_err(to_py)
    }

    fn chat_prompt(messages: &Bound<'_, PyAny>) -> PyResult<Prompt> {
        kiln_bind::chat_prompt(to_json(messages, "messages")?).map_err(to_py)
    }

    /// The options of a call that returns only text: tools would be lost.
    fn text_options(opts: Option<&Bound<'_, PyDict>>, method: &str) -> PyResult<GenOptions> {
        let o = gen_options(opts)?;
        if o.has_tools() {
            return Err(PyTypeError::new_err(format!(
                "`{method}` returns text only; use `chat_message` (or `chat_stream`) to offer `tools`"
            )));
        }
        Ok(o)
    }

    fn collect(&self, py: Python<'_>, method: &str, prompt: Prompt, opts: &GenOptions) -> PyResult<kiln_bind::Reply> {
        let mut events = self.submit(py, method, prompt, opts)?;
        py.allow_threads(|| events.collect()).map_err(to_py)
    }

    fn acollect<'py>(
        &self,
        py: Python<'py>,
        method: &str,
        prompt: Prompt,
        opts: &GenOptions,
        whole: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let mut events = self.submit(py, method, prompt, opts)?;
        pyo3_async_runtimes::tokio::future_into_py(py, async move {
            let reply = events.collect_async().await.map_err(to_py)?;
            Python::with_gil(|py| -> PyResult<PyObject> {
                if whole {
                    Ok(Py::new(py, Reply::from(reply))?.into_any())
                } else {
                    Ok(reply.content.into_pyobject(py)?.into_any().unbind())
                }
            })
        })
    }
}

#[pymethods]
impl Model {
    /// Loads `model` (`smollm2`, `all-minilm`, a `.gguf` file, a Hugging Face
    /// directory or `hf:org/repo`, fetched into the cache if needed) and
    /// starts its engine.
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
        let model_ = py.allow_threads(|| kiln_bind::load(model, &opts, Style::Snake)).map_err(to_py)?;
        Ok(Self { model: model_, name: model.to_string() })
    }

    /// The completion of a raw prompt (a `str` or token ids; no chat template).
    #[pyo3(signature = (prompt, **opts))]
    fn generate(
        &self,
        py: Python<'_>,
        prompt: &Bound<'_, PyAny>,
        opts: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<String> {
        Ok(self.collect(py, "generate", raw_prompt(prompt)?, &gen_options(opts)?)?.content)
    }

    /// The events of a raw prompt's completion, for `for` or `async for`.
    #[pyo3(signature = (prompt, **opts))]
    fn stream(&self, py: Python<'_>, prompt: &Bound<'_, PyAny>, opts: Option<&Bound<'_, PyDict>>) -> PyResult<Stream> {
        Ok(Stream::new(self.submit(py, "stream", raw_prompt(prompt)?, &gen_options(opts)?)?))
    }

    /// The assistant's answer to `messages` (`[{"role": ..., "content": ...}]`),
    /// rendered with the model's chat template: its content (a reasoning
    /// model's reasoning is left out; `chat_message` has it).
    #[pyo3(signature = (messages, **opts))]
    fn chat(&self, py: Python<'_>, messages: &Bound<'_, PyAny>, opts: Option<&Bound<'_, PyDict>>) -> PyResult<String> {
        let opts = Self::text_options(opts, "chat")?;
        Ok(self.collect(py, "chat", Self::chat_prompt(messages)?, &opts)?.content)
    }

    /// The assistant's answer to `messages` as a `Reply`: content,
    /// reasoning and tool calls (with `tools=[...]`).
    #[pyo3(signature = (messages, **opts))]
    fn chat_message(
        &self,
        py: Python<'_>,
        messages: &Bound<'_, PyAny>,
        opts: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Reply> {
        Ok(self.collect(py, "chat_message", Self::chat_prompt(messages)?, &gen_options(opts)?)?.into())
    }

    /// The events of the assistant's answer to `messages`.
    #[pyo3(signature = (messages, **opts))]
    fn chat_stream(
        &self,
        py: Python<'_>,
        messages: &Bound<'_, PyAny>,
        opts: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Stream> {
        Ok(Stream::new(self.submit(py, "chat_stream", Self::chat_prompt(messages)?, &gen_options(opts)?)?))
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
        self.acollect(py, "agenerate", raw_prompt(prompt)?, &gen_options(opts)?, false)
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
        let opts = Self::text_options(opts, "achat")?;
        self.acollect(py, "achat", Self::chat_prompt(messages)?, &opts, false)
    }

    /// `chat_message` as an asyncio future (`kiln.Model.achat_message` wraps it).
    #[pyo3(signature = (messages, **opts))]
    fn _achat_message<'py>(
        &self,
        py: Python<'py>,
        messages: &Bound<'py, PyAny>,
        opts: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.acollect(py, "achat_message", Self::chat_prompt(messages)?, &gen_options(opts)?, true)
    }

    /// One vector for a `str`, a list of vectors for a list of them
    /// (an embedding model).
    #[pyo3(signature = (texts, *, dimensions = None, truncate = true))]
    fn embed(
        &self,
        py: Python<'_>,
        texts: &Bound<'_, PyAny>,
        dimensions: Option<i64>,
        truncate: bool,
    ) -> PyResult<PyObject> {
        let emb = self.model.embedder("embed").map_err(to_py)?;
        let (texts, one) = self::texts(texts)?;
        let opts = EmbedOptions { dimensions, truncate };
        let vectors = py.allow_threads(|| kiln_bind::embed(emb, &texts, &opts)).map_err(to_py)?;
        vectors_to_py(py, vectors, one)
    }

    /// `embed` as an asyncio future (`kiln.Model.aembed` wraps it).
    #[pyo3(signature = (texts, *, dimensions = None, truncate = true))]
    fn _aembed<'py>(
        &self,
        py: Python<'py>,
        texts: &Bound<'py, PyAny>,
        dimensions: Option<i64>,
        truncate: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let emb = self.model.embedder("aembed").map_err(to_py)?;
        let (texts, one) = self::texts(texts)?;
        let opts = EmbedOptions { dimensions, truncate };
        let work = py.allow_threads(|| kiln_bind::embed_async(emb, &texts, &opts)).map_err(to_py)?;
        pyo3_async_runtimes::tokio::future_into_py(py, async move {
            let vectors = work.await.map_err(to_py)?;
            Python::with_gil(|py| vectors_to_py(py, vectors, one))
        })
    }

    /// `(index, score)` of each document by relevance to `query`, best first
    /// (a reranker, a cross-encoder).
    #[pyo3(signature = (query, documents, *, truncate = false))]
    fn rerank(
        &self,
        py: Python<'_>,
        query: &str,
        documents: Vec<String>,
        truncate: bool,
    ) -> PyResult<Vec<(usize, f32)>> {
        let emb = self.model.embedder("rerank").map_err(to_py)?;
        py.allow_threads(|| kiln_bind::rerank(emb, query, &documents, truncate)).map_err(to_py)
    }

    /// Token ids of `text` (with the BOS token the model adds to prompts
    /// unless `add_special` is false).
    #[pyo3(signature = (text, *, add_special = true))]
    fn tokenize(&self, py: Python<'_>, text: &str, add_special: bool) -> PyResult<Vec<u32>> {
        let engine = self.model.generator("tokenize").map_err(to_py)?;
        py.allow_threads(|| kiln_bind::tokenize(engine, text, add_special)).map_err(to_py)
    }

    /// Text of token ids.
    fn detokenize(&self, ids: Vec<i64>) -> PyResult<String> {
        kiln_bind::detokenize(self.model.generator("detokenize").map_err(to_py)?, &ids).map_err(to_py)
    }

    /// What the model does: `generate`, `embed` or `rerank`.
    #[getter]
    fn kind(&self) -> &'static str {
        self.model.kind()
    }

    /// Context length in tokens (an embedding model: its longest input).
    #[getter]
    fn ctx_size(&self) -> usize {
        self.model.max_tokens()
    }

    /// Width of an embedding model's vectors (`None` for a text generation model).
    #[getter]
    fn dimensions(&self) -> Option<usize> {
        self.model.embedder("dimensions").ok().map(|e| e.info().dim())
    }

    /// Where the model was loaded from.
    #[getter]
    fn path(&self) -> std::path::PathBuf {
        self.model.path().to_path_buf()
    }

    /// Live engine counters (for tests): `running`, `waiting`, `kv_blocks_used`.
    fn _stats(&self) -> PyResult<(usize, usize, usize)> {
        let s = self.model.generator("_stats").map_err(to_py)?.stats();
        Ok((s.running, s.waiting, s.kv_blocks_used))
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
        let engine = self.model.generator("_bench_engine").map_err(to_py)?;
        let samples = py.allow_threads(|| kiln_bind::bench_engine(engine, prompts, gen_len, seed)).map_err(to_py)?;
        Ok(samples.into_iter().map(|s| (s.ttft_ms, s.decode_tok_s, s.tokens)).collect())
    }

    fn __repr__(&self) -> String {
        format!(
            "Model({:?}, device={:?}, kind={:?}, ctx_size={})",
            self.name,
            self.model.device().to_string(),
            self.model.kind(),
            self.model.max_tokens()
        )
    }
}
