//! Keyword arguments and prompts from Python values.

use kiln_bind::{GenOptions, Input, Prompt};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// A Python object (dict, list) as JSON, through the `json` module.
pub(crate) fn to_json(v: &Bound<'_, PyAny>, what: &str) -> PyResult<serde_json::Value> {
    let text: String = v.py().import("json")?.call_method1("dumps", (v,))?.extract()?;
    serde_json::from_str(&text).map_err(|e| PyTypeError::new_err(format!("`{what}` is not JSON: {e}")))
}

/// The generation options among `kwargs`; an unknown name is a `TypeError`.
pub(crate) fn gen_options(kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<GenOptions> {
    let mut o = GenOptions::default();
    let Some(kwargs) = kwargs else { return Ok(o) };
    for (k, v) in kwargs.iter() {
        let key: String = k.extract()?;
        if v.is_none() {
            continue;
        }
        match key.as_str() {
            "max_tokens" => o.max_tokens = Some(v.extract()?),
            "temperature" => o.temperature = Some(v.extract()?),
            "top_p" => o.top_p = Some(v.extract()?),
            "top_k" => o.top_k = Some(v.extract()?),
            "min_p" => o.min_p = Some(v.extract()?),
            "seed" => o.seed = Some(v.extract()?),
            "stop" => {
                o.stop = match v.extract::<String>() {
                    Ok(s) => vec![s],
                    Err(_) => v.extract()?,
                }
            }
            "logprobs" => o.logprobs = v.extract()?,
            "ignore_eos" => o.ignore_eos = v.extract()?,
            "response_format" => o.response_format = Some(to_json(&v, "response_format")?),
            "tools" => o.tools = Some(to_json(&v, "tools")?),
            "tool_choice" => o.tool_choice = Some(to_json(&v, "tool_choice")?),
            "parallel_tool_calls" => o.parallel_tool_calls = Some(v.extract()?),
            "reasoning_effort" => o.reasoning_effort = Some(v.extract()?),
            "chat_template_kwargs" => o.chat_template_kwargs = Some(to_json(&v, "chat_template_kwargs")?),
            "segments" => o.segments = v.extract()?,
            _ => return Err(PyTypeError::new_err(format!("unexpected keyword argument '{key}'"))),
        }
    }
    Ok(o)
}

/// A raw prompt: a `str`, or a list of token ids.
pub(crate) fn raw_prompt(prompt: &Bound<'_, PyAny>) -> PyResult<Prompt> {
    let input = match prompt.extract::<String>() {
        Ok(s) => Input::Text(s),
        Err(_) => Input::Tokens(
            prompt.extract().map_err(|_| PyTypeError::new_err("`prompt` must be a str or a list of token ids"))?,
        ),
    };
    input.prompt().map_err(crate::to_py)
}
