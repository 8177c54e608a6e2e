//! The OpenAI-compatible API: `/v1/chat/completions`, `/v1/completions`,
//! `/v1/models`.

pub mod convert;
pub mod types;

use axum::body::Body;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use kiln_core::StreamEvent;

use crate::answer::{self, Reading};
use crate::error::ApiError;
use crate::generate::{stream_body, Generation, Render};
use crate::state::SharedState;
use crate::validate::parse_json;
use convert::*;
use types::*;

/// Reads a body up to the configured limit.
pub async fn read_body(body: Body, limit: usize) -> Result<Bytes, ApiError> {
    axum::body::to_bytes(body, limit).await.map_err(|_| ApiError::PayloadTooLarge { limit })
}

/// A response streaming server-sent events.
pub fn sse(body: Body) -> Response {
    ([(header::CONTENT_TYPE, "text/event-stream"), (header::CACHE_CONTROL, "no-cache")], body).into_response()
}

fn event(v: &impl serde::Serialize, out: &mut Vec<u8>) {
    out.extend_from_slice(b"data: ");
    // Serializing our own types cannot fail.
    let _ = serde_json::to_writer(&mut *out, v);
    out.extend_from_slice(b"\n\n");
}

/// Create a chat completion.
#[utoipa::path(post, path = "/v1/chat/completions", request_body = ChatRequest,
    responses((status = 200, description = "A completion, or `text/event-stream` chunks when `stream` is true",
        content((ChatResponse = "application/json"), (String = "text/event-stream"))),
              (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 413, body = ErrorBody),
              (status = 429, body = ErrorBody), (status = 503, body = ErrorBody)))]
pub async fn chat_completions(State(st): State<SharedState>, body: Body) -> Result<Response, ApiError> {
    let bytes = read_body(body, st.limits.max_body_bytes).await?;
    let mut req: ChatRequest = parse_json(&bytes)?;
    crate::preset::openai_chat(&st, &mut req);
    let valid = chat_request(req, &st.limits)?;
    let (stream, include_usage, want_lp) = (valid.stream, valid.include_usage, valid.params.sampling.logprobs);
    let gen = Generation::start(st.clone(), valid).await?;
    let id = new_id("chatcmpl");
    if stream {
        let r = ChatSse {
            id,
            created: unix_now(),
            model: gen.model_name().to_string(),
            include_usage,
            want_lp,
            generated: 0,
            parser: None,
            calls: 0,
        };
        return Ok(sse(stream_body(gen, r)));
    }
    let model = gen.model_name().to_string();
    let lp_gen = want_lp.then(|| gen.token_text_source());
    let reading = gen.reading;
    let c = gen.collect().await?;
    let logprobs = lp_gen.map(|g| ChoiceLogprobs {
        content: chat_logprobs(&g, c.tokens.iter().filter_map(|(id, s)| Some((*id, s.as_ref()?)))),
    });
    let p = reading.parse(&c.text);
    let tool_calls: Vec<ToolCallOut> = p
        .tool_calls
        .into_iter()
        .map(|t| ToolCallOut {
            id: answer::call_id(),
            kind: "function",
            function: FunctionCallOut { name: t.name, arguments: t.arguments },
        })
        .collect();
    let finish_reason = finish_reason(c.reason, !tool_calls.is_empty());
    let content = (tool_calls.is_empty() || !p.content.trim().is_empty()).then_some(p.content);
    let resp = ChatResponse {
        id,
        object: "chat.completion",
        created: unix_now(),
        model,
        choices: vec![ChatChoice {
            index: 0,
            message: AssistantMessage { role: "assistant", content, reasoning_content: p.reasoning, tool_calls },
            logprobs,
            finish_reason,
        }],
        usage: usage(c.timings.prompt_tokens, c.tokens.len(), &c.timings),
    };
    Ok(Json(resp).into_response())
}

/// `finish_reason`: `tool_calls` when an answer that ended by itself made calls.
fn finish_reason(r: kiln_core::FinishReason, calls: bool) -> &'static str {
    match r {
        kiln_core::FinishReason::Stop if calls => "tool_calls",
        r => r.as_openai(),
    }
}

struct ChatSse {
    id: String,
    created: u64,
    model: String,
    include_usage: bool,
    want_lp: bool,
    generated: usize,
    /// Reads tool calls and reasoning out of the text (`None`: plain text).
    parser: Option<kiln_chat::StreamParser>,
    /// Calls started so far.
    calls: usize,
}

/// What one chunk carries.
#[derive(Default)]
struct Out {
    content: String,
    reasoning: String,
    calls: Vec<ToolCallDelta>,
    lps: Vec<TokenLogprobOut>,
}

impl ChatSse {
    fn chunk(&self, delta: Delta, logprobs: Option<ChoiceLogprobs>, finish: Option<&'static str>) -> ChatChunk {
        ChatChunk {
            id: self.id.clone(),
            object: "chat.completion.chunk",
            created: self.created,
            model: self.model.clone(),
            choices: vec![ChunkChoice { index: 0, delta, logprobs, finish_reason: finish }],
            usage: self.include_usage.then_some(None),
        }
    }

    fn empty_delta() -> Delta {
        Delta { role: None, content: None, reasoning_content: None, tool_calls: Vec::new() }
    }

    /// Adds generated text through the answer parser.
    fn add(&mut self, text: &str, o: &mut Out, end: bool) {
        for piece in answer::pieces(&mut self.parser, text, end) {
            match piece {
                kiln_chat::Piece::Content(t) => o.content.push_str(&t),
                kiln_chat::Piece::Reasoning(t) => o.reasoning.push_str(&t),
                kiln_chat::Piece::ToolCallStart { index, name } => {
                    self.calls += 1;
                    o.calls.push(ToolCallDelta {
                        index,
                        id: Some(answer::call_id()),
                        kind: Some("function"),
                        function: FunctionDelta { name: Some(name), arguments: String::new() },
                    });
                }
                kiln_chat::Piece::ToolCallArgs { index, delta } => match o.calls.last_mut() {
                    Some(c) if c.index == index => c.function.arguments.push_str(&delta),
                    _ => o.calls.push(ToolCallDelta {
                        index,
                        id: None,
                        kind: None,
                        function: FunctionDelta { name: None, arguments: delta },
                    }),
                },
            }
        }
    }

    fn flush(&self, o: &mut Out, out: &mut Vec<u8>) {
        let o = std::mem::take(o);
        if o.content.is_empty() && o.reasoning.is_empty() && o.calls.is_empty() && o.lps.is_empty() {
            return;
        }
        let logprobs = (!o.lps.is_empty()).then_some(ChoiceLogprobs { content: o.lps });
        let delta = Delta {
            role: None,
            content: (!o.content.is_empty()).then_some(o.content),
            reasoning_content: (!o.reasoning.is_empty()).then_some(o.reasoning),
            tool_calls: o.calls,
        };
        event(&self.chunk(delta, logprobs, None), out);
    }
}

impl Render for ChatSse {
    fn head(&mut self, gen: &Generation) -> Bytes {
        let r = gen.reading;
        self.parser = (r != Reading::PLAIN).then(|| r.stream_parser());
        let mut out = Vec::new();
        let delta = Delta { role: Some("assistant"), content: Some(String::new()), ..Self::empty_delta() };
        event(&self.chunk(delta, None, None), &mut out);
        out.into()
    }

    fn batch(&mut self, gen: &Generation, events: Vec<StreamEvent>) -> (Bytes, bool) {
        let (mut o, mut text, mut out) = (Out::default(), String::new(), Vec::new());
        for ev in events {
            match ev {
                StreamEvent::Token { token, text: t, logprob } => {
                    self.generated += 1;
                    text.push_str(&t);
                    if let (true, Some(s)) = (self.want_lp, logprob) {
                        o.lps.extend(chat_logprobs(&gen.token_text_source(), std::iter::once((token, &s))));
                    }
                }
                StreamEvent::Done { reason, text: t, timings } => {
                    text.push_str(&t);
                    self.add(&text, &mut o, true);
                    self.flush(&mut o, &mut out);
                    let finish = finish_reason(reason, self.calls > 0);
                    event(&self.chunk(Self::empty_delta(), None, Some(finish)), &mut out);
                    if self.include_usage {
                        let mut c = self.chunk(Self::empty_delta(), None, None);
                        c.choices.clear();
                        c.usage = Some(Some(usage(timings.prompt_tokens, self.generated, &timings)));
                        event(&c, &mut out);
                    }
                    out.extend_from_slice(b"data: [DONE]\n\n");
                    return (out.into(), true);
                }
                StreamEvent::Error(e) => {
                    self.add(&text, &mut o, true);
                    self.flush(&mut o, &mut out);
                    event(&ApiError::Internal(e).openai_json(), &mut out);
                    return (out.into(), true);
                }
            }
        }
        self.add(&text, &mut o, false);
        self.flush(&mut o, &mut out);
        (out.into(), false)
    }

    fn error(&mut self, _: &Generation, e: &ApiError) -> Bytes {
        let mut out = Vec::new();
        event(&e.openai_json(), &mut out);
        out.into()
    }
}

/// Create a (legacy) text completion.
#[utoipa::path(post, path = "/v1/completions", request_body = CompletionRequest,
    responses((status = 200, description = "A completion, or `text/event-stream` chunks when `stream` is true",
        content((CompletionResponse = "application/json"), (String = "text/event-stream"))),
              (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 413, body = ErrorBody),
              (status = 429, body = ErrorBody), (status = 503, body = ErrorBody)))]
pub async fn completions(State(st): State<SharedState>, body: Body) -> Result<Response, ApiError> {
    let bytes = read_body(body, st.limits.max_body_bytes).await?;
    let mut req: CompletionRequest = parse_json(&bytes)?;
    crate::preset::openai_completion(&st, &mut req);
    let valid = completion_request(req, &st.limits)?;
    let (stream, include_usage, want_lp) = (valid.stream, valid.include_usage, valid.params.sampling.logprobs);
    let gen = Generation::start(st.clone(), valid).await?;
    let id = new_id("cmpl");
    if stream {
        let r = CompletionSse {
            id,
            created: unix_now(),
            model: gen.model_name().to_string(),
            include_usage,
            want_lp,
            generated: 0,
            offset: 0,
        };
        return Ok(sse(stream_body(gen, r)));
    }
    let model = gen.model_name().to_string();
    let lp_gen = want_lp.then(|| gen.token_text_source());
    let c = gen.collect().await?;
    let logprobs =
        lp_gen.map(|g| completion_logprobs(&g, c.tokens.iter().filter_map(|(id, s)| Some((*id, s.as_ref()?))), 0));
    let resp = CompletionResponse {
        id,
        object: "text_completion",
        created: unix_now(),
        model,
        choices: vec![CompletionChoice { text: c.text, index: 0, logprobs, finish_reason: Some(c.reason.as_openai()) }],
        usage: Some(usage(c.timings.prompt_tokens, c.tokens.len(), &c.timings)),
    };
    Ok(Json(resp).into_response())
}

struct CompletionSse {
    id: String,
    created: u64,
    model: String,
    include_usage: bool,
    want_lp: bool,
    generated: usize,
    offset: usize,
}

impl CompletionSse {
    fn chunk(
        &self,
        text: String,
        logprobs: Option<CompletionLogprobs>,
        finish: Option<&'static str>,
    ) -> CompletionResponse {
        CompletionResponse {
            id: self.id.clone(),
            object: "text_completion",
            created: self.created,
            model: self.model.clone(),
            choices: vec![CompletionChoice { text, index: 0, logprobs, finish_reason: finish }],
            usage: None,
        }
    }
}

impl Render for CompletionSse {
    fn head(&mut self, _: &Generation) -> Bytes {
        Bytes::new()
    }

    fn batch(&mut self, gen: &Generation, events: Vec<StreamEvent>) -> (Bytes, bool) {
        let (mut text, mut toks, mut out) = (String::new(), Vec::new(), Vec::new());
        let mut done = None;
        for ev in events {
            match ev {
                StreamEvent::Token { token, text: t, logprob } => {
                    self.generated += 1;
                    text.push_str(&t);
                    toks.extend(logprob.filter(|_| self.want_lp).map(|s| (token, s)));
                }
                StreamEvent::Done { reason, text: t, timings } => {
                    text.push_str(&t);
                    done = Some((reason, timings));
                }
                StreamEvent::Error(e) => {
                    event(&ApiError::Internal(e).openai_json(), &mut out);
                    return (out.into(), true);
                }
            }
        }
        let logprobs = (!toks.is_empty())
            .then(|| completion_logprobs(&gen.token_text_source(), toks.iter().map(|(id, s)| (*id, s)), self.offset));
        self.offset += text.len();
        if !text.is_empty() || logprobs.is_some() || done.is_some() {
            event(&self.chunk(text, logprobs, done.as_ref().map(|(r, _)| r.as_openai())), &mut out);
        }
        let Some((_, timings)) = done else { return (out.into(), false) };
        if self.include_usage {
            let mut c = self.chunk(String::new(), None, None);
            c.choices.clear();
            c.usage = Some(usage(timings.prompt_tokens, self.generated, &timings));
            event(&c, &mut out);
        }
        out.extend_from_slice(b"data: [DONE]\n\n");
        (out.into(), true)
    }

    fn error(&mut self, _: &Generation, e: &ApiError) -> Bytes {
        let mut out = Vec::new();
        event(&e.openai_json(), &mut out);
        out.into()
    }
}

/// List the models that can be served.
#[utoipa::path(get, path = "/v1/models", responses((status = 200, body = ModelList)))]
pub async fn models(State(st): State<SharedState>) -> Json<ModelList> {
    let data = st
        .pool
        .resolver()
        .list()
        .into_iter()
        .map(|m| ModelObject { id: m.name, object: "model", created: m.modified, owned_by: "kiln", parent: None })
        .chain(crate::lora::model_objects(&st).into_iter().map(|(id, parent, created)| ModelObject {
            id,
            object: "model",
            created,
            owned_by: "kiln",
            parent: Some(parent),
        }))
        .collect();
    Json(ModelList { object: "list", data })
}
