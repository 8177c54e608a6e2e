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
    let valid = chat_request(parse_json(&bytes)?, &st.limits)?;
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
        };
        return Ok(sse(stream_body(gen, r)));
    }
    let model = gen.model_name().to_string();
    let lp_gen = want_lp.then(|| gen.token_text_source());
    let c = gen.collect().await?;
    let logprobs = lp_gen.map(|g| ChoiceLogprobs {
        content: chat_logprobs(&g, c.tokens.iter().filter_map(|(id, s)| Some((*id, s.as_ref()?)))),
    });
    let resp = ChatResponse {
        id,
        object: "chat.completion",
        created: unix_now(),
        model,
        choices: vec![ChatChoice {
            index: 0,
            message: AssistantMessage { role: "assistant", content: c.text },
            logprobs,
            finish_reason: c.reason.as_openai(),
        }],
        usage: usage(c.timings.prompt_tokens, c.tokens.len(), c.timings.cached_tokens),
    };
    Ok(Json(resp).into_response())
}

struct ChatSse {
    id: String,
    created: u64,
    model: String,
    include_usage: bool,
    want_lp: bool,
    generated: usize,
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
}

impl Render for ChatSse {
    fn head(&mut self, _: &Generation) -> Bytes {
        let mut out = Vec::new();
        event(&self.chunk(Delta { role: Some("assistant"), content: Some(String::new()) }, None, None), &mut out);
        out.into()
    }

    fn batch(&mut self, gen: &Generation, events: Vec<StreamEvent>) -> (Bytes, bool) {
        let (mut text, mut lps, mut out) = (String::new(), Vec::new(), Vec::new());
        for ev in events {
            match ev {
                StreamEvent::Token { token, text: t, logprob } => {
                    self.generated += 1;
                    text.push_str(&t);
                    if let (true, Some(s)) = (self.want_lp, logprob) {
                        lps.extend(chat_logprobs(&gen.token_text_source(), std::iter::once((token, &s))));
                    }
                }
                StreamEvent::Done { reason, text: t, timings } => {
                    text.push_str(&t);
                    self.flush(&mut text, &mut lps, &mut out);
                    event(&self.chunk(Delta { role: None, content: None }, None, Some(reason.as_openai())), &mut out);
                    if self.include_usage {
                        let mut c = self.chunk(Delta { role: None, content: None }, None, None);
                        c.choices.clear();
                        c.usage = Some(Some(usage(timings.prompt_tokens, self.generated, timings.cached_tokens)));
                        event(&c, &mut out);
                    }
                    out.extend_from_slice(b"data: [DONE]\n\n");
                    return (out.into(), true);
                }
                StreamEvent::Error(e) => {
                    self.flush(&mut text, &mut lps, &mut out);
                    event(&ApiError::Internal(e).openai_json(), &mut out);
                    return (out.into(), true);
                }
            }
        }
        self.flush(&mut text, &mut lps, &mut out);
        (out.into(), false)
    }

    fn error(&mut self, _: &Generation, e: &ApiError) -> Bytes {
        let mut out = Vec::new();
        event(&e.openai_json(), &mut out);
        out.into()
    }
}

impl ChatSse {
    fn flush(&self, text: &mut String, lps: &mut Vec<TokenLogprobOut>, out: &mut Vec<u8>) {
        if text.is_empty() && lps.is_empty() {
            return;
        }
        let logprobs = (!lps.is_empty()).then(|| ChoiceLogprobs { content: std::mem::take(lps) });
        event(&self.chunk(Delta { role: None, content: Some(std::mem::take(text)) }, logprobs, None), out);
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
    let valid = completion_request(parse_json(&bytes)?, &st.limits)?;
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
        usage: Some(usage(c.timings.prompt_tokens, c.tokens.len(), c.timings.cached_tokens)),
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
            c.usage = Some(usage(timings.prompt_tokens, self.generated, timings.cached_tokens));
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
        .map(|m| ModelObject { id: m.name, object: "model", created: m.modified, owned_by: "kiln" })
        .collect();
    Json(ModelList { object: "list", data })
}
