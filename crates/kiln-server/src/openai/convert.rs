//! OpenAI bodies → [`ValidRequest`], and engine output → OpenAI bodies.

use kiln_core::{Sampled, TokenId};
use kiln_engine::{segment_marker, ChatMessage, ChatPrompt, Prompt, SegmentedPrompt};
use kiln_grammar::Constraint;

use super::types::*;
use crate::answer::{self, Reasoning, Shape, ToolChoice};
use crate::error::ApiError;
use crate::generate::TokenTexts;
use crate::knobs::Dialect;
use crate::validate::{role, valid_request, Limits, Unchecked, ValidRequest};

/// A message's text; a part marked `"cache": "segment"` goes to
/// `segments` and its marker into the text.
fn content_text(c: Option<MessageContent>, i: usize, segments: &mut Vec<String>) -> Result<String, ApiError> {
    match c {
        None => Ok(String::new()),
        Some(MessageContent::Text(s)) => Ok(s),
        Some(MessageContent::Parts(parts)) => {
            let mut out = String::new();
            for (j, p) in parts.into_iter().enumerate() {
                let segment = match p.cache.as_deref() {
                    None => false,
                    Some("segment") => true,
                    Some(other) => {
                        return Err(ApiError::bad_param(
                            &format!("messages[{i}].content[{j}].cache"),
                            format!("`cache` must be \"segment\", got {other:?}"),
                        ))
                    }
                };
                match (p.kind.as_str(), p.text) {
                    ("text", Some(t)) if segment => {
                        if t.is_empty() {
                            return Err(ApiError::bad_param(
                                &format!("messages[{i}].content[{j}].text"),
                                "a segment must not be empty",
                            ));
                        }
                        out.push_str(&segment_marker(segments.len()));
                        segments.push(t);
                    }
                    ("text", Some(t)) => out.push_str(&t),
                    ("text", None) => {
                        return Err(ApiError::bad_param(
                            &format!("messages[{i}].content[{j}].text"),
                            "a text part needs `text`",
                        ))
                    }
                    (other, _) => {
                        return Err(ApiError::bad_param(
                            &format!("messages[{i}].content[{j}].type"),
                            format!("only `text` content parts are supported, got {other:?}"),
                        ))
                    }
                }
            }
            Ok(out)
        }
    }
}

/// Checks a chat request.
pub fn chat_request(r: ChatRequest, limits: &Limits) -> Result<ValidRequest, ApiError> {
    if r.messages.is_empty() {
        return Err(ApiError::bad_param("messages", "`messages` must not be empty"));
    }
    if r.messages.len() > limits.max_messages {
        return Err(ApiError::bad_param("messages", format!("at most {} messages", limits.max_messages)));
    }
    info_fields(&r.info)?;
    let mut segments = Vec::new();
    let messages =
        r.messages.into_iter().enumerate().map(|(i, m)| message(m, i, &mut segments)).collect::<Result<Vec<_>, _>>()?;
    let tools = answer::tools(r.tools)?;
    let choice = tool_choice(r.tool_choice, !tools.is_empty())?;
    answer::check_tools(&tools, &choice)?;
    let format = response_format(r.response_format)?;
    if format.is_some() && matches!(choice, ToolChoice::Required | ToolChoice::Named(_)) {
        return Err(ApiError::bad_param(
            "response_format",
            "`response_format` and a required `tool_choice` cannot both constrain one answer",
        ));
    }
    let mut vars = r.chat_template_kwargs.unwrap_or_default();
    if let Some(effort) = r.reasoning_effort {
        if !["minimal", "low", "medium", "high"].contains(&effort.as_str()) {
            return Err(ApiError::bad_param(
                "reasoning_effort",
                format!("`reasoning_effort` must be minimal, low, medium or high, got {effort:?}"),
            ));
        }
        vars.insert("reasoning_effort".into(), effort.into());
    }
    let shape = Shape {
        tools,
        choice,
        parallel: r.parallel_tool_calls.unwrap_or(true),
        format,
        reasoning: Reasoning::Return,
        chat: true,
    };
    let body = Unchecked {
        model: r.model,
        prompt: segmented(segments, Prompt::Chat(ChatPrompt { messages, tools: None, vars })),
        knobs: r.knobs,
        stream: r.stream,
        include_usage: r.stream_options.is_some_and(|o| o.include_usage),
        keep_alive: r.keep_alive,
        chat_turn: true,
        shape,
        lora: r.lora,
    };
    valid_request(Dialect::Chat, body, limits)
}

/// One message sent, as the template reads it.
fn message(m: ChatMessageIn, i: usize, segments: &mut Vec<String>) -> Result<ChatMessage, ApiError> {
    if let Some((k, _)) = m.other.iter().find(|(_, v)| !v.is_null()) {
        let field = format!("messages[{i}].{k}");
        return Err(ApiError::bad_param(&field, format!("`{field}` is not supported")));
    }
    let mut out = ChatMessage::new(role(&m.role, i)?, content_text(m.content, i, segments)?);
    out.name = m.name;
    out.tool_call_id = m.tool_call_id;
    out.reasoning_content = m.reasoning_content;
    for (j, c) in m.tool_calls.unwrap_or_default().into_iter().enumerate() {
        let field = format!("messages[{i}].tool_calls[{j}].function.arguments");
        let id = c.id.unwrap_or_else(answer::call_id);
        out.tool_calls.push(answer::template_call(id, c.function.name, c.function.arguments, &field)?);
    }
    Ok(out)
}

/// `tool_choice`; left out: `auto` with tools, `none` without.
fn tool_choice(c: Option<ToolChoiceIn>, have_tools: bool) -> Result<ToolChoice, ApiError> {
    Ok(match c {
        None if have_tools => ToolChoice::Auto,
        None => ToolChoice::None,
        Some(ToolChoiceIn::Mode(m)) => ToolChoice::from_mode(&m)?,
        Some(ToolChoiceIn::Named(n)) if n.kind == "function" => ToolChoice::Named(n.function.name),
        Some(ToolChoiceIn::Named(n)) => {
            return Err(ApiError::bad_param("tool_choice.type", format!("must be \"function\", got {:?}", n.kind)))
        }
    })
}

/// `response_format` as a constraint (`text`: none).
fn response_format(f: Option<ResponseFormat>) -> Result<Option<Constraint>, ApiError> {
    let Some(f) = f else { return Ok(None) };
    match f.kind.as_str() {
        "text" => Ok(None),
        "json_object" => Ok(Some(Constraint::JsonObject)),
        "json_schema" => {
            let s = f.json_schema.ok_or_else(|| {
                ApiError::bad_param("response_format.json_schema", "`json_schema` is required with type json_schema")
            })?;
            match s.schema {
                None => Ok(Some(Constraint::JsonObject)),
                Some(schema @ serde_json::Value::Object(_)) => Ok(Some(Constraint::JsonSchema(schema))),
                Some(_) => Err(ApiError::bad_param(
                    "response_format.json_schema.schema",
                    "`response_format.json_schema.schema` must be a JSON schema object",
                )),
            }
        }
        "grammar" => match f.grammar {
            Some(g) => Ok(Some(Constraint::Lark(g))),
            None => Err(ApiError::bad_param("response_format.grammar", "`grammar` is required with type grammar")),
        },
        other => Err(ApiError::bad_param(
            "response_format.type",
            format!("`response_format.type` must be text, json_object, json_schema or grammar, got {other:?}"),
        )),
    }
}

/// Informational fields: accepted when they ask for nothing kiln would
/// have to do.
fn info_fields(f: &InfoFields) -> Result<(), ApiError> {
    if f.store == Some(true) {
        return Err(ApiError::bad_param("store", "`store` is not supported: kiln keeps no completions"));
    }
    if let Some(t) = f.service_tier.as_deref().filter(|t| !["auto", "default"].contains(t)) {
        return Err(ApiError::bad_param("service_tier", format!("`service_tier` must be auto or default, got {t:?}")));
    }
    if f.modalities.as_ref().is_some_and(|m| m.iter().any(|m| m != "text")) {
        return Err(ApiError::bad_param("modalities", "only the `text` modality is supported"));
    }
    Ok(())
}

/// Checks a completion request.
pub fn completion_request(r: CompletionRequest, limits: &Limits) -> Result<ValidRequest, ApiError> {
    let one = |n: usize| {
        if n == 1 {
            Ok(())
        } else {
            Err(ApiError::bad_param("prompt", format!("only one prompt per request is supported, got {n}")))
        }
    };
    let prompt = match r.prompt {
        CompletionPrompt::Text(s) => Prompt::Text(s),
        CompletionPrompt::Tokens(t) => Prompt::Tokens(t),
        CompletionPrompt::Texts(mut v) => {
            one(v.len())?;
            Prompt::Text(v.pop().unwrap_or_default())
        }
        CompletionPrompt::TokenLists(mut v) => {
            one(v.len())?;
            Prompt::Tokens(v.pop().unwrap_or_default())
        }
    };
    if matches!(&prompt, Prompt::Text(s) if s.is_empty()) || matches!(&prompt, Prompt::Tokens(t) if t.is_empty()) {
        return Err(ApiError::bad_param("prompt", "`prompt` must not be empty"));
    }
    info_fields(&r.info)?;
    let segments = r.segments.unwrap_or_default();
    if let Some(i) = segments.iter().position(String::is_empty) {
        return Err(ApiError::bad_param(&format!("segments[{i}]"), "a segment must not be empty"));
    }
    let prompt = segmented(segments, prompt);
    let format = match (response_format(r.response_format)?, r.grammar) {
        (Some(_), Some(_)) => {
            return Err(ApiError::bad_param("grammar", "send `grammar` or `response_format`, not both"));
        }
        (f, g) => f.or(g.map(Constraint::Lark)),
    };
    let body = Unchecked {
        model: r.model,
        prompt,
        knobs: r.knobs,
        stream: r.stream,
        include_usage: r.stream_options.is_some_and(|o| o.include_usage),
        keep_alive: r.keep_alive,
        chat_turn: false,
        shape: Shape { format, ..Shape::default() },
        lora: r.lora,
    };
    valid_request(Dialect::Completions, body, limits)
}

/// `prompt` with `segments` (itself when there are none).
fn segmented(segments: Vec<String>, prompt: Prompt) -> Prompt {
    if segments.is_empty() {
        prompt
    } else {
        Prompt::Segmented(SegmentedPrompt { segments, prompt: Box::new(prompt) })
    }
}

/// Usage from engine timings.
pub fn usage(prompt_tokens: usize, completion_tokens: usize, t: &kiln_core::Timings) -> Usage {
    let shifted = t.dropped_messages + t.context_shifts > 0;
    Usage {
        prompt_tokens,
        completion_tokens,
        total_tokens: prompt_tokens + completion_tokens,
        prompt_tokens_details: PromptTokensDetails { cached_tokens: t.cached_tokens },
        context_shift: shifted
            .then_some(ContextShiftUsage { dropped_messages: t.dropped_messages, shifts: t.context_shifts }),
    }
}

/// Chat logprob entries for tokens.
pub fn chat_logprobs<'a>(gen: &TokenTexts, toks: impl Iterator<Item = (TokenId, &'a Sampled)>) -> Vec<TokenLogprobOut> {
    toks.map(|(id, s)| {
        let (token, bytes) = gen.token_text(id);
        let top_logprobs = s
            .top_logprobs
            .iter()
            .map(|t| {
                let (token, bytes) = gen.token_text(t.token);
                TopLogprob { token, logprob: t.logprob, bytes }
            })
            .collect();
        TokenLogprobOut { token, logprob: s.logprob, bytes, top_logprobs }
    })
    .collect()
}

/// Legacy completion logprobs; `offset` is the text length before these tokens.
pub fn completion_logprobs<'a>(
    gen: &TokenTexts,
    toks: impl Iterator<Item = (TokenId, &'a Sampled)>,
    mut offset: usize,
) -> CompletionLogprobs {
    let mut out = CompletionLogprobs::default();
    for (id, s) in toks {
        let (token, _) = gen.token_text(id);
        out.text_offset.push(offset);
        offset += token.len();
        out.tokens.push(token);
        out.token_logprobs.push(s.logprob);
        out.top_logprobs.push(s.top_logprobs.iter().map(|t| (gen.token_text(t.token).0, t.logprob)).collect());
    }
    out
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// A fresh request id with `prefix`.
pub fn new_id(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    format!("{prefix}-{:x}{:08x}", NEXT.fetch_add(1, Ordering::Relaxed), nanos)
}
