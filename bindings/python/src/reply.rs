//! `kiln.Reply` and `kiln.ToolCall`: a whole chat answer and the calls in it.

use pyo3::prelude::*;
use pyo3::types::PyDict;

/// A call the model made: `name` and `arguments` (the arguments object as
/// JSON text; `json.loads(call.arguments)`), with an `id` for the `tool`
/// message that answers it.
#[pyclass(module = "kiln", frozen, get_all, eq)]
#[derive(Clone, PartialEq)]
pub(crate) struct ToolCall {
    id: String,
    name: String,
    arguments: String,
}

impl From<kiln_bind::Call> for ToolCall {
    fn from(c: kiln_bind::Call) -> Self {
        Self { id: c.id, name: c.name, arguments: c.arguments }
    }
}

impl ToolCall {
    fn to_openai<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let function = PyDict::new(py);
        function.set_item("name", &self.name)?;
        function.set_item("arguments", &self.arguments)?;
        let call = PyDict::new(py);
        call.set_item("id", &self.id)?;
        call.set_item("type", "function")?;
        call.set_item("function", function)?;
        Ok(call)
    }
}

#[pymethods]
impl ToolCall {
    fn __repr__(&self) -> String {
        format!("ToolCall(name={:?}, arguments={:?}, id={:?})", self.name, self.arguments, self.id)
    }
}

/// The assistant's answer: `content`, `reasoning` (a model that reasons;
/// else None), `tool_calls`, `finish_reason` (`stop`, `length`,
/// `cancelled` or `tool_calls`) and token counts.
#[pyclass(module = "kiln", frozen, get_all)]
pub(crate) struct Reply {
    content: String,
    reasoning: Option<String>,
    tool_calls: Vec<ToolCall>,
    finish_reason: String,
    prompt_tokens: usize,
    completion_tokens: usize,
}

impl From<kiln_bind::Reply> for Reply {
    fn from(r: kiln_bind::Reply) -> Self {
        Self {
            content: r.content,
            reasoning: r.reasoning,
            tool_calls: r.tool_calls.into_iter().map(ToolCall::from).collect(),
            finish_reason: r.finish_reason.to_string(),
            prompt_tokens: r.timings.prompt_tokens,
            completion_tokens: r.timings.decode_tokens,
        }
    }
}

#[pymethods]
impl Reply {
    /// The answer as an assistant message to append to the conversation
    /// (`{"role": "assistant", "content": ..., "tool_calls": [...]}`).
    fn to_message<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let m = PyDict::new(py);
        m.set_item("role", "assistant")?;
        m.set_item("content", &self.content)?;
        if !self.tool_calls.is_empty() {
            let calls = self.tool_calls.iter().map(|c| c.to_openai(py)).collect::<PyResult<Vec<_>>>()?;
            m.set_item("tool_calls", calls)?;
        }
        Ok(m)
    }

    fn __repr__(&self) -> String {
        let calls: Vec<String> = self.tool_calls.iter().map(ToolCall::__repr__).collect();
        format!(
            "Reply(content={:?}, reasoning={:?}, tool_calls=[{}], finish_reason={:?})",
            self.content,
            self.reasoning,
            calls.join(", "),
            self.finish_reason
        )
    }
}
