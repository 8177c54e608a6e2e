//! What callers submit.

use kiln_core::{SamplingParams, StopParams, TokenId};
use serde::{Deserialize, Serialize};

/// One chat message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant` (or `tool`).
    pub role: String,
    /// The text.
    pub content: String,
}

impl ChatMessage {
    /// A message with the given role and text.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self { role: role.into(), content: content.into() }
    }
}

/// The input of a request.
#[derive(Debug, Clone, PartialEq)]
pub enum Prompt {
    /// Raw text, tokenized as is (BOS added per the model's settings).
    Text(String),
    /// A conversation, rendered with the model's chat template and an
    /// assistant generation prompt.
    Messages(Vec<ChatMessage>),
    /// Token ids, used as is.
    Tokens(Vec<TokenId>),
}

/// How to generate: what a request asks for besides its prompt. This is
/// all the engine needs with token ids ([`crate::EngineHandle::submit_tokens`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Params {
    /// Sampling.
    pub sampling: SamplingParams,
    /// Stop conditions.
    pub stop: StopParams,
    /// The prompt is a chat conversation rendered with the model's template
    /// (true for [`Prompt::Messages`] through [`Request::new`]; set it when
    /// submitting tokens rendered from messages). When such a request's
    /// answer ends, after its last event is sent, the engine computes the
    /// template's opening of the next user turn, so that a follow-up which
    /// repeats the conversation finds it in the prefix cache
    /// ([`crate::EngineConfig::next_turn_prefill`]).
    pub chat_turn: bool,
}

/// A generation request: a prompt and how to continue it.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The input.
    pub prompt: Prompt,
    /// Sampling, stop conditions, chat turn.
    pub params: Params,
}

impl Request {
    /// A request with default (greedy) sampling and stop settings; a chat
    /// turn when the prompt is [`Prompt::Messages`].
    pub fn new(prompt: Prompt) -> Self {
        let chat_turn = matches!(prompt, Prompt::Messages(_));
        Self { prompt, params: Params { chat_turn, ..Params::default() } }
    }
}
