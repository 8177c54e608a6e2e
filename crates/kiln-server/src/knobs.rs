//! The sampling and stop knobs of a generation request, declared once.
//!
//! [`Knobs`] lists every knob under its canonical name, with its type and
//! documentation. Each dialect ([`Dialect`]: OpenAI chat, OpenAI
//! completions, Ollama `options`) has a subset of them, some under names of
//! its own; [`SPELLINGS`] is that table, and [`Dialect::sampling_defaults`]
//! and [`Dialect::max_tokens_default`] say what a knob left out is. A body
//! keeps its knobs as sent ([`RawKnobs`], flattened into the body type);
//! [`RawKnobs::read`] renames them to [`Knobs`] (a wrong type is a 400 that
//! names the field as the client wrote it, e.g. `options.num_predict`), and
//! [`crate::validate::valid_request`] checks them, the same way for every
//! route. A field that is no knob of the dialect is a 400 that names it,
//! except Ollama's runner options ([`OLLAMA_RUNNER_OPTIONS`]: kiln places
//! and sizes a model itself) and its sampling options at their neutral
//! values ([`ollama_neutral`]). [`KnobDocs`] writes each dialect's knobs
//! into the OpenAPI document.

use std::collections::BTreeMap;

use kiln_core::SamplingParams;
use serde::Deserialize;
use serde_json::{Map, Value};
use utoipa::openapi::{RefOr, Schema};
use utoipa::{PartialSchema, ToSchema};

use crate::error::ApiError;
use crate::validate::Limits;

/// A string or a list of strings (`stop`).
#[derive(Debug, Clone, PartialEq, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum StringOrList {
    /// One string.
    One(String),
    /// Several.
    Many(Vec<String>),
}

impl StringOrList {
    /// As a list.
    pub fn into_vec(self) -> Vec<String> {
        match self {
            Self::One(s) => vec![s],
            Self::Many(v) => v,
        }
    }
}

/// Every knob, under its canonical name (see [`SPELLINGS`] for each
/// dialect's). `None`: not sent.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, ToSchema)]
pub struct Knobs {
    /// Maximum generated tokens, ≥ 1 (default: until the context is full;
    /// completions: 16). Ollama's `num_predict`: -1 and -2 run until the
    /// context is full, 0 generates one token.
    pub max_tokens: Option<i64>,
    /// Maximum generated tokens; wins over `max_tokens`.
    #[schema(minimum = 1)]
    pub max_completion_tokens: Option<i64>,
    /// Sampling temperature, ≥ 0; 0 is greedy.
    #[schema(minimum = 0.0)]
    pub temperature: Option<f32>,
    /// Nucleus sampling, in (0, 1].
    #[schema(exclusive_minimum = 0.0, maximum = 1.0)]
    pub top_p: Option<f32>,
    /// Keep only the k most likely tokens; 0 disables.
    #[schema(minimum = 0)]
    pub top_k: Option<i64>,
    /// Min-p sampling, in [0, 1].
    #[schema(minimum = 0.0, maximum = 1.0)]
    pub min_p: Option<f32>,
    /// Multiplicative repetition penalty, > 0; 1 disables.
    #[schema(exclusive_minimum = 0.0)]
    pub repetition_penalty: Option<f32>,
    /// Window of the penalties in tokens; -1: the longest window (4096).
    pub repeat_last_n: Option<i64>,
    /// In [-2, 2].
    #[schema(minimum = -2.0, maximum = 2.0)]
    pub presence_penalty: Option<f32>,
    /// In [-2, 2].
    #[schema(minimum = -2.0, maximum = 2.0)]
    pub frequency_penalty: Option<f32>,
    /// Seed for reproducible sampling; negative: random.
    pub seed: Option<i64>,
    /// Stop strings (at most 16 of 1 to 256 bytes); never part of the output.
    #[schema(inline)]
    pub stop: Option<StringOrList>,
    /// Return log-probabilities of the chosen tokens.
    pub logprobs: Option<bool>,
    /// Alternatives per position (≤ 20). Completions' `logprobs`: sending it
    /// also turns log-probabilities on.
    #[schema(minimum = 0, maximum = 20)]
    pub top_logprobs: Option<i64>,
    /// Token id (as a string) → bias in [-100, 100].
    pub logit_bias: Option<BTreeMap<String, f32>>,
    /// Choices to generate; only 1 is supported.
    #[schema(minimum = 1, maximum = 1)]
    pub n: Option<i64>,
    /// Only 1 is supported.
    #[schema(minimum = 1, maximum = 1)]
    pub best_of: Option<i64>,
    /// Echo the prompt (not supported; must be false).
    pub echo: Option<bool>,
    /// Keep generating past end-of-sequence tokens (benchmarks).
    pub ignore_eos: Option<bool>,
    /// Context length: accepted and unused (the context is fixed when a model loads).
    pub num_ctx: Option<i64>,
    /// Tokens a context shift keeps at the head of the sequence, ≥ 0
    /// (default: the system prompt, at least 4; `kiln serve --context-shift`). Without
    /// context shift nothing is ever dropped, so every token is kept.
    pub num_keep: Option<i64>,
    /// `false`: no speculative decoding for this request (a kiln extension;
    /// speculation, when the server has it on, never changes the output).
    pub speculative: Option<bool>,
}

/// The request dialects that carry knobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// `/v1/chat/completions`.
    Chat,
    /// `/v1/completions`.
    Completions,
    /// `options` of `/api/chat` and `/api/generate`.
    Ollama,
}

/// One knob's field name in each dialect; `None`: the dialect has no such field.
#[derive(Debug, Clone, Copy)]
pub struct Spelling {
    /// The [`Knobs`] field.
    pub knob: &'static str,
    /// In [`Dialect::Chat`].
    pub chat: Option<&'static str>,
    /// In [`Dialect::Completions`].
    pub completions: Option<&'static str>,
    /// In [`Dialect::Ollama`].
    pub ollama: Option<&'static str>,
}

/// A knob every dialect spells the same way.
const fn everywhere(knob: &'static str) -> Spelling {
    Spelling { knob, chat: Some(knob), completions: Some(knob), ollama: Some(knob) }
}

/// A knob both OpenAI dialects spell the same way and Ollama lacks.
const fn openai(knob: &'static str) -> Spelling {
    Spelling { knob, chat: Some(knob), completions: Some(knob), ollama: None }
}

/// Which knobs each dialect has, and its names for them.
pub const SPELLINGS: &[Spelling] = &[
    Spelling {
        knob: "max_tokens",
        chat: Some("max_tokens"),
        completions: Some("max_tokens"),
        ollama: Some("num_predict"),
    },
    Spelling { knob: "max_completion_tokens", chat: Some("max_completion_tokens"), completions: None, ollama: None },
    everywhere("temperature"),
    everywhere("top_p"),
    everywhere("top_k"),
    everywhere("min_p"),
    Spelling {
        knob: "repetition_penalty",
        chat: Some("repetition_penalty"),
        completions: Some("repetition_penalty"),
        ollama: Some("repeat_penalty"),
    },
    everywhere("repeat_last_n"),
    everywhere("presence_penalty"),
    everywhere("frequency_penalty"),
    everywhere("seed"),
    everywhere("stop"),
    Spelling { knob: "logprobs", chat: Some("logprobs"), completions: None, ollama: None },
    Spelling { knob: "top_logprobs", chat: Some("top_logprobs"), completions: Some("logprobs"), ollama: None },
    openai("logit_bias"),
    openai("n"),
    Spelling { knob: "best_of", chat: None, completions: Some("best_of"), ollama: None },
    Spelling { knob: "echo", chat: None, completions: Some("echo"), ollama: None },
    openai("ignore_eos"),
    Spelling { knob: "num_ctx", chat: None, completions: None, ollama: Some("num_ctx") },
    Spelling { knob: "num_keep", chat: None, completions: None, ollama: Some("num_keep") },
    everywhere("speculative"),
];

impl Dialect {
    fn field(self, s: &Spelling) -> Option<&'static str> {
        match self {
            Self::Chat => s.chat,
            Self::Completions => s.completions,
            Self::Ollama => s.ollama,
        }
    }

    /// Where the knobs sit in a body.
    fn prefix(self) -> &'static str {
        match self {
            Self::Chat | Self::Completions => "",
            Self::Ollama => "options.",
        }
    }

    /// The knob a body field is, if this dialect has that field.
    pub fn knob(self, field: &str) -> Option<&'static str> {
        SPELLINGS.iter().find(|s| self.field(s) == Some(field)).map(|s| s.knob)
    }

    /// How a client of this dialect names `knob`: its path in the body
    /// (`options.num_predict`). A name that is no knob comes back as is.
    pub fn name(self, knob: &str) -> String {
        let field = SPELLINGS.iter().find(|s| s.knob == knob).and_then(|s| self.field(s)).unwrap_or(knob);
        format!("{}{field}", self.prefix())
    }

    /// Sampling for the knobs a client of this dialect leaves out.
    pub fn sampling_defaults(self) -> SamplingParams {
        match self {
            Self::Chat | Self::Completions => SamplingParams { temperature: 1.0, ..SamplingParams::default() },
            Self::Ollama => SamplingParams {
                temperature: 0.8,
                top_k: 40,
                top_p: 0.9,
                repetition_penalty: 1.1,
                ..SamplingParams::default()
            },
        }
    }

    /// `max_tokens` when it is left out: until the context is full (the
    /// server's limit), except completions' 16, as OpenAI.
    pub fn max_tokens_default(self, limits: &Limits) -> usize {
        match self {
            Self::Chat | Self::Ollama => limits.max_tokens,
            Self::Completions => 16,
        }
    }

    /// Whether a body without `stream` streams.
    pub fn streams_by_default(self) -> bool {
        self == Self::Ollama
    }
}

/// Ollama `options` that place or size the runner (GPU layers, threads,
/// batch size, memory mapping): kiln decides these itself, and they change
/// no output, so they are accepted and have no effect.
pub const OLLAMA_RUNNER_OPTIONS: &[&str] = &[
    "num_batch",
    "num_gpu",
    "main_gpu",
    "use_mmap",
    "use_mlock",
    "num_thread",
    "numa",
    "low_vram",
    "f16_kv",
    "vocab_only",
    "logits_all",
    "embedding_only",
];

/// Whether an Ollama sampling option kiln lacks is sent at the value that
/// turns it off (`typical_p: 1`, `tfs_z: 1`, `mirostat: 0` with any tau and
/// eta, `penalize_newline: false`), so honouring it is doing nothing.
pub fn ollama_neutral(field: &str, v: &Value) -> bool {
    match field {
        "typical_p" | "tfs_z" => v.as_f64() == Some(1.0),
        "mirostat" => v.as_f64() == Some(0.0),
        "mirostat_tau" | "mirostat_eta" => v.is_number(),
        "penalize_newline" => v.as_bool() == Some(false),
        _ => false,
    }
}

/// A body's knobs as sent: every field its own type does not name. Read
/// them with [`RawKnobs::read`].
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(transparent)]
pub struct RawKnobs(pub Map<String, Value>);

impl RawKnobs {
    /// The knobs of `dialect` under their canonical names; `null` is the
    /// same as leaving a field out, and a field that is no knob is refused
    /// (see the module's documentation for Ollama's exceptions).
    pub fn read(self, dialect: Dialect) -> Result<Knobs, ApiError> {
        let mut known = Map::new();
        for (field, v) in self.0.into_iter().filter(|(_, v)| !v.is_null()) {
            match dialect.knob(&field) {
                Some(knob) => {
                    known.insert(knob.to_string(), v);
                }
                None if dialect == Dialect::Ollama && OLLAMA_RUNNER_OPTIONS.contains(&field.as_str()) => {}
                None if dialect == Dialect::Ollama && ollama_neutral(&field, &v) => {}
                None => {
                    let name = format!("{}{field}", dialect.prefix());
                    return Err(ApiError::bad_param(
                        &name,
                        format!("`{name}` is not supported (docs/server.md lists the fields kiln takes)"),
                    ));
                }
            }
        }
        serde_path_to_error::deserialize(Value::Object(known)).map_err(|e| {
            let path = e.path().to_string();
            let (knob, inner) = path.split_at(path.find(['.', '[']).unwrap_or(path.len()));
            let field = format!("{}{inner}", dialect.name(knob));
            ApiError::bad_param(&field, format!("`{field}`: {}", e.into_inner()))
        })
    }
}

/// Writes each dialect's knobs, with its names and defaults, into the
/// OpenAPI schemas of the bodies that carry them (`ChatRequest`,
/// `CompletionRequest`, Ollama's `Options`).
#[derive(Debug, Clone, Copy)]
pub struct KnobDocs;

impl utoipa::Modify for KnobDocs {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let Some(components) = doc.components.as_mut() else { return };
        for (body, dialect) in
            [("ChatRequest", Dialect::Chat), ("CompletionRequest", Dialect::Completions), ("Options", Dialect::Ollama)]
        {
            if let Some(RefOr::T(Schema::Object(o))) = components.schemas.get_mut(body) {
                o.properties.extend(properties(dialect));
            }
        }
    }
}

/// The schema of each knob of `dialect`, under its field name.
pub fn properties(dialect: Dialect) -> BTreeMap<String, RefOr<Schema>> {
    let RefOr::T(Schema::Object(all)) = Knobs::schema() else { return BTreeMap::new() };
    let defaults = defaults_json(dialect);
    let mut out = BTreeMap::new();
    for s in SPELLINGS {
        let (Some(field), Some(schema)) = (dialect.field(s), all.properties.get(s.knob)) else { continue };
        let mut schema = schema.clone();
        if let (RefOr::T(Schema::Object(o)), Some(d)) = (&mut schema, defaults.get(s.knob)) {
            o.default = Some(d.clone());
        }
        out.insert(field.to_string(), schema);
    }
    out
}

/// The defaults of `dialect` that do not depend on the server's limits.
fn defaults_json(dialect: Dialect) -> Map<String, Value> {
    // Through the shortest decimal form, so that 0.9 reads 0.9, not 0.8999999761581421.
    let num = |x: f32| x.to_string().parse::<f64>().map_or(Value::Null, Value::from);
    let s = dialect.sampling_defaults();
    let mut m = Map::new();
    m.insert("temperature".into(), num(s.temperature));
    m.insert("top_p".into(), num(s.top_p));
    m.insert("top_k".into(), s.top_k.into());
    m.insert("min_p".into(), num(s.min_p));
    m.insert("repetition_penalty".into(), num(s.repetition_penalty));
    m.insert("repeat_last_n".into(), s.repeat_last_n.into());
    m.insert("presence_penalty".into(), num(s.presence_penalty));
    m.insert("frequency_penalty".into(), num(s.frequency_penalty));
    if dialect == Dialect::Completions {
        m.insert("max_tokens".into(), 16.into());
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(v: Value) -> RawKnobs {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn every_knob_has_one_spelling_row() {
        let RefOr::T(Schema::Object(o)) = Knobs::schema() else { panic!("Knobs is an object") };
        let fields: Vec<&str> = o.properties.keys().map(String::as_str).collect();
        let mut rows: Vec<&str> = SPELLINGS.iter().map(|s| s.knob).collect();
        rows.sort_unstable();
        assert_eq!(fields, rows);
        for d in [Dialect::Chat, Dialect::Completions, Dialect::Ollama] {
            for s in SPELLINGS {
                if let Some(f) = d.field(s) {
                    assert_eq!(d.knob(f), Some(s.knob), "{d:?} spells two knobs {f:?}");
                }
            }
        }
    }

    #[test]
    fn each_dialect_reads_its_own_names() {
        let body = serde_json::json!({"num_predict": 5, "repeat_penalty": 1.2, "temperature": null, "top_k": 3,
                                      "num_gpu": 99, "mirostat": 0, "mirostat_tau": 5.0, "typical_p": 1.0});
        let k = raw(body).read(Dialect::Ollama).unwrap();
        let want = Knobs { max_tokens: Some(5), repetition_penalty: Some(1.2), top_k: Some(3), ..Default::default() };
        assert_eq!(k, want);
        let body = serde_json::json!({"max_tokens": 7, "logit_bias": {"1": 2}, "top_k": 3, "num_predict": null});
        let k = raw(body).read(Dialect::Chat).unwrap();
        let bias = BTreeMap::from([("1".to_string(), 2.0)]);
        assert_eq!(k, Knobs { max_tokens: Some(7), top_k: Some(3), logit_bias: Some(bias), ..Default::default() });
        let k = raw(serde_json::json!({"logprobs": 2})).read(Dialect::Completions).unwrap();
        assert_eq!(k, Knobs { top_logprobs: Some(2), ..Default::default() });
    }

    #[test]
    fn a_field_that_is_no_knob_is_refused_by_name() {
        for (body, dialect, field) in [
            (serde_json::json!({"max_tokens": 3}), Dialect::Ollama, "options.max_tokens"),
            (serde_json::json!({"mirostat": 2}), Dialect::Ollama, "options.mirostat"),
            (serde_json::json!({"typical_p": 0.5}), Dialect::Ollama, "options.typical_p"),
            (serde_json::json!({"num_predict": 3}), Dialect::Chat, "num_predict"),
            (serde_json::json!({"suffix": "x"}), Dialect::Completions, "suffix"),
            (serde_json::json!({"functions": [{}]}), Dialect::Chat, "functions"),
        ] {
            let e = raw(body).read(dialect).unwrap_err();
            assert_eq!(e.openai_json()["error"]["param"], field, "{e}");
            assert!(e.to_string().contains("not supported"), "{e}");
        }
    }

    #[test]
    fn a_wrong_type_names_the_field_as_sent() {
        let e = raw(serde_json::json!({"num_predict": "many"})).read(Dialect::Ollama).unwrap_err();
        assert_eq!(e.openai_json()["error"]["param"], "options.num_predict");
        assert!(e.to_string().starts_with("`options.num_predict`: invalid type"), "{e}");
        let e = raw(serde_json::json!({"logit_bias": {"5": "x"}})).read(Dialect::Chat).unwrap_err();
        assert!(e.to_string().starts_with("`logit_bias.5`:"), "{e}");
        let e = raw(serde_json::json!({"logprobs": 1.5})).read(Dialect::Completions).unwrap_err();
        assert!(e.to_string().starts_with("`logprobs`:"), "{e}");
    }

    #[test]
    fn the_documented_defaults_are_the_ones_applied() {
        let p = properties(Dialect::Ollama);
        assert!(p.contains_key("num_predict") && p.contains_key("repeat_penalty") && !p.contains_key("logit_bias"));
        let json = serde_json::to_value(&p).unwrap();
        assert_eq!(json["temperature"]["default"], 0.8);
        assert_eq!(json["top_k"]["default"], 40);
        let json = serde_json::to_value(properties(Dialect::Completions)).unwrap();
        assert_eq!(
            (json["temperature"]["default"].clone(), json["max_tokens"]["default"].clone()),
            (1.0.into(), 16.into())
        );
        assert!(json["logprobs"]["maximum"].is_number() && json.get("max_completion_tokens").is_none());
    }
}
