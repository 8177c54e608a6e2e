//! Parse, don't validate: request bodies become a [`ValidRequest`] or a 400
//! that names the field and says what is allowed. Every generation route
//! (OpenAI and Ollama) reads its body into an [`Unchecked`] request and ends in
//! [`valid_request`], which checks the knobs ([`crate::knobs`]) the same way
//! for all of them.

use std::collections::BTreeMap;

use kiln_core::{SamplingParams, StopParams, MAX_REPEAT_LAST_N};
use kiln_engine::{Params, Prompt};
use serde::de::DeserializeOwned;

use crate::answer::Shape;
use crate::error::ApiError;
use crate::knobs::{Dialect, Knobs, RawKnobs, StringOrList};
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
    /// llama-server's `lora` field, when sent (resolved against the
    /// server's adapters when the request starts).
    pub lora: Option<Vec<crate::lora::LoraPick>>,
    /// The input.
    pub prompt: Prompt,
    /// What the engine takes: sampling, stop conditions (`max_tokens`
    /// already bounded) and whether this is a chat turn whose next request
    /// repeats it (`/v1/chat/completions`, `/api/chat`: the engine prefills
    /// the next turn's opening after the answer, docs/batching.md; not
    /// `/api/generate`, whose next prompt stands alone even though the
    /// template wraps it).
    pub params: Params,
    /// Stream the answer.
    pub stream: bool,
    /// Send usage in the last streamed chunk (OpenAI).
    pub include_usage: bool,
    /// Keep-alive override.
    pub keep_alive: Option<KeepAlive>,
    /// Tools, a required format, reasoning.
    pub shape: Shape,
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

/// What a route read from its body before checking: the prompt in the
/// engine's terms, the knobs as sent, and the switches every route has.
#[derive(Debug, Clone)]
pub struct Unchecked {
    /// Model name as asked for.
    pub model: String,
    /// The input.
    pub prompt: Prompt,
    /// The knobs, in the route's dialect.
    pub knobs: RawKnobs,
    /// llama-server's `lora` field, when sent.
    pub lora: Option<Vec<crate::lora::LoraPick>>,
    /// `stream`, when sent.
    pub stream: Option<bool>,
    /// Send usage in the last streamed chunk (OpenAI).
    pub include_usage: bool,
    /// `keep_alive`, when sent.
    pub keep_alive: Option<serde_json::Value>,
    /// See [`kiln_engine::Params::chat_turn`].
    pub chat_turn: bool,
    /// Tools, a required format, reasoning.
    pub shape: Shape,
}

/// The one check every generation route ends in: reads the knobs in
/// `dialect`, fills those left out with the dialect's defaults, checks every
/// value (the sampler's own checks too), and names a bad one as the client
/// wrote it.
pub fn valid_request(dialect: Dialect, body: Unchecked, limits: &Limits) -> Result<ValidRequest, ApiError> {
    let knobs = body.knobs.read(dialect)?;
    let speculative = knobs.speculative;
    let num_keep = match knobs.num_keep {
        None => None,
        Some(n) => Some(usize::try_from(n).map_err(|_| {
            respell(ApiError::bad_param("num_keep", format!("`num_keep` must be ≥ 0 (got {n})")), dialect)
        })?),
    };
    let (sampling, stop) = params(knobs, dialect, limits).map_err(|e| respell(e, dialect))?;
    Ok(ValidRequest {
        model: body.model,
        lora: body.lora,
        prompt: body.prompt,
        params: Params { sampling, stop, chat_turn: body.chat_turn, speculative, num_keep, ..Params::default() },
        stream: body.stream.unwrap_or(dialect.streams_by_default()),
        include_usage: body.include_usage,
        keep_alive: keep_alive(body.keep_alive.as_ref())?,
        shape: body.shape,
    })
}

/// An error naming a knob by its canonical name, renamed to `dialect`'s.
fn respell(e: ApiError, dialect: Dialect) -> ApiError {
    let ApiError::BadRequest { message, param: Some(knob) } = e else { return e };
    let field = dialect.name(&knob);
    ApiError::BadRequest {
        message: message.replacen(&format!("`{knob}`"), &format!("`{field}`"), 1),
        param: Some(field),
    }
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

/// Checks every knob against `limits`; errors name knobs canonically.
fn params(k: Knobs, dialect: Dialect, limits: &Limits) -> Result<(SamplingParams, StopParams), ApiError> {
    one_choice(&k)?;
    let max_tokens = max_tokens(&k, dialect, limits)?;
    let stop = stop_strings(k.stop.map(StringOrList::into_vec).unwrap_or_default(), limits)?;
    let d = dialect.sampling_defaults();
    let top_logprobs = k.top_logprobs.map(|n| non_negative("top_logprobs", n, kiln_core::MAX_TOP_LOGPROBS));
    // Completions' `logprobs` is a count of alternatives; sending it turns log-probabilities on.
    let asked =
        if dialect == Dialect::Completions { k.top_logprobs.is_some() } else { k.logprobs.unwrap_or(d.logprobs) };
    let sampling = SamplingParams {
        temperature: k.temperature.unwrap_or(d.temperature),
        top_k: k.top_k.map(|n| non_negative("top_k", n, usize::MAX)).transpose()?.unwrap_or(d.top_k),
        top_p: k.top_p.unwrap_or(d.top_p),
        min_p: k.min_p.unwrap_or(d.min_p),
        repetition_penalty: k.repetition_penalty.unwrap_or(d.repetition_penalty),
        repeat_last_n: k
            .repeat_last_n
            .map(|n| if n < 0 { Ok(MAX_REPEAT_LAST_N) } else { non_negative("repeat_last_n", n, MAX_REPEAT_LAST_N) })
            .transpose()?
            .unwrap_or(d.repeat_last_n),
        presence_penalty: k.presence_penalty.unwrap_or(d.presence_penalty),
        frequency_penalty: k.frequency_penalty.unwrap_or(d.frequency_penalty),
        logit_bias: logit_bias(k.logit_bias, limits)?,
        seed: k.seed.map_or(d.seed, |s| u64::try_from(s).ok()),
        logprobs: asked || k.top_logprobs.is_some_and(|n| n > 0),
        top_logprobs: top_logprobs.transpose()?.unwrap_or(d.top_logprobs),
    };
    kiln_core::sample::Sampler::new(&sampling)?;
    let stop = StopParams { max_tokens, stop, ignore_eos: k.ignore_eos.unwrap_or(false), ..Default::default() };
    Ok((sampling, stop))
}

/// Several choices, `best_of` and `echo` are refused.
fn one_choice(k: &Knobs) -> Result<(), ApiError> {
    if let Some(n) = k.n.filter(|&n| n != 1) {
        return Err(ApiError::bad_param(
            "n",
            format!("`n` must be 1 (several choices are not supported yet), got {n}"),
        ));
    }
    if k.best_of.is_some_and(|b| b != 1) {
        return Err(ApiError::bad_param("best_of", "`best_of` must be 1"));
    }
    if k.echo == Some(true) {
        return Err(ApiError::bad_param("echo", "`echo` is not supported"));
    }
    Ok(())
}

/// `max_completion_tokens` (which wins) or `max_tokens`, bounded by the limit.
fn max_tokens(k: &Knobs, dialect: Dialect, limits: &Limits) -> Result<usize, ApiError> {
    let sent =
        k.max_completion_tokens.map(|v| (v, "max_completion_tokens")).or(k.max_tokens.map(|v| (v, "max_tokens")));
    match sent {
        None => Ok(dialect.max_tokens_default(limits)),
        // Ollama's -1 (forever) and -2 (fill the context) both run to the
        // context's end; its 0 generates one token.
        Some((v, _)) if dialect == Dialect::Ollama && v < 0 => Ok(dialect.max_tokens_default(limits)),
        Some((v, field)) if dialect == Dialect::Ollama => non_negative(field, v.max(1), limits.max_tokens),
        Some((v, field)) if v <= 0 => Err(ApiError::bad_param(field, format!("`{field}` must be ≥ 1, got {v}"))),
        Some((v, field)) => non_negative(field, v, limits.max_tokens),
    }
}

fn stop_strings(stop: Vec<String>, limits: &Limits) -> Result<Vec<String>, ApiError> {
    if stop.len() > limits.max_stop {
        return Err(ApiError::bad_param(
            "stop",
            format!("at most {} stop strings, got {}", limits.max_stop, stop.len()),
        ));
    }
    if let Some(s) = stop.iter().find(|s| s.is_empty() || s.len() > limits.max_stop_bytes) {
        return Err(ApiError::bad_param(
            "stop",
            format!("each stop string must have 1 to {} bytes, got {}", limits.max_stop_bytes, s.len()),
        ));
    }
    Ok(stop)
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
    use serde_json::{json, Value};

    /// A body of `dialect` with `knobs` (a JSON object, in the dialect's spelling).
    fn body(knobs: Value) -> Unchecked {
        Unchecked {
            model: "m".into(),
            prompt: Prompt::Text("hi".into()),
            knobs: serde_json::from_value(knobs).unwrap(),
            stream: None,
            include_usage: false,
            keep_alive: None,
            chat_turn: false,
            shape: Shape::default(),
            lora: None,
        }
    }

    fn check(dialect: Dialect, knobs: Value) -> Result<ValidRequest, ApiError> {
        valid_request(dialect, body(knobs), &Limits::default())
    }

    fn chat(knobs: Value) -> Result<ValidRequest, String> {
        check(Dialect::Chat, knobs).map_err(|e| e.to_string())
    }

    #[test]
    fn bad_knobs_name_the_field() {
        let e = chat(json!({"max_tokens": -5})).unwrap_err();
        assert!(e.contains("max_tokens") && e.contains("-5"), "{e}");
        let e = chat(json!({"temperature": -1.0})).unwrap_err();
        assert!(e.contains("temperature"), "{e}");
        let e = chat(json!({"top_p": 1.5})).unwrap_err();
        assert!(e.contains("top_p"), "{e}");
        let e = chat(json!({"n": 2})).unwrap_err();
        assert!(e.contains("`n`"), "{e}");
        let e = chat(json!({"top_logprobs": 50})).unwrap_err();
        assert!(e.contains("top_logprobs"), "{e}");
        let e = chat(json!({"stop": [""]})).unwrap_err();
        assert!(e.contains("stop"), "{e}");
        let e = chat(json!({"max_tokens": 1_i64 << 40})).unwrap_err();
        assert!(e.contains("≤"), "{e}");
        assert!(chat(json!({"logit_bias": {"abc": 1.0}})).is_err());
    }

    #[test]
    fn good_knobs_map_through() {
        let v = chat(json!({"temperature": 0.5, "seed": 7, "top_logprobs": 3, "stop": "\n", "max_tokens": 100,
                            "logit_bias": {"5": -100.0}}))
        .unwrap();
        let (s, st) = (v.params.sampling, v.params.stop);
        assert_eq!((s.temperature, s.seed, s.top_logprobs, s.logprobs), (0.5, Some(7), 3, true));
        assert_eq!(s.logit_bias, vec![(5, -100.0)]);
        assert_eq!((st.max_tokens, st.stop.len()), (100, 1));
        assert!(check_vocab(&s, 4).is_err());
    }

    /// The same bad value through each dialect: one rule, in each dialect's names.
    #[test]
    fn one_rule_for_every_dialect() {
        let cases: &[(&str, Value, [&str; 3])] = &[
            ("top_k", json!(-1), ["top_k", "top_k", "options.top_k"]),
            ("top_p", json!(1.5), ["top_p", "top_p", "options.top_p"]),
            ("temperature", json!(-0.5), ["temperature", "temperature", "options.temperature"]),
            ("min_p", json!(2.0), ["min_p", "min_p", "options.min_p"]),
            ("repetition_penalty", json!(0.0), ["repetition_penalty", "repetition_penalty", "options.repeat_penalty"]),
            ("repeat_last_n", json!(5000), ["repeat_last_n", "repeat_last_n", "options.repeat_last_n"]),
            ("presence_penalty", json!(3.0), ["presence_penalty", "presence_penalty", "options.presence_penalty"]),
            ("frequency_penalty", json!(-3.0), ["frequency_penalty", "frequency_penalty", "options.frequency_penalty"]),
            ("stop", json!(vec!["x"; 17]), ["stop", "stop", "options.stop"]),
            ("stop", json!([""]), ["stop", "stop", "options.stop"]),
            ("max_tokens", json!(1_000_000), ["max_tokens", "max_tokens", "options.num_predict"]),
            ("top_logprobs", json!(21), ["top_logprobs", "logprobs", ""]),
            ("temperature", json!("hot"), ["temperature", "temperature", "options.temperature"]),
        ];
        let dialects = [Dialect::Chat, Dialect::Completions, Dialect::Ollama];
        for (knob, value, names) in cases {
            let mut rules = Vec::new();
            for (d, name) in dialects.into_iter().zip(names).filter(|(_, n)| !n.is_empty()) {
                let field = name.trim_start_matches("options.");
                let e = check(d, json!({ field: value })).unwrap_err();
                let json = e.openai_json();
                assert_eq!(json["error"]["param"], *name, "{knob} through {d:?}: {e}");
                let (msg, quoted) = (e.to_string(), format!("`{name}`"));
                assert!(msg.contains(&quoted) || !msg.contains('`'), "{knob} through {d:?}: {msg}");
                rules.push(msg.replace(&quoted, "`_`"));
            }
            assert!(rules.windows(2).all(|w| w[0] == w[1]), "{knob}: {rules:?}");
        }
    }

    #[test]
    fn each_dialect_has_its_defaults() {
        let limits = Limits::default();
        for (d, temperature, top_k, top_p, penalty, max_tokens, stream) in [
            (Dialect::Chat, 1.0, 0, 1.0, 1.0, limits.max_tokens, false),
            (Dialect::Completions, 1.0, 0, 1.0, 1.0, 16, false),
            (Dialect::Ollama, 0.8, 40, 0.9, 1.1, limits.max_tokens, true),
        ] {
            let v = check(d, json!({})).unwrap();
            let s = &v.params.sampling;
            assert_eq!(
                (s.temperature, s.top_k, s.top_p, s.repetition_penalty),
                (temperature, top_k, top_p, penalty),
                "{d:?}"
            );
            assert_eq!(
                (s.min_p, s.repeat_last_n, s.presence_penalty, s.frequency_penalty),
                (0.0, 64, 0.0, 0.0),
                "{d:?}"
            );
            assert_eq!((s.seed, s.logprobs, s.top_logprobs, s.logit_bias.len()), (None, false, 0, 0), "{d:?}");
            assert_eq!(
                (v.params.stop.max_tokens, v.params.stop.stop.len(), v.params.stop.ignore_eos),
                (max_tokens, 0, false),
                "{d:?}"
            );
            assert_eq!(v.stream, stream, "{d:?}");
        }
    }

    #[test]
    fn dialect_rules() {
        let ollama = |k| check(Dialect::Ollama, k).unwrap();
        // Ollama: a negative num_predict runs to the context's end, 0 generates one token.
        assert_eq!(ollama(json!({"num_predict": -1})).params.stop.max_tokens, Limits::default().max_tokens);
        assert_eq!(ollama(json!({"num_predict": 0})).params.stop.max_tokens, 1);
        assert_eq!(ollama(json!({"repeat_penalty": 1.3, "seed": -1})).params.sampling.repetition_penalty, 1.3);
        // Fields of another dialect are not knobs here.
        let e = check(Dialect::Ollama, json!({"max_tokens": 3})).unwrap_err();
        assert_eq!(e.openai_json()["error"]["param"], "options.max_tokens");
        // Chat: max_completion_tokens wins and names itself.
        let v = check(Dialect::Chat, json!({"max_tokens": 5, "max_completion_tokens": 7})).unwrap();
        assert_eq!(v.params.stop.max_tokens, 7);
        let e = check(Dialect::Chat, json!({"max_tokens": 5, "max_completion_tokens": 0})).unwrap_err();
        assert!(e.to_string().contains("`max_completion_tokens` must be ≥ 1"), "{e}");
        // Completions: `logprobs` is a count, and 0 still asks for the chosen tokens'.
        let v = check(Dialect::Completions, json!({"logprobs": 0})).unwrap();
        assert_eq!((v.params.sampling.logprobs, v.params.sampling.top_logprobs), (true, 0));
        let v = check(Dialect::Chat, json!({"top_logprobs": 0})).unwrap();
        assert!(!v.params.sampling.logprobs);
        for (k, want) in [(json!({"echo": true}), "echo"), (json!({"best_of": 2}), "best_of"), (json!({"n": 2}), "`n`")]
        {
            let e = check(Dialect::Completions, k).unwrap_err();
            assert!(e.to_string().contains(want), "{e}");
        }
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
