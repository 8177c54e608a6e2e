//! Options objects from JavaScript.

use kiln_bind::{EmbedOptions, GenOptions, Input, LoadOptions, Prompt};
use napi::bindgen_prelude::Either;
use napi_derive::napi;

/// How to load a model.
#[napi(object)]
#[derive(Default)]
pub struct LoadOpts {
    /// `cpu` (default), `cuda` or `cuda:N`.
    pub device: Option<String>,
    /// Kernel threads (default: all cores).
    pub threads: Option<i64>,
    /// Context length (default: the model's, capped at 4096).
    pub ctx_size: Option<i64>,
}

impl From<LoadOpts> for LoadOptions {
    fn from(o: LoadOpts) -> Self {
        Self { device: o.device, threads: o.threads, ctx_size: o.ctx_size }
    }
}

/// How to generate (`index.js` refuses unknown keys before they get here).
#[napi(object)]
#[derive(Default)]
pub struct GenOpts {
    pub max_tokens: Option<i64>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<i64>,
    pub min_p: Option<f64>,
    pub seed: Option<i64>,
    pub stop: Option<Vec<String>>,
    pub logprobs: Option<bool>,
    pub ignore_eos: Option<bool>,
    pub response_format: Option<serde_json::Value>,
    pub tools: Option<serde_json::Value>,
    pub tool_choice: Option<serde_json::Value>,
    pub parallel_tool_calls: Option<bool>,
    pub reasoning_effort: Option<String>,
    pub chat_template_kwargs: Option<serde_json::Value>,
    pub segments: Option<Vec<String>>,
}

impl From<GenOpts> for GenOptions {
    fn from(o: GenOpts) -> Self {
        Self {
            max_tokens: o.max_tokens,
            temperature: o.temperature,
            top_p: o.top_p,
            top_k: o.top_k,
            min_p: o.min_p,
            seed: o.seed,
            stop: o.stop.unwrap_or_default(),
            logprobs: o.logprobs.unwrap_or(false),
            ignore_eos: o.ignore_eos.unwrap_or(false),
            response_format: o.response_format,
            tools: o.tools,
            tool_choice: o.tool_choice,
            parallel_tool_calls: o.parallel_tool_calls,
            reasoning_effort: o.reasoning_effort,
            chat_template_kwargs: o.chat_template_kwargs,
            segments: o.segments.unwrap_or_default(),
        }
    }
}

/// How to embed.
#[napi(object)]
#[derive(Default)]
pub struct EmbedOpts {
    /// Keep the first N values of each vector (renormalized when unit length).
    pub dimensions: Option<i64>,
    /// Cut inputs longer than the model's limit (default true).
    pub truncate: Option<bool>,
}

impl From<EmbedOpts> for EmbedOptions {
    fn from(o: EmbedOpts) -> Self {
        Self { dimensions: o.dimensions, truncate: o.truncate.unwrap_or(true) }
    }
}

/// A raw prompt: text or token ids.
pub(crate) fn raw_prompt(p: Either<String, Vec<i64>>) -> napi::Result<Prompt> {
    let input = match p {
        Either::A(s) => Input::Text(s),
        Either::B(t) => Input::Tokens(t),
    };
    input.prompt().map_err(crate::to_js)
}
