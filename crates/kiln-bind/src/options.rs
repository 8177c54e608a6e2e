//! Generation options as a caller gives them, checked into engine
//! parameters.

use kiln_engine::{Params, SamplingParams, StopParams};

use crate::error::BindError;

/// How the calling language spells option names in messages:
/// `max_tokens` (Python) or `maxTokens` (JavaScript).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// `max_tokens`.
    Snake,
    /// `maxTokens`.
    Camel,
}

impl Style {
    /// `snake` (a snake_case option name) as this style writes it.
    pub fn name(self, snake: &str) -> String {
        match self {
            Self::Snake => snake.to_string(),
            Self::Camel => {
                let mut out = String::with_capacity(snake.len());
                let mut upper = false;
                for c in snake.chars() {
                    if c == '_' {
                        upper = true;
                    } else if upper {
                        out.extend(c.to_uppercase());
                        upper = false;
                    } else {
                        out.push(c);
                    }
                }
                out
            }
        }
    }
}

/// Default number of generated tokens (the engine's).
const DEFAULT_MAX_TOKENS: usize = 256;

/// Generation options, unchecked; `None` is the engine's default
/// (256 tokens, greedy).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GenOptions {
    /// Most tokens to generate (≥ 1).
    pub max_tokens: Option<i64>,
    /// 0 (the default) is greedy.
    pub temperature: Option<f64>,
    /// Nucleus sampling, in (0, 1].
    pub top_p: Option<f64>,
    /// Keep the k most likely tokens (0: all).
    pub top_k: Option<i64>,
    /// Drop tokens below `min_p` times the most likely one, in [0, 1].
    pub min_p: Option<f64>,
    /// Seed of the random stream (≥ 0).
    pub seed: Option<i64>,
    /// Strings that end the generation (not included in the output).
    pub stop: Vec<String>,
    /// Report each token's log-probability.
    pub logprobs: bool,
    /// Keep generating past end-of-sequence tokens (benchmarks).
    pub ignore_eos: bool,
    /// `{"type": "json_object"}` or `{"type": "json_schema", "json_schema": {"schema": {...}}}`.
    pub response_format: Option<serde_json::Value>,
    /// Chat only: function tools, OpenAI's `[{"type": "function", "function": {...}}]`.
    pub tools: Option<serde_json::Value>,
    /// Chat only: `"auto"`, `"none"`, `"required"` or `{"type": "function", "function": {"name": ...}}`.
    pub tool_choice: Option<serde_json::Value>,
    /// Chat only: several calls in one answer (default true).
    pub parallel_tool_calls: Option<bool>,
    /// Chat only: `minimal`, `low`, `medium` or `high`, for templates that read it.
    pub reasoning_effort: Option<String>,
    /// Chat only: more variables for the chat template (`{"enable_thinking": false}`).
    pub chat_template_kwargs: Option<serde_json::Value>,
    /// Completion only: texts placed before the prompt, each a segment whose
    /// KV is computed once and reused wherever it appears
    /// (docs/segment-cache.md; in a chat, mark content parts with
    /// `"cache": "segment"` instead).
    pub segments: Vec<String>,
}

fn invalid(msg: String) -> BindError {
    BindError::Invalid(msg)
}

fn unit_range(style: Style, name: &str, v: Option<f64>, lo_open: bool, default: f32) -> Result<f32, BindError> {
    let Some(v) = v else { return Ok(default) };
    let ok = v.is_finite() && v <= 1.0 && if lo_open { v > 0.0 } else { v >= 0.0 };
    if !ok {
        let lo = if lo_open { "> 0" } else { "≥ 0" };
        return Err(invalid(format!("`{}` must be {lo} and ≤ 1, got {v}", style.name(name))));
    }
    Ok(v as f32)
}

fn non_negative(style: Style, name: &str, v: Option<i64>) -> Result<Option<u64>, BindError> {
    match v {
        Some(n) if n < 0 => Err(invalid(format!("`{}` must be ≥ 0, got {n}", style.name(name)))),
        Some(n) => Ok(Some(n as u64)),
        None => Ok(None),
    }
}

impl GenOptions {
    /// The engine parameters these options ask for, or an error that
    /// names the first bad option as `style` writes it.
    pub fn params(&self, style: Style) -> Result<Params, BindError> {
        let max_tokens = match self.max_tokens {
            None => DEFAULT_MAX_TOKENS,
            Some(n) if n >= 1 => usize::try_from(n).unwrap_or(usize::MAX),
            Some(n) => return Err(invalid(format!("`{}` must be ≥ 1, got {n}", style.name("max_tokens")))),
        };
        let temperature = match self.temperature {
            None => 0.0,
            Some(t) if t.is_finite() && t >= 0.0 => t as f32,
            Some(t) => return Err(invalid(format!("`temperature` must be ≥ 0 and finite, got {t}"))),
        };
        let sampling = SamplingParams {
            temperature,
            top_p: unit_range(style, "top_p", self.top_p, true, 1.0)?,
            top_k: non_negative(style, "top_k", self.top_k)?.map_or(0, |k| usize::try_from(k).unwrap_or(usize::MAX)),
            min_p: unit_range(style, "min_p", self.min_p, false, 0.0)?,
            seed: non_negative(style, "seed", self.seed)?,
            logprobs: self.logprobs,
            ..SamplingParams::default()
        };
        if let Some(s) = self.stop.iter().find(|s| s.is_empty()) {
            return Err(invalid(format!("`stop` strings must not be empty, got {s:?}")));
        }
        let stop =
            StopParams { max_tokens, stop: self.stop.clone(), ignore_eos: self.ignore_eos, ..StopParams::default() };
        Ok(Params { sampling, stop, ..Params::default() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(o: GenOptions, style: Style) -> String {
        o.params(style).err().map(|e| e.to_string()).unwrap_or_default()
    }

    #[test]
    fn defaults_are_the_engines() {
        let p = GenOptions::default().params(Style::Snake).unwrap_or_default();
        assert_eq!(p.stop.max_tokens, DEFAULT_MAX_TOKENS);
        assert_eq!(p.sampling, SamplingParams::default());
        assert!(p.constraint.is_none() && !p.chat_turn);
    }

    #[test]
    fn options_map_to_params() {
        let o = GenOptions {
            max_tokens: Some(7),
            temperature: Some(0.5),
            top_p: Some(0.9),
            top_k: Some(40),
            seed: Some(3),
            stop: vec!["\n".into()],
            logprobs: true,
            ..GenOptions::default()
        };
        let p = o.params(Style::Snake).unwrap_or_default();
        assert_eq!((p.stop.max_tokens, p.sampling.top_k, p.sampling.seed), (7, 40, Some(3)));
        assert_eq!((p.sampling.temperature, p.sampling.top_p), (0.5, 0.9));
        assert!(p.sampling.logprobs && p.stop.stop == ["\n"]);
    }

    #[test]
    fn bad_options_are_named_in_the_callers_style() {
        let o = |f: fn(&mut GenOptions)| {
            let mut o = GenOptions::default();
            f(&mut o);
            o
        };
        assert_eq!(err(o(|o| o.max_tokens = Some(-1)), Style::Snake), "`max_tokens` must be ≥ 1, got -1");
        assert_eq!(err(o(|o| o.max_tokens = Some(0)), Style::Camel), "`maxTokens` must be ≥ 1, got 0");
        assert!(err(o(|o| o.top_p = Some(0.0)), Style::Camel).starts_with("`topP` must be > 0"));
        assert!(err(o(|o| o.min_p = Some(2.0)), Style::Snake).starts_with("`min_p` must be ≥ 0"));
        assert!(err(o(|o| o.top_k = Some(-2)), Style::Camel).starts_with("`topK` must be ≥ 0"));
        assert!(err(o(|o| o.seed = Some(-2)), Style::Snake).starts_with("`seed` must be ≥ 0"));
        assert!(err(o(|o| o.temperature = Some(f64::NAN)), Style::Snake).starts_with("`temperature`"));
        assert!(err(o(|o| o.stop = vec![String::new()]), Style::Snake).starts_with("`stop`"));
    }
}
