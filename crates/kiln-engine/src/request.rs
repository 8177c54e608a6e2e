//! What callers submit.

use kiln_core::{SamplingParams, StopParams, TokenId};
use serde::{Deserialize, Serialize};

pub use kiln_tokenize::{ChatMessage, GoChatTemplate, TemplateFunctionCall, TemplateToolCall};

/// A conversation to render with the model's chat template: the messages
/// and what the template may read besides them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChatPrompt {
    /// The conversation.
    pub messages: Vec<ChatMessage>,
    /// Tool definitions, as the template reads them (`tools`: OpenAI's
    /// `[{"type": "function", "function": {...}}]`).
    pub tools: Option<serde_json::Value>,
    /// More template variables (`enable_thinking`, `reasoning_effort`, ...).
    pub vars: serde_json::Map<String, serde_json::Value>,
}

impl From<Vec<ChatMessage>> for ChatPrompt {
    fn from(messages: Vec<ChatMessage>) -> Self {
        Self { messages, ..Self::default() }
    }
}

/// The input of a request.
#[derive(Debug, Clone, PartialEq)]
pub enum Prompt {
    /// Raw text, tokenized as is (BOS added per the model's settings).
    Text(String),
    /// A conversation, rendered with the model's chat template and an
    /// assistant generation prompt.
    Chat(ChatPrompt),
    /// Token ids, used as is.
    Tokens(Vec<TokenId>),
    /// A prompt with marked segments (documents, tool descriptions, files):
    /// each is tokenized alone, its KV computed once alone and reused
    /// wherever it appears (docs/segment-cache.md).
    Segmented(SegmentedPrompt),
}

/// [`Prompt::Segmented`]: the segments' texts and the prompt around them.
#[derive(Debug, Clone, PartialEq)]
pub struct SegmentedPrompt {
    /// The segments' texts, in the order they are numbered.
    pub segments: Vec<String>,
    /// Where they go: before the text or tokens of a [`Prompt::Text`] or
    /// [`Prompt::Tokens`] (after BOS), in order; in a [`Prompt::Chat`],
    /// where the messages' content holds [`segment_marker`]`(i)` (each
    /// segment exactly once).
    pub prompt: Box<Prompt>,
}

/// The text that stands for segment `i` in a [`SegmentedPrompt`]'s chat
/// messages: the chat template renders it like any text, and the rendered
/// prompt is tokenized around it, with the segment's own tokens in its place.
pub fn segment_marker(i: usize) -> String {
    format!("{SEGMENT_OPEN}{i}{SEGMENT_CLOSE}")
}

/// The start of a [`segment_marker`] (Unicode interlinear annotation marks,
/// which no tokenizer reads as text of their own here).
pub(crate) const SEGMENT_OPEN: &str = "\u{FFF9}kiln-segment-";
/// The end of a [`segment_marker`].
pub(crate) const SEGMENT_CLOSE: &str = "\u{FFFB}";

/// Where a segment's tokens are in a prompt's token ids.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentSpan {
    /// First token.
    pub start: usize,
    /// Tokens.
    pub len: usize,
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
    /// (true for [`Prompt::Chat`] through [`Request::new`]; set it when
    /// submitting tokens rendered from messages). When such a request's
    /// answer ends, after its last event is sent, the engine computes the
    /// template's opening of the next user turn, so that a follow-up which
    /// repeats the conversation finds it in the prefix cache
    /// ([`crate::EngineConfig::next_turn_prefill`]).
    pub chat_turn: bool,
    /// What the output must match (JSON, a JSON schema, a grammar),
    /// enforced token by token (docs/structured-output.md).
    pub constraint: Option<kiln_grammar::Constraint>,
    /// `Some(false)`: no speculative decoding for this request, even when
    /// the engine has it on ([`crate::EngineConfig::spec`]); `None` or
    /// `Some(true)`: as the engine is configured. Speculation never changes
    /// the output (crate docs of `spec`), only how fast it comes.
    #[serde(default)]
    pub speculative: Option<bool>,
    /// The LoRA adapter to run with (registered by name); `None`: the base
    /// model.
    #[serde(default)]
    pub lora: Option<crate::LoraRequest>,
    /// The marked segments of the prompt's tokens (in order, not
    /// overlapping): each one's KV comes from the segment cache when it is
    /// there (docs/segment-cache.md). [`crate::EngineHandle::submit`] fills
    /// it from a [`Prompt::Segmented`].
    #[serde(default)]
    pub segments: Vec<SegmentSpan>,
    /// Leading tokens of each segment computed in the request rather than
    /// copied (`None`: the engine's [`crate::EngineConfig::segment_recompute`]).
    #[serde(default)]
    pub segment_recompute: Option<usize>,
    /// Most tokens of the prompt's head (before its first segment) each
    /// segment is computed after (`None`: the engine's
    /// [`crate::EngineConfig::segment_context`]).
    #[serde(default)]
    pub segment_context: Option<usize>,
    /// Tokens a context shift keeps at the head of the sequence (Ollama's
    /// `num_keep`; `None`: a chat's system prompt, at least 4 tokens). With
    /// the engine's context shift ([`crate::EngineConfig::context_shift`])
    /// at most the context less 4 tokens, else the request is refused;
    /// without it nothing is ever dropped.
    #[serde(default)]
    pub num_keep: Option<usize>,
    /// Oldest messages a context shift dropped from a chat that did not fit
    /// the context ([`crate::EngineHandle::fit_chat`] sets it; reported in
    /// [`kiln_core::Timings::dropped_messages`]).
    #[serde(default)]
    pub dropped_messages: usize,
}

impl Prompt {
    /// A conversation of `messages` with no tools or extra variables.
    pub fn chat(messages: Vec<ChatMessage>) -> Self {
        Self::Chat(messages.into())
    }
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
    /// turn when the prompt is [`Prompt::Chat`].
    pub fn new(prompt: Prompt) -> Self {
        let chat_turn = matches!(prompt, Prompt::Chat(_));
        Self { prompt, params: Params { chat_turn, ..Params::default() } }
    }
}
