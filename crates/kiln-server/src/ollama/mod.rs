//! The Ollama-compatible API: `/api/chat`, `/api/generate`, `/api/tags`,
//! `/api/show`, `/api/ps`, `/api/version`. Streaming (NDJSON) is the
//! default, as in Ollama.

pub mod types;

use std::time::{Duration, SystemTime};

use axum::body::Body;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use kiln_core::{StreamEvent, Timings};
use kiln_engine::{ChatMessage, Prompt};

use crate::error::{ApiError, OllamaError};
use crate::generate::{reason_name, stream_body, Collected, Generation, Render};
use crate::knobs::Dialect;
use crate::openai::read_body;
use crate::pool::KeepAlive;
use crate::resolve::ModelEntry;
use crate::state::SharedState;
use crate::validate::{keep_alive, parse_json, role, valid_request, Unchecked};
use types::*;

/// The Ollama version reported by `/api/version`.
pub const OLLAMA_VERSION: &str = "0.6.0";

fn ns(d: Duration) -> u64 {
    d.as_nanos().min(u64::MAX as u128) as u64
}

fn stats(t: &Timings, load: Duration) -> Stats {
    let ms = |m: f64| (m.max(0.0) * 1e6) as u64;
    Stats {
        total_duration: Some(ms(t.total_ms) + ns(load)),
        load_duration: Some(ns(load)),
        prompt_eval_count: Some(t.prompt_tokens),
        prompt_eval_duration: Some(ms(t.prefill_ms)),
        eval_count: Some(t.decode_tokens),
        eval_duration: Some(ms(t.decode_ms)),
    }
}

fn ndjson(body: Body) -> Response {
    ([(header::CONTENT_TYPE, "application/x-ndjson")], body).into_response()
}

fn line(v: &impl serde::Serialize, out: &mut Vec<u8>) {
    let _ = serde_json::to_writer(&mut *out, v);
    out.push(b'\n');
}

/// An empty prompt only loads (or with `keep_alive: 0`, unloads) the model.
async fn load_only(st: &SharedState, model: &str, ka: Option<KeepAlive>) -> Result<(String, &'static str), ApiError> {
    let (lease, _) = st.pool.acquire(model, ka).await?;
    let name = lease.name.clone();
    drop(lease);
    if ka == Some(KeepAlive::For(Duration::ZERO)) && st.pool.unload(&name) {
        return Ok((name, "unload"));
    }
    Ok((name, "load"))
}

/// Generate a completion (Ollama).
#[utoipa::path(post, path = "/api/generate", request_body = GenerateRequest,
    responses((status = 200, description = "NDJSON lines, or one object when `stream` is false",
            content((GenerateResponse = "application/json"), (GenerateResponse = "application/x-ndjson"))),
        (status = 400, description = "invalid request", body = OllamaErrorBody),
        (status = 404, description = "unknown model", body = OllamaErrorBody),
        (status = 413, description = "body too large", body = OllamaErrorBody),
        (status = 429, description = "the model's queue is full", body = OllamaErrorBody),
        (status = 503, description = "the model cannot be loaded or its engine stopped", body = OllamaErrorBody)))]
pub async fn generate(State(st): State<SharedState>, body: Body) -> Result<Response, OllamaError> {
    let bytes = read_body(body, st.limits.max_body_bytes).await?;
    let r: GenerateRequest = parse_json(&bytes)?;
    if r.prompt.is_empty() && r.system.is_none() {
        let (model, reason) = load_only(&st, &r.model, keep_alive(r.keep_alive.as_ref())?).await?;
        let resp = GenerateResponse {
            model,
            created_at: rfc3339(SystemTime::now()),
            response: String::new(),
            done: true,
            done_reason: Some(reason.into()),
            stats: Stats::default(),
        };
        return Ok(Json(resp).into_response());
    }
    let prompt = if r.raw {
        Prompt::Text(r.prompt)
    } else {
        let mut m: Vec<ChatMessage> = r.system.into_iter().map(|s| ChatMessage::new("system", s)).collect();
        m.push(ChatMessage::new("user", r.prompt));
        Prompt::Messages(m)
    };
    let knobs = r.options.unwrap_or_default().knobs;
    let body = Unchecked {
        model: r.model,
        prompt,
        knobs,
        stream: r.stream,
        include_usage: false,
        keep_alive: r.keep_alive,
        chat_turn: false,
    };
    let v = valid_request(Dialect::Ollama, body, &st.limits)?;
    let stream = v.stream;
    let gen = Generation::start(st.clone(), v).await?;
    if stream {
        return Ok(ndjson(stream_body(gen, Ndjson { chat: false, model: String::new() })));
    }
    let (model, load) = (gen.model_name().to_string(), gen.load_wait);
    let c: Collected = gen.collect().await?;
    Ok(Json(GenerateResponse {
        model,
        created_at: rfc3339(SystemTime::now()),
        response: c.text,
        done: true,
        done_reason: Some(ollama_reason(c.reason).into()),
        stats: stats(&c.timings, load),
    })
    .into_response())
}

/// Chat (Ollama).
#[utoipa::path(post, path = "/api/chat", request_body = ChatRequest,
    responses((status = 200, description = "NDJSON lines, or one object when `stream` is false",
            content((ChatResponse = "application/json"), (ChatResponse = "application/x-ndjson"))),
        (status = 400, description = "invalid request", body = OllamaErrorBody),
        (status = 404, description = "unknown model", body = OllamaErrorBody),
        (status = 413, description = "body too large", body = OllamaErrorBody),
        (status = 429, description = "the model's queue is full", body = OllamaErrorBody),
        (status = 503, description = "the model cannot be loaded or its engine stopped", body = OllamaErrorBody)))]
pub async fn chat(State(st): State<SharedState>, body: Body) -> Result<Response, OllamaError> {
    let bytes = read_body(body, st.limits.max_body_bytes).await?;
    let r: ChatRequest = parse_json(&bytes)?;
    if r.messages.is_empty() {
        let (model, reason) = load_only(&st, &r.model, keep_alive(r.keep_alive.as_ref())?).await?;
        let message = Message { role: "assistant".into(), content: String::new() };
        let resp = ChatResponse {
            model,
            created_at: rfc3339(SystemTime::now()),
            message,
            done: true,
            done_reason: Some(reason.into()),
            stats: Stats::default(),
        };
        return Ok(Json(resp).into_response());
    }
    let msgs = r
        .messages
        .into_iter()
        .enumerate()
        .map(|(i, m)| Ok(ChatMessage::new(role(&m.role, i)?, m.content)))
        .collect::<Result<Vec<_>, ApiError>>()?;
    let knobs = r.options.unwrap_or_default().knobs;
    let body = Unchecked {
        model: r.model,
        prompt: Prompt::Messages(msgs),
        knobs,
        stream: r.stream,
        include_usage: false,
        keep_alive: r.keep_alive,
        chat_turn: true,
    };
    let v = valid_request(Dialect::Ollama, body, &st.limits)?;
    let stream = v.stream;
    let gen = Generation::start(st.clone(), v).await?;
    if stream {
        return Ok(ndjson(stream_body(gen, Ndjson { chat: true, model: String::new() })));
    }
    let (model, load) = (gen.model_name().to_string(), gen.load_wait);
    let c = gen.collect().await?;
    Ok(Json(ChatResponse {
        model,
        created_at: rfc3339(SystemTime::now()),
        message: Message { role: "assistant".into(), content: c.text },
        done: true,
        done_reason: Some(ollama_reason(c.reason).into()),
        stats: stats(&c.timings, load),
    })
    .into_response())
}

fn ollama_reason(r: kiln_core::FinishReason) -> &'static str {
    match r {
        kiln_core::FinishReason::ContextLength => "length",
        other => reason_name(other),
    }
}

struct Ndjson {
    chat: bool,
    model: String,
}

impl Ndjson {
    fn emit(&self, text: String, done: Option<(&'static str, Stats)>, out: &mut Vec<u8>) {
        let created_at = rfc3339(SystemTime::now());
        let (done_reason, stats) = match done {
            Some((r, s)) => (Some(r.to_string()), s),
            None => (None, Stats::default()),
        };
        let is_done = done_reason.is_some();
        if self.chat {
            let message = Message { role: "assistant".into(), content: text };
            line(
                &ChatResponse { model: self.model.clone(), created_at, message, done: is_done, done_reason, stats },
                out,
            );
        } else {
            line(
                &GenerateResponse {
                    model: self.model.clone(),
                    created_at,
                    response: text,
                    done: is_done,
                    done_reason,
                    stats,
                },
                out,
            );
        }
    }
}

impl Render for Ndjson {
    fn head(&mut self, gen: &Generation) -> Bytes {
        self.model = gen.model_name().to_string();
        Bytes::new()
    }

    fn batch(&mut self, gen: &Generation, events: Vec<StreamEvent>) -> (Bytes, bool) {
        let (mut text, mut out) = (String::new(), Vec::new());
        for ev in events {
            match ev {
                StreamEvent::Token { text: t, .. } => text.push_str(&t),
                StreamEvent::Done { reason, text: t, timings } => {
                    text.push_str(&t);
                    if !text.is_empty() {
                        self.emit(std::mem::take(&mut text), None, &mut out);
                    }
                    self.emit(String::new(), Some((ollama_reason(reason), stats(&timings, gen.load_wait))), &mut out);
                    return (out.into(), true);
                }
                StreamEvent::Error(e) => {
                    line(&ApiError::Internal(e).ollama_json(), &mut out);
                    return (out.into(), true);
                }
            }
        }
        if !text.is_empty() {
            self.emit(text, None, &mut out);
        }
        (out.into(), false)
    }

    fn error(&mut self, _: &Generation, e: &ApiError) -> Bytes {
        let mut out = Vec::new();
        line(&e.ollama_json(), &mut out);
        out.into()
    }
}

fn details(e: &ModelEntry, loaded: Option<&kiln_engine::ModelInfo>) -> Details {
    let family = loaded.map(|i| format!("{:?}", i.config.arch).to_lowercase()).unwrap_or_default();
    Details {
        parent_model: String::new(),
        format: e.format.clone(),
        families: if family.is_empty() { Vec::new() } else { vec![family.clone()] },
        family,
        parameter_size: String::new(),
        quantization_level: e.quantization.clone().unwrap_or_default(),
    }
}

fn digest(e: &ModelEntry) -> String {
    format!("{:016x}{:016x}", e.size_bytes, e.modified)
}

fn file_time(secs: u64) -> String {
    rfc3339(std::time::UNIX_EPOCH + Duration::from_secs(secs))
}

/// List local models (Ollama).
#[utoipa::path(get, path = "/api/tags", responses((status = 200, body = Tags)))]
pub async fn tags(State(st): State<SharedState>) -> Json<Tags> {
    let models = st
        .pool
        .resolver()
        .list()
        .into_iter()
        .map(|e| TagModel {
            name: e.name.clone(),
            model: e.name.clone(),
            modified_at: file_time(e.modified),
            size: e.size_bytes,
            digest: digest(&e),
            details: details(&e, None),
        })
        .collect();
    Json(Tags { models })
}

/// Loaded models (Ollama).
#[utoipa::path(get, path = "/api/ps", responses((status = 200, body = Ps)))]
pub async fn ps(State(st): State<SharedState>) -> Json<Ps> {
    let forever = SystemTime::UNIX_EPOCH + Duration::from_secs(10_999_999_999);
    let models = st
        .pool
        .loaded()
        .iter()
        .map(|m| PsModel {
            name: m.entry.name.clone(),
            model: m.entry.name.clone(),
            size: m.entry.size_bytes,
            digest: digest(&m.entry),
            details: details(&m.entry, Some(m.engine.info())),
            expires_at: rfc3339(m.expires_at().unwrap_or(forever)),
            size_vram: 0,
        })
        .collect();
    Json(Ps { models })
}

/// Show a model (Ollama).
#[utoipa::path(post, path = "/api/show", request_body = ShowRequest, responses((status = 200, body = ShowResponse),
    (status = 400, description = "invalid request (no `model`)", body = OllamaErrorBody),
    (status = 404, description = "unknown model", body = OllamaErrorBody)))]
pub async fn show(State(st): State<SharedState>, body: Body) -> Result<Json<ShowResponse>, OllamaError> {
    let bytes = read_body(body, st.limits.max_body_bytes).await?;
    let r: ShowRequest = parse_json(&bytes)?;
    let name = r.model.or(r.name).ok_or_else(|| ApiError::bad_param("model", "`model` is required"))?;
    let entry = st.pool.resolver().resolve(&name)?;
    let loaded = st.pool.loaded_as(&entry);
    let info = loaded.as_ref().map(|m| m.engine.info().clone());
    let template =
        loaded.as_ref().and_then(|m| m.engine.tokenizer().chat_template().map(str::to_string)).unwrap_or_default();
    let model_info = match &info {
        Some(i) => {
            let arch = format!("{:?}", i.config.arch).to_lowercase();
            serde_json::json!({
                "general.architecture": arch,
                format!("{arch}.context_length"): i.max_ctx,
                format!("{arch}.embedding_length"): i.config.hidden_size,
                format!("{arch}.block_count"): i.config.num_layers,
                format!("{arch}.attention.head_count"): i.config.num_heads,
                format!("{arch}.attention.head_count_kv"): i.config.num_kv_heads,
                "tokenizer.ggml.vocab_size": i.config.vocab_size,
            })
        }
        None => serde_json::json!({}),
    };
    Ok(Json(ShowResponse {
        modelfile: String::new(),
        parameters: String::new(),
        template,
        details: details(&entry, info.as_ref()),
        model_info,
        capabilities: vec!["completion".into()],
        modified_at: file_time(entry.modified),
    }))
}

/// The Ollama API version (Ollama).
#[utoipa::path(get, path = "/api/version", responses((status = 200, body = Version)))]
pub async fn version() -> Json<Version> {
    Json(Version { version: OLLAMA_VERSION.to_string() })
}
