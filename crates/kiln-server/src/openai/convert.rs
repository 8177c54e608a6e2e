//! OpenAI bodies → [`ValidRequest`], and engine output → OpenAI bodies.

use kiln_core::{Sampled, TokenId};
use kiln_engine::{ChatMessage, Prompt};

use super::types::*;
use crate::error::ApiError;
use crate::generate::TokenTexts;
use crate::knobs::Dialect;
use crate::validate::{role, valid_request, Limits, Unchecked, ValidRequest};

fn content_text(c: Option<MessageContent>, i: usize) -> Result<String, ApiError> {
    match c {
        None => Ok(String::new()),
        Some(MessageContent::Text(s)) => Ok(s),
        Some(MessageContent::Parts(parts)) => {
            let mut out = String::new();
            for (j, p) in parts.into_iter().enumerate() {
                match (p.kind.as_str(), p.text) {
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
    let messages = r
        .messages
        .into_iter()
        .enumerate()
        .map(|(i, m)| Ok(ChatMessage::new(role(&m.role, i)?, content_text(m.content, i)?)))
        .collect::<Result<Vec<_>, ApiError>>()?;
    let body = Unchecked {
        model: r.model,
        prompt: Prompt::Messages(messages),
        knobs: r.knobs,
        stream: r.stream,
        include_usage: r.stream_options.is_some_and(|o| o.include_usage),
        keep_alive: r.keep_alive,
        chat_turn: true,
    };
    valid_request(Dialect::Chat, body, limits)
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
    let body = Unchecked {
        model: r.model,
        prompt,
        knobs: r.knobs,
        stream: r.stream,
        include_usage: r.stream_options.is_some_and(|o| o.include_usage),
        keep_alive: r.keep_alive,
        chat_turn: false,
    };
    valid_request(Dialect::Completions, body, limits)
}

/// Usage from engine timings.
pub fn usage(prompt_tokens: usize, completion_tokens: usize, cached_tokens: usize) -> Usage {
    Usage {
        prompt_tokens,
        completion_tokens,
        total_tokens: prompt_tokens + completion_tokens,
        prompt_tokens_details: PromptTokensDetails { cached_tokens },
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
