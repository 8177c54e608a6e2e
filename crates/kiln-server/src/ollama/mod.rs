//! The Ollama-compatible API: `/api/chat`, `/api/generate`, `/api/tags`,
//! `/api/show`, `/api/ps`, `/api/version`; model management in [`manage`].
//! Streaming (NDJSON) is the default, as in Ollama.

pub mod blobs;
pub mod context;
pub mod manage;
pub mod modelfile;
pub mod types;

use std::time::{Duration, SystemTime};

use axum::body::Body;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use kiln_core::{StreamEvent, Timings};
use kiln_engine::{ChatMessage, ChatPrompt, Prompt};
use kiln_grammar::Constraint;

use crate::answer::{self, Reading, Reasoning, Shape, ToolChoice};
use crate::error::{ApiError, OllamaError};
use crate::generate::{reason_name, stream_body, Collected, Generation, Render};
use crate::knobs::Dialect;
use crate::openai::read_body;
use crate::pool::{KeepAlive, Served};
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

pub(crate) fn ndjson(body: Body) -> Response {
    ([(header::CONTENT_TYPE, "application/x-ndjson")], body).into_response()
}

pub(crate) fn line(v: &impl serde::Serialize, out: &mut Vec<u8>) {
    let _ = serde_json::to_writer(&mut *out, v);
    out.push(b'\n');
}

/// An empty prompt only loads (or with `keep_alive: 0`, unloads) the model.
async fn load_only(st: &SharedState, model: &str, ka: Option<KeepAlive>) -> Result<(String, &'static str), ApiError> {
    // A LoRA adapter's name loads its base model.
    let base = st.loras.get(model).map_or_else(|| model.to_string(), |e| e.base);
    let (lease, _) = st.pool.acquire(&base, ka).await?;
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
    let mut r: GenerateRequest = parse_json(&bytes)?;
    // An empty `system` is none (Ollama's Go client always sends one).
    r.system = r.system.filter(|s| !s.is_empty());
    let earlier = context::take(&mut r.other)?;
    let template = r.template.as_deref().filter(|t| !t.is_empty());
    let template = template.map(|t| crate::preset::parse_template(t, "template")).transpose()?;
    refuse_others(&r.other, &["suffix", "images"])?;
    if r.prompt.is_empty() && r.system.is_none() {
        let (model, reason) = load_only(&st, &r.model, keep_alive(r.keep_alive.as_ref())?).await?;
        let resp = GenerateResponse {
            model,
            created_at: rfc3339(SystemTime::now()),
            response: String::new(),
            thinking: None,
            done: true,
            done_reason: Some(reason.into()),
            stats: Stats::default(),
            context: None,
        };
        return Ok(Json(resp).into_response());
    }
    let (reasoning, vars) = think(r.think)?;
    let alias = crate::preset::of(&st, &r.model);
    let system = r.system.or_else(|| alias.as_ref().and_then(|a| a.system.clone()));
    let prompt = if r.raw {
        Prompt::Text(r.prompt)
    } else {
        let mut m: Vec<ChatMessage> = system.into_iter().map(|s| ChatMessage::new("system", s)).collect();
        m.push(ChatMessage::new("user", r.prompt));
        Prompt::Chat(ChatPrompt { messages: m, tools: None, vars })
    };
    let tokens = context::prompt_tokens(&st, &r.model, prompt, earlier, template).await?;
    let prompt = Prompt::Tokens(tokens.clone());
    let shape = Shape { format: format(r.format)?, reasoning, chat: !r.raw, ..Shape::default() };
    let mut knobs = r.options.unwrap_or_default().knobs;
    if let Some(a) = &alias {
        crate::preset::apply_knobs(a, &mut knobs, Dialect::Ollama);
    }
    let body = Unchecked {
        model: r.model,
        prompt,
        knobs,
        stream: r.stream,
        include_usage: false,
        keep_alive: r.keep_alive,
        chat_turn: false,
        shape,
        lora: None,
    };
    let v = valid_request(Dialect::Ollama, body, &st.limits)?;
    let stream = v.stream;
    let gen = Generation::start(st.clone(), v).await?;
    if stream {
        return Ok(ndjson(stream_body(gen, Ndjson { context: Some(tokens), ..Ndjson::new(false) })));
    }
    let (model, load, reading) = (gen.model_name().to_string(), gen.load_wait, gen.reading);
    let c: Collected = gen.collect().await?;
    let parsed = reading.parse(&c.text);
    let context = tokens.into_iter().chain(c.tokens.iter().map(|(id, _)| *id)).collect();
    Ok(Json(GenerateResponse {
        model,
        created_at: rfc3339(SystemTime::now()),
        response: parsed.content,
        thinking: parsed.reasoning,
        done: true,
        done_reason: Some(ollama_reason(c.reason).into()),
        stats: stats(&c.timings, load),
        context: Some(context),
    })
    .into_response())
}

/// Refuses a field of `names` that is sent with a value (not null, not
/// empty), and any other field at all.
pub(crate) fn refuse_others(
    other: &serde_json::Map<String, serde_json::Value>,
    names: &[&str],
) -> Result<(), ApiError> {
    for (k, v) in other {
        let empty = match v {
            serde_json::Value::Null => true,
            serde_json::Value::String(s) => s.is_empty(),
            serde_json::Value::Array(a) => a.is_empty(),
            _ => false,
        };
        if empty && names.contains(&k.as_str()) || v.is_null() {
            continue;
        }
        return Err(ApiError::bad_param(
            k,
            format!("`{k}` is not supported (docs/server.md lists the fields kiln takes)"),
        ));
    }
    Ok(())
}

/// Ollama's `format`: `"json"`, a schema object, or empty.
fn format(f: Option<serde_json::Value>) -> Result<Option<Constraint>, ApiError> {
    match f {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::String(s)) if s.is_empty() => Ok(None),
        Some(serde_json::Value::String(s)) if s == "json" => Ok(Some(Constraint::JsonObject)),
        Some(schema @ serde_json::Value::Object(_)) => Ok(Some(Constraint::JsonSchema(schema))),
        Some(other) => {
            Err(ApiError::bad_param("format", format!("`format` must be \"json\" or a JSON schema, got {other}")))
        }
    }
}

/// Ollama's `think`: whether reasoning is returned, and what the template
/// is told (`enable_thinking`, or gpt-oss's `reasoning_effort`).
fn think(t: Option<serde_json::Value>) -> Result<(Reasoning, serde_json::Map<String, serde_json::Value>), ApiError> {
    let mut vars = serde_json::Map::new();
    let reasoning = match t {
        None | Some(serde_json::Value::Null) => Reasoning::Return,
        Some(serde_json::Value::Bool(b)) => {
            vars.insert("enable_thinking".into(), b.into());
            if b {
                Reasoning::Return
            } else {
                Reasoning::Drop
            }
        }
        Some(serde_json::Value::String(s)) if ["low", "medium", "high"].contains(&s.as_str()) => {
            vars.insert("reasoning_effort".into(), s.into());
            Reasoning::Return
        }
        Some(other) => {
            return Err(ApiError::bad_param(
                "think",
                format!("`think` must be true, false, low, medium or high, got {other}"),
            ))
        }
    };
    Ok((reasoning, vars))
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
    refuse_others(&r.other, &[])?;
    if r.messages.is_empty() {
        let (model, reason) = load_only(&st, &r.model, keep_alive(r.keep_alive.as_ref())?).await?;
        let resp = ChatResponse {
            model,
            created_at: rfc3339(SystemTime::now()),
            message: assistant(String::new(), None, Vec::new()),
            done: true,
            done_reason: Some(reason.into()),
            stats: Stats::default(),
        };
        return Ok(Json(resp).into_response());
    }
    let mut msgs = r.messages.into_iter().enumerate().map(|(i, m)| message(m, i)).collect::<Result<Vec<_>, _>>()?;
    let alias = crate::preset::of(&st, &r.model);
    if let Some(system) =
        alias.as_ref().and_then(|a| a.system.clone()).filter(|_| msgs.iter().all(|m| m.role != "system"))
    {
        msgs.insert(0, ChatMessage::new("system", system));
    }
    let tools = answer::tools(r.tools)?;
    answer::check_tools(&tools, &ToolChoice::Auto)?;
    let (reasoning, vars) = think(r.think)?;
    let choice = if tools.is_empty() { ToolChoice::None } else { ToolChoice::Auto };
    let shape = Shape { tools, choice, parallel: true, format: format(r.format)?, reasoning, chat: true };
    let mut knobs = r.options.unwrap_or_default().knobs;
    if let Some(a) = &alias {
        crate::preset::apply_knobs(a, &mut knobs, Dialect::Ollama);
    }
    let body = Unchecked {
        model: r.model,
        prompt: Prompt::Chat(ChatPrompt { messages: msgs, tools: None, vars }),
        knobs,
        stream: r.stream,
        include_usage: false,
        keep_alive: r.keep_alive,
        chat_turn: true,
        shape,
        lora: None,
    };
    let v = valid_request(Dialect::Ollama, body, &st.limits)?;
    let stream = v.stream;
    let gen = Generation::start(st.clone(), v).await?;
    if stream {
        return Ok(ndjson(stream_body(gen, Ndjson::new(true))));
    }
    let (model, load, reading) = (gen.model_name().to_string(), gen.load_wait, gen.reading);
    let c = gen.collect().await?;
    let p = reading.parse(&c.text);
    let calls = p.tool_calls.into_iter().enumerate().map(|(i, c)| ollama_call(i, c.name, &c.arguments)).collect();
    Ok(Json(ChatResponse {
        model,
        created_at: rfc3339(SystemTime::now()),
        message: assistant(p.content, p.reasoning, calls),
        done: true,
        done_reason: Some(ollama_reason(c.reason).into()),
        stats: stats(&c.timings, load),
    })
    .into_response())
}

/// One Ollama message, as the template reads it.
fn message(m: Message, i: usize) -> Result<ChatMessage, ApiError> {
    if !m.images.is_empty() {
        let field = format!("messages[{i}].images");
        return Err(ApiError::bad_param(&field, format!("`{field}`: images are not supported (no vision models yet)")));
    }
    let mut out = ChatMessage::new(role(&m.role, i)?, m.content);
    out.name = m.tool_name;
    out.reasoning_content = m.thinking;
    for (j, c) in m.tool_calls.into_iter().enumerate() {
        let field = format!("messages[{i}].tool_calls[{j}].function.arguments");
        out.tool_calls.push(answer::template_call(answer::call_id(), c.function.name, c.function.arguments, &field)?);
    }
    Ok(out)
}

/// An assistant message of an answer.
fn assistant(content: String, thinking: Option<String>, tool_calls: Vec<OllamaToolCall>) -> Message {
    Message { role: "assistant".into(), content, thinking, tool_calls, tool_name: None, images: Vec::new() }
}

/// A parsed call in Ollama's shape (arguments as an object).
fn ollama_call(index: usize, name: String, arguments: &str) -> OllamaToolCall {
    let arguments = serde_json::from_str(arguments).unwrap_or_else(|_| serde_json::json!({}));
    OllamaToolCall { function: OllamaFunctionCall { index: Some(index), name, arguments } }
}

fn ollama_reason(r: kiln_core::FinishReason) -> &'static str {
    match r {
        kiln_core::FinishReason::ContextLength => "length",
        other => reason_name(other),
    }
}

/// Streams NDJSON lines: content and thinking as they come, each tool call
/// whole once its arguments are complete.
struct Ndjson {
    chat: bool,
    model: String,
    parser: Option<kiln_chat::StreamParser>,
    drop_reasoning: bool,
    /// The call being streamed: name and arguments so far.
    call: Option<(usize, String, String)>,
    /// `/api/generate`: the prompt's tokens and then the answer's, for the
    /// last line's `context`.
    context: Option<Vec<kiln_core::TokenId>>,
}

/// Text of one line.
#[derive(Default)]
struct Line {
    content: String,
    thinking: String,
    calls: Vec<OllamaToolCall>,
}

impl Line {
    fn is_empty(&self) -> bool {
        self.content.is_empty() && self.thinking.is_empty() && self.calls.is_empty()
    }
}

impl Ndjson {
    fn new(chat: bool) -> Self {
        Self { chat, model: String::new(), parser: None, drop_reasoning: false, call: None, context: None }
    }

    fn emit(&mut self, l: Line, done: Option<(&'static str, Stats)>, out: &mut Vec<u8>) {
        let created_at = rfc3339(SystemTime::now());
        let (done_reason, stats) = match done {
            Some((r, s)) => (Some(r.to_string()), s),
            None => (None, Stats::default()),
        };
        let is_done = done_reason.is_some();
        let thinking = (!l.thinking.is_empty()).then_some(l.thinking);
        if self.chat {
            let message = assistant(l.content, thinking, l.calls);
            line(
                &ChatResponse { model: self.model.clone(), created_at, message, done: is_done, done_reason, stats },
                out,
            );
        } else {
            line(
                &GenerateResponse {
                    model: self.model.clone(),
                    created_at,
                    response: l.content,
                    thinking,
                    done: is_done,
                    done_reason,
                    stats,
                    context: if is_done { self.context.take() } else { None },
                },
                out,
            );
        }
    }

    /// Adds text through the answer parser.
    fn add(&mut self, text: &str, l: &mut Line, end: bool) {
        for piece in answer::pieces(&mut self.parser, text, end) {
            match piece {
                kiln_chat::Piece::Content(t) => l.content.push_str(&t),
                kiln_chat::Piece::Reasoning(t) if !self.drop_reasoning => l.thinking.push_str(&t),
                kiln_chat::Piece::Reasoning(_) => {}
                kiln_chat::Piece::ToolCallStart { index, name } => {
                    if let Some((i, n, a)) = self.call.take() {
                        l.calls.push(ollama_call(i, n, &a));
                    }
                    self.call = Some((index, name, String::new()));
                }
                kiln_chat::Piece::ToolCallArgs { delta, .. } => {
                    if let Some((_, _, a)) = self.call.as_mut() {
                        a.push_str(&delta);
                    }
                }
            }
        }
        if end {
            if let Some((i, n, a)) = self.call.take() {
                l.calls.push(ollama_call(i, n, &a));
            }
        }
    }
}

impl Render for Ndjson {
    fn head(&mut self, gen: &Generation) -> Bytes {
        self.model = gen.model_name().to_string();
        let r = gen.reading;
        self.drop_reasoning = r.drop_reasoning;
        self.parser = (r != Reading::PLAIN).then(|| r.stream_parser());
        Bytes::new()
    }

    fn batch(&mut self, gen: &Generation, events: Vec<StreamEvent>) -> (Bytes, bool) {
        let (mut l, mut out) = (Line::default(), Vec::new());
        let mut text = String::new();
        for ev in events {
            match ev {
                StreamEvent::Token { text: t, token, .. } => {
                    text.push_str(&t);
                    if let Some(c) = self.context.as_mut() {
                        c.push(token);
                    }
                }
                StreamEvent::Done { reason, text: t, timings } => {
                    text.push_str(&t);
                    self.add(&text, &mut l, true);
                    if !l.is_empty() {
                        self.emit(std::mem::take(&mut l), None, &mut out);
                    }
                    let stats = stats(&timings, gen.load_wait);
                    self.emit(Line::default(), Some((ollama_reason(reason), stats)), &mut out);
                    return (out.into(), true);
                }
                StreamEvent::Error(e) => {
                    line(&ApiError::Internal(e).ollama_json(), &mut out);
                    return (out.into(), true);
                }
            }
        }
        self.add(&text, &mut l, false);
        if !l.is_empty() {
            self.emit(l, None, &mut out);
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

/// The model's identifier in `/api/tags` and `/api/ps`: the SHA-256 of
/// the file's size and time, so that its leading digits (the ID
/// `ollama list` shows) differ between files; hashing the bytes on every
/// listing would cost a read of each model.
fn digest(e: &ModelEntry) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(e.size_bytes.to_le_bytes());
    h.update(e.modified.to_le_bytes());
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
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
        .map(|m| {
            let info = m.engine().ok().map(|e| e.info());
            PsModel {
                name: m.entry.name.clone(),
                model: m.entry.name.clone(),
                size: m.entry.size_bytes,
                digest: digest(&m.entry),
                details: details(&m.entry, info),
                expires_at: rfc3339(m.expires_at().unwrap_or(forever)),
                size_vram: 0,
                context_length: match &m.served {
                    Served::Generate(e) => e.info().max_ctx,
                    Served::Embed(e) => e.info().max_tokens,
                },
            }
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
    refuse_others(&r.other, &["system", "template", "options"])?;
    if r.verbose == Some(true) {
        return Err(ApiError::bad_param(
            "verbose",
            "`verbose` must be false: kiln has no verbose form of /api/show (tensor and tokenizer lists)",
        )
        .into());
    }
    let name = r.model.or(r.name).ok_or_else(|| ApiError::bad_param("model", "`model` is required"))?;
    let entry = st.pool.resolver().resolve(&name)?;
    let loaded = st.pool.loaded_as(&entry);
    let info = loaded.as_ref().and_then(|m| m.engine().ok()).map(|e| e.info().clone());
    let template = match entry.alias.as_ref().and_then(|a| a.template.clone()) {
        Some(t) => t,
        None => loaded
            .as_ref()
            .and_then(|m| m.engine().ok()?.tokenizer().chat_template().map(str::to_string))
            .unwrap_or_default(),
    };
    // Read from the file when the model is not loaded: clients (the Go CLI's
    // `ollama show`) expect `general.architecture` in every answer.
    let config = match &info {
        Some(i) => Some(i.config.clone()),
        None => {
            let path = entry.path.clone();
            tokio::task::spawn_blocking(move || kiln_engine::memory::probe(&path).ok()).await.ok().flatten()
        }
    };
    let model_info = match &config {
        Some(c) => {
            let arch = format!("{:?}", c.arch).to_lowercase();
            serde_json::json!({
                "general.architecture": arch,
                format!("{arch}.context_length"): info.as_ref().map_or(c.max_position, |i| i.max_ctx),
                format!("{arch}.embedding_length"): c.hidden_size,
                format!("{arch}.block_count"): c.num_layers,
                format!("{arch}.attention.head_count"): c.num_heads,
                format!("{arch}.attention.head_count_kv"): c.num_kv_heads,
                "tokenizer.ggml.vocab_size": c.vocab_size,
            })
        }
        None => serde_json::json!({"general.architecture": "unknown"}),
    };
    let (modelfile, parameters) = match &entry.alias {
        Some(a) => {
            let adapter = a.adapter.as_ref().zip(st.pool.resolver().cache()).map(|(ad, c)| c.adapter_path(ad));
            modelfile::render(a, adapter.as_deref())
        }
        None => (format!("FROM {}\n", entry.name), String::new()),
    };
    let path = entry.path.clone();
    let embeds = tokio::task::spawn_blocking(move || kiln_engine::is_embedding_model(&path)).await.unwrap_or(false);
    let mut capabilities = vec![if embeds { "embedding" } else { "completion" }.to_string()];
    // Known once the model is loaded (its template), or from a Modelfile
    // template; Open WebUI offers tools only for models that list them.
    let takes_tools = match crate::preset::template(entry.alias.as_ref()) {
        Ok(Some(t)) => t.takes_tools(),
        _ => kiln_chat::template_takes_tools(&template),
    };
    if takes_tools {
        capabilities.push("tools".into());
    }
    Ok(Json(ShowResponse {
        modelfile,
        parameters,
        template,
        details: show_details(&entry, info.as_ref(), config.as_ref().map(|c| format!("{:?}", c.arch).to_lowercase())),
        model_info,
        capabilities,
        modified_at: file_time(entry.modified),
    }))
}

/// [`details`], with the family read from the file when not loaded.
fn show_details(e: &ModelEntry, loaded: Option<&kiln_engine::ModelInfo>, family: Option<String>) -> Details {
    let mut d = details(e, loaded);
    if let Some(a) = &e.alias {
        d.parent_model = a.from.clone();
    }
    if let (true, Some(f)) = (d.family.is_empty(), family) {
        d.families = vec![f.clone()];
        d.family = f;
    }
    d
}

/// The Ollama API version (Ollama).
#[utoipa::path(get, path = "/api/version", responses((status = 200, body = Version)))]
pub async fn version() -> Json<Version> {
    Json(Version { version: OLLAMA_VERSION.to_string() })
}
