//! A request's events as a Python iterator and async iterator.

use std::sync::Arc;

use kiln_bind::Events;
use pyo3::exceptions::{PyStopAsyncIteration, PyStopIteration};
use pyo3::prelude::*;
use tokio::sync::Mutex;

use crate::reply::ToolCall;
use crate::to_py;

/// One event of a stream: a token (`eos` false), then a last event (`eos`
/// true, `id` None) with any text held back until the end and the
/// `finish_reason` (`stop`, `length`, `cancelled` or `tool_calls`). A chat
/// answer's `text` is its content; `reasoning` and `tool_calls` carry the
/// reasoning text and the calls this event makes visible.
#[pyclass(module = "kiln", frozen, get_all)]
pub struct Event {
    id: Option<u32>,
    text: String,
    logprob: Option<f32>,
    eos: bool,
    finish_reason: Option<String>,
    reasoning: String,
    tool_calls: Vec<ToolCall>,
}

impl From<kiln_bind::Event> for Event {
    fn from(e: kiln_bind::Event) -> Self {
        Self {
            id: e.id,
            text: e.text,
            logprob: e.logprob,
            eos: e.eos,
            finish_reason: e.finish_reason.map(str::to_string),
            reasoning: e.reasoning,
            tool_calls: e.tool_calls.into_iter().map(ToolCall::from).collect(),
        }
    }
}

#[pymethods]
impl Event {
    fn __repr__(&self) -> String {
        match &self.finish_reason {
            Some(r) => format!("Event(eos=True, text={:?}, finish_reason={r:?})", self.text),
            None => {
                let logprob = self.logprob.map_or("None".to_string(), |l| l.to_string());
                format!("Event(id={}, text={:?}, logprob={logprob})", self.id.unwrap_or(0), self.text)
            }
        }
    }
}

/// An awaitable whose result is already known.
#[pyclass(module = "kiln")]
pub(crate) struct Ready {
    result: Option<PyResult<PyObject>>,
}

#[pymethods]
impl Ready {
    fn __await__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&mut self) -> PyResult<()> {
        match self.result.take() {
            Some(Ok(v)) => Err(PyStopIteration::new_err((v,))),
            Some(Err(e)) => Err(e),
            None => Err(PyStopIteration::new_err(())),
        }
    }
}

/// The events of one request, for `for` and `async for`. Leaving the loop
/// early (or dropping the stream, or `cancel()`) cancels the request and
/// frees its KV cache.
#[pyclass(module = "kiln", frozen)]
pub(crate) struct Stream {
    state: Arc<Mutex<Events>>,
    cancel: kiln_engine::CancelHandle,
    /// Prompt length in tokens.
    #[pyo3(get)]
    prompt_tokens: usize,
}

impl Stream {
    pub(crate) fn new(events: Events) -> Self {
        let (cancel, prompt_tokens) = (events.cancel_handle(), events.prompt_tokens());
        Self { state: Arc::new(Mutex::new(events)), cancel, prompt_tokens }
    }
}

#[pymethods]
impl Stream {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Event>> {
        // An event already queued is taken without releasing the GIL.
        if let Ok(mut s) = self.state.try_lock() {
            if let Some(next) = s.ready() {
                return Ok(next.map_err(to_py)?.map(Event::from));
            }
        }
        let next = py.allow_threads(|| self.state.blocking_lock().next_blocking());
        Ok(next.map_err(to_py)?.map(Event::from))
    }

    fn __aiter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __anext__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        // An event already queued needs no trip through the event loop.
        if let Ok(mut s) = self.state.try_lock() {
            if let Some(next) = s.ready() {
                let result = match next {
                    Ok(Some(ev)) => Ok(Py::new(py, Event::from(ev))?.into_any()),
                    Ok(None) => Err(PyStopAsyncIteration::new_err(())),
                    Err(e) => Err(to_py(e)),
                };
                return Ok(Bound::new(py, Ready { result: Some(result) })?.into_any());
            }
        }
        let event_loop = crate::wake::running_loop(py)?;
        let future = event_loop.call_method0("create_future")?;
        let pending = (event_loop.unbind(), future.clone().unbind());
        let state = Arc::clone(&self.state);
        pyo3_async_runtimes::tokio::get_runtime().spawn(async move {
            let result = state.lock().await.next_async().await;
            let (event_loop, future) = pending;
            crate::wake::deliver(crate::wake::Pending { event_loop, future, result }).await;
        });
        Ok(future)
    }

    /// Stops the request; the stream then ends with `finish_reason` "cancelled".
    fn cancel(&self) {
        self.cancel.cancel();
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}
