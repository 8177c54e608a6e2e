//! Parse, don't validate: request bodies become a [`ValidRequest`] or a 400
//! that names the field and says what is allowed. Shared by the OpenAI and
//! Ollama routes.

use std::collections::BTreeMap;

use kiln_core::{SamplingParams, StopParams, MAX_REPEAT_LAST_N};
use kiln_engine::Prompt;
use serde::de::DeserializeOwned;

use crate::error::ApiError;
use crate::pool::KeepAlive;

/// Upper bounds on what a request may ask for.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Request body size in bytes.
    pub max_body_bytes: usize,
    /// `max_tokens` (and `num_predict`).
    pub max_tokens: usize,
    /// Total prompt text in bytes (token count is also bounded by the context).
    pub max_prompt_bytes: usize,
    /// Number of stop strings.
    pub max_stop: usize,
    /// Bytes per stop string.
    pub max_stop_bytes: usize,
    /// Number of messages.
    pub max_messages: usize,
    /// Entries of `logit_bias`.
    pub max_logit_bias: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_body_bytes: 4 << 20,
            max_tokens: 32_768,
            max_prompt_bytes: 2 << 20,
            max_stop: 16,
            max_stop_bytes: 256,
            max_messages: 4096,
            max_logit_bias: 1024,
        }
    }
}

/// A request every route agrees on: what to run, how to sample, when to stop.
#[derive(Debug, Clone)]
pub struct ValidRequest {
    /// Model name as asked for.
    pub model: String,
    /// The input.
    pub prompt: Prompt,
    /// Sampling.
    pub sampling: SamplingParams,
    /// Stop conditions; `max_tokens` already bounded.
    pub stop: StopParams,
    /// Stream the answer.
    pub stream: bool,
    /// Send usage in the last streamed chunk (OpenAI).
    pub include_usage: bool,
    /// Keep-alive override.
    pub keep_alive: Option<KeepAlive>,
    /// A turn of a chat whose next request repeats it (`/v1/chat/completions`,
    /// `/api/chat`): the engine prefills the next turn's opening after the
    /// answer (docs/batching.md). Not `/api/generate`, whose next prompt
    /// stands alone even though the template wraps it.
    pub chat_turn: bool,
}

/// Decodes a JSON body; errors name the field (`messages[0].role: ...`).
pub fn parse_json<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let de = &mut serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if inner.is_syntax() || inner.is_eof() {
            ApiError::bad(format!("the body is not valid JSON: {inner}"))
        } else if path == "." {
            ApiError::bad(format!("invalid request: {inner}"))
        } else {
            ApiError::bad_param(&path, format!("`{path}`: {inner}"))
        }
    })
}

/// The sampling and stop knobs common to every route, before checking.
#[derive(Debug, Clone, Default)]
pub struct Knobs {
    /// Temperature.
    pub temperature: Option<f32>,
    /// Top-p.
    pub top_p: Option<f32>,
    /// Top-k (0 disables).
    pub top_k: Option<i64>,
    /// Min-p.
    pub min_p: Option<f32>,
    /// Repetition penalty.
    pub repetition_penalty: Option<f32>,
    /// Penalty window.
    pub repeat_last_n: Option<i64>,
    /// Presence penalty.
    pub presence_penalty: Option<f32>,
    /// Frequency penalty.
    pub frequency_penalty: Option<f32>,
    /// Seed (negative: random).
    pub seed: Option<i64>,
    /// Report logprobs.
    pub logprobs: bool,
    /// Alternatives.
    pub top_logprobs: Option<i64>,
    /// Token id → bias.
    pub logit_bias: Option<BTreeMap<String, f32>>,
    /// Stop strings.
    pub stop: Vec<String>,
    /// Max tokens, and the field name it came from.
    pub max_tokens: Option<(i64, &'static str)>,
    /// Number of choices.
    pub n: Option<i64>,
    /// Keep generating past end-of-sequence (benchmarks).
    pub ignore_eos: bool,
}

/// Defaults a route applies for knobs the client left out.
#[derive(Debug, Clone, Copy)]
pub struct Defaults {
    /// Temperature.
    pub temperature: f32,
    /// Top-k.
    pub top_k: usize,
    /// Top-p.
    pub top_p: f32,
    /// Repetition penalty.
    pub repetition_penalty: f32,
    /// Max tokens when absent.
    pub max_tokens: usize,
}

fn non_negative(field: &str, v: i64, max: usize) -> Result<usize, ApiError> {
    if v < 0 {
        return Err(ApiError::bad_param(field, format!("`{field}` must be ≥ 0, got {v}")));
    }
    let v = v as u64;
    if v > max as u64 {
        return Err(ApiError::bad_param(field, format!("`{field}` must be ≤ {max}, got {v}")));
    }
    Ok(v as usize)
}

impl Knobs {
    /// Checks every knob against `limits`; the sampler's own checks run too.
    pub fn into_params(self, d: Defaults, limits: &Limits) -> Result<(SamplingParams, StopParams), ApiError> {
        if let Some(n) = self.n {
            if n != 1 {
                return Err(ApiError::bad_param(
                    "n",
                    format!("`n` must be 1 (several choices are not supported yet), got {n}"),
                ));
            }
        }
        let max_tokens = match self.max_tokens {
            Some((v, field)) if v <= 0 => {
                return Err(ApiError::bad_param(field, format!("`{field}` must be ≥ 1, got {v}")));
            }
            Some((v, field)) => non_negative(field, v, limits.max_tokens)?,
            None => d.max_tokens,
        };
        if self.stop.len() > limits.max_stop {
            return Err(ApiError::bad_param(
                "stop",
                format!("at most {} stop strings, got {}", limits.max_stop, self.stop.len()),
            ));
        }
        if let Some(s) = self.stop.iter().find(|s| s.is_empty() || s.len() > limits.max_stop_bytes) {
            return Err(ApiError::bad_param(
                "stop",
                format!("each stop string must have 1 to {} bytes, got {}", limits.max_stop_bytes, s.len()),
            ));
        }
        let sampling = SamplingParams {
            temperature: self.temperature.unwrap_or(d.temperature),
            top_k: self.top_k.map(|k| non_negative("top_k", k, usize::MAX)).transpose()?.unwrap_or(d.top_k),
            top_p: self.top_p.unwrap_or(d.top_p),
            min_p: self.min_p.unwrap_or(0.0),
            repetition_penalty: self.repetition_penalty.unwrap_or(d.repetition_penalty),
            repeat_last_n: self
                .repeat_last_n
                .map(
                    |n| if n < 0 { Ok(MAX_REPEAT_LAST_N) } else { non_negative("repeat_last_n", n, MAX_REPEAT_LAST_N) },
                )
                .transpose()?
                .unwrap_or(64),
            presence_penalty: self.presence_penalty.unwrap_or(0.0),
            frequency_penalty: self.frequency_penalty.unwrap_or(0.0),
            logit_bias: logit_bias(self.logit_bias, limits)?,
            seed: self.seed.and_then(|s| u64::try_from(s).ok()),
            logprobs: self.logprobs || self.top_logprobs.is_some_and(|n| n > 0),
            top_logprobs: self
                .top_logprobs
                .map(|n| non_negative("top_logprobs", n, kiln_core::MAX_TOP_LOGPROBS))
                .transpose()?
                .unwrap_or(0),
        };
        kiln_core::sample::Sampler::new(&sampling)?;
        let stop = StopParams { max_tokens, stop: self.stop, ignore_eos: self.ignore_eos, ..Default::default() };
        Ok((sampling, stop))
    }
}

fn logit_bias(map: Option<BTreeMap<String, f32>>, limits: &Limits) -> Result<Vec<(u32, f32)>, ApiError> {
    let Some(map) = map else { return Ok(Vec::new()) };
    if map.len() > limits.max_logit_bias {
        return Err(ApiError::bad_param("logit_bias", format!("at most {} entries", limits.max_logit_bias)));
    }
    map.into_iter()
        .map(|(k, v)| {
            let id: u32 = k.trim().parse().map_err(|_| {
                ApiError::bad_param("logit_bias", format!("`logit_bias` keys must be token ids, got {k:?}"))
            })?;
            if !(-100.0..=100.0).contains(&v) {
                return Err(ApiError::bad_param(
                    "logit_bias",
                    format!("`logit_bias` values must be in [-100, 100], got {v}"),
                ));
            }
            Ok((id, v))
        })
        .collect()
}

/// Checks that every `logit_bias` token exists in a vocabulary of `vocab` tokens.
pub fn check_vocab(sampling: &SamplingParams, vocab: usize) -> Result<(), ApiError> {
    match sampling.logit_bias.iter().find(|(id, _)| *id as usize >= vocab) {
        Some((id, _)) => {
            Err(ApiError::bad_param("logit_bias", format!("token id {id} is outside the vocabulary ({vocab} tokens)")))
        }
        None => Ok(()),
    }
}

/// Parses an optional `keep_alive`.
pub fn keep_alive(v: Option<&serde_json::Value>) -> Result<Option<KeepAlive>, ApiError> {
    v.filter(|v| !v.is_null())
        .map(|v| KeepAlive::parse(v).map_err(|m| ApiError::bad_param("keep_alive", m)))
        .transpose()
}

/// Maps a chat role to the template's, or says which roles exist.
pub fn role(role: &str, index: usize) -> Result<String, ApiError> {
    match role {
        "system" | "user" | "assistant" | "tool" => Ok(role.to_string()),
        "developer" => Ok("system".to_string()),
        other => Err(ApiError::bad_param(
            &format!("messages[{index}].role"),
            format!("messages[{index}].role must be system, developer, user, assistant or tool, got {other:?}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: Defaults = Defaults { temperature: 1.0, top_k: 0, top_p: 1.0, repetition_penalty: 1.0, max_tokens: 100 };

    fn check(k: Knobs) -> Result<(SamplingParams, StopParams), String> {
        k.into_params(D, &Limits::default()).map_err(|e| e.to_string())
    }

    #[test]
    fn bad_knobs_name_the_field() {
        let e = check(Knobs { max_tokens: Some((-5, "max_tokens")), ..Default::default() }).unwrap_err();
        assert!(e.contains("max_tokens") && e.contains("-5"), "{e}");
        let e = check(Knobs { temperature: Some(-1.0), ..Default::default() }).unwrap_err();
        assert!(e.contains("temperature"), "{e}");
        let e = check(Knobs { top_p: Some(1.5), ..Default::default() }).unwrap_err();
        assert!(e.contains("top_p"), "{e}");
        let e = check(Knobs { n: Some(2), ..Default::default() }).unwrap_err();
        assert!(e.contains("`n`"), "{e}");
        let e = check(Knobs { top_logprobs: Some(50), ..Default::default() }).unwrap_err();
        assert!(e.contains("top_logprobs"), "{e}");
        let e = check(Knobs { stop: vec![String::new()], ..Default::default() }).unwrap_err();
        assert!(e.contains("stop"), "{e}");
        let e = check(Knobs { max_tokens: Some((1 << 40, "max_tokens")), ..Default::default() }).unwrap_err();
        assert!(e.contains("≤"), "{e}");
        let bias = BTreeMap::from([("abc".to_string(), 1.0)]);
        assert!(check(Knobs { logit_bias: Some(bias), ..Default::default() }).is_err());
    }

    #[test]
    fn good_knobs_map_through() {
        let (s, st) = check(Knobs {
            temperature: Some(0.5),
            seed: Some(7),
            top_logprobs: Some(3),
            stop: vec!["\n".into()],
            logit_bias: Some(BTreeMap::from([("5".to_string(), -100.0)])),
            ..Default::default()
        })
        .unwrap();
        assert_eq!((s.temperature, s.seed, s.top_logprobs, s.logprobs), (0.5, Some(7), 3, true));
        assert_eq!(s.logit_bias, vec![(5, -100.0)]);
        assert_eq!((st.max_tokens, st.stop.len()), (100, 1));
        assert!(check_vocab(&s, 4).is_err());
    }

    #[test]
    fn json_errors_name_the_path() {
        #[derive(serde::Deserialize, Debug)]
        #[allow(dead_code)]
        struct T {
            a: Vec<u32>,
        }
        let e = parse_json::<T>(br#"{"a": [1, "x"]}"#).unwrap_err().to_string();
        assert!(e.contains("a[1]"), "{e}");
        let e = parse_json::<T>(b"{not json").unwrap_err().to_string();
        assert!(e.contains("not valid JSON"), "{e}");
    }
}
