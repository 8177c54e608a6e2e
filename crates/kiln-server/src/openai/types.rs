//! OpenAI request and response bodies, as the official clients send and
//! expect them. A request's sampling and stop knobs are declared in
//! [`crate::knobs`]; its body keeps them as sent. Unknown fields are
//! ignored, as OpenAI does.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::knobs::RawKnobs;

/// One part of a message's content.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct ContentPart {
    /// `text` (other part types are refused).
    #[serde(rename = "type")]
    pub kind: String,
    /// The text of a `text` part.
    #[serde(default)]
    pub text: Option<String>,
}

/// Message content: a string or a list of parts.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum MessageContent {
    /// Plain text.
    Text(String),
    /// Content parts (only `text` parts are supported).
    Parts(Vec<ContentPart>),
}

/// One chat message.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct ChatMessageIn {
    /// `system`, `developer`, `user`, `assistant` or `tool`.
    pub role: String,
    /// The content (may be null for an assistant message with tool calls).
    #[serde(default)]
    pub content: Option<MessageContent>,
}

/// `stream_options`.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
pub struct StreamOptions {
    /// Send a last chunk with `usage`.
    #[serde(default)]
    pub include_usage: bool,
}

/// `POST /v1/chat/completions` body.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct ChatRequest {
    /// Model name (`smollm2`, `hf:org/repo:file.gguf`).
    #[schema(min_length = 1)]
    pub model: String,
    /// The conversation.
    #[schema(min_items = 1)]
    pub messages: Vec<ChatMessageIn>,
    /// Stream chunks as server-sent events (`null` = false).
    #[serde(default)]
    pub stream: Option<bool>,
    /// Streaming options.
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    /// kiln extension: how long the model stays loaded after this request (`5m`, `30s`, `-1`).
    #[schema(value_type = Option<String>)]
    pub keep_alive: Option<serde_json::Value>,
    /// The sampling and stop knobs, in the chat spelling ([`crate::knobs`]).
    #[serde(flatten)]
    #[schema(ignore)]
    pub knobs: RawKnobs,
}

/// A prompt: text, texts, token ids or lists of token ids.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum CompletionPrompt {
    /// One text.
    Text(String),
    /// Token ids.
    Tokens(Vec<u32>),
    /// A batch of texts (only one supported).
    Texts(Vec<String>),
    /// A batch of token lists (only one supported).
    TokenLists(Vec<Vec<u32>>),
}

/// `POST /v1/completions` body.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct CompletionRequest {
    /// Model name.
    #[schema(min_length = 1)]
    pub model: String,
    /// The prompt.
    pub prompt: CompletionPrompt,
    /// Stream chunks as server-sent events (`null` = false).
    #[serde(default)]
    pub stream: Option<bool>,
    /// Streaming options.
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    /// kiln extension: how long the model stays loaded after this request.
    #[schema(value_type = Option<String>)]
    pub keep_alive: Option<serde_json::Value>,
    /// The sampling and stop knobs, in the completions spelling ([`crate::knobs`]).
    #[serde(flatten)]
    #[schema(ignore)]
    pub knobs: RawKnobs,
}

/// `usage.prompt_tokens_details`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PromptTokensDetails {
    /// Prompt tokens served from the prefix cache.
    pub cached_tokens: usize,
}

/// Token counts.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Usage {
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// Generated tokens.
    pub completion_tokens: usize,
    /// Sum.
    pub total_tokens: usize,
    /// Cache details.
    pub prompt_tokens_details: PromptTokensDetails,
}

/// One alternative token.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TopLogprob {
    /// Token text.
    pub token: String,
    /// Natural-log probability.
    pub logprob: f32,
    /// UTF-8 bytes of the token.
    pub bytes: Vec<u8>,
}

/// Log-probability of one generated token.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TokenLogprobOut {
    /// Token text.
    pub token: String,
    /// Natural-log probability.
    pub logprob: f32,
    /// Bytes of the token.
    pub bytes: Vec<u8>,
    /// Most likely alternatives.
    pub top_logprobs: Vec<TopLogprob>,
}

/// `choices[].logprobs` of a chat completion.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ChoiceLogprobs {
    /// One entry per generated token.
    pub content: Vec<TokenLogprobOut>,
}

/// The assistant's message.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct AssistantMessage {
    /// Always `assistant`.
    pub role: &'static str,
    /// The text.
    pub content: String,
}

/// One choice of a chat completion.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ChatChoice {
    /// Always 0.
    pub index: usize,
    /// The message.
    pub message: AssistantMessage,
    /// Log-probabilities, when asked for.
    pub logprobs: Option<ChoiceLogprobs>,
    /// `stop`, `length` or `cancelled`.
    pub finish_reason: &'static str,
}

/// `POST /v1/chat/completions` answer.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ChatResponse {
    /// Request id.
    pub id: String,
    /// `chat.completion`.
    pub object: &'static str,
    /// Unix seconds.
    pub created: u64,
    /// Model name.
    #[schema(min_length = 1)]
    pub model: String,
    /// Exactly one.
    pub choices: Vec<ChatChoice>,
    /// Token counts.
    pub usage: Usage,
}

/// A streamed delta.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Delta {
    /// `assistant` on the first chunk.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
    /// New text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
}

/// One choice of a chunk.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ChunkChoice {
    /// Always 0.
    pub index: usize,
    /// The new text.
    pub delta: Delta,
    /// Log-probabilities of the chunk's tokens.
    pub logprobs: Option<ChoiceLogprobs>,
    /// Set on the last chunk.
    pub finish_reason: Option<&'static str>,
}

/// One `chat.completion.chunk` event.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ChatChunk {
    /// Request id (same in every chunk).
    pub id: String,
    /// `chat.completion.chunk`.
    pub object: &'static str,
    /// Unix seconds.
    pub created: u64,
    /// Model name.
    #[schema(min_length = 1)]
    pub model: String,
    /// Zero or one choice (zero in the usage chunk).
    pub choices: Vec<ChunkChoice>,
    /// Present (null or counts) when `include_usage` was asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Option<Usage>>,
}

/// Legacy completion logprobs.
#[derive(Debug, Clone, Default, Serialize, ToSchema)]
pub struct CompletionLogprobs {
    /// Token texts.
    pub tokens: Vec<String>,
    /// Their log-probabilities.
    pub token_logprobs: Vec<f32>,
    /// Alternatives per position.
    pub top_logprobs: Vec<BTreeMap<String, f32>>,
    /// Character offsets of each token in the text.
    pub text_offset: Vec<usize>,
}

/// One choice of a completion.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CompletionChoice {
    /// The generated text.
    pub text: String,
    /// Always 0.
    pub index: usize,
    /// When asked for.
    pub logprobs: Option<CompletionLogprobs>,
    /// `stop` or `length`, null in intermediate chunks.
    pub finish_reason: Option<&'static str>,
}

/// `POST /v1/completions` answer (and each streamed chunk).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CompletionResponse {
    /// Request id.
    pub id: String,
    /// `text_completion`.
    pub object: &'static str,
    /// Unix seconds.
    pub created: u64,
    /// Model name.
    #[schema(min_length = 1)]
    pub model: String,
    /// Exactly one (none in the usage chunk).
    pub choices: Vec<CompletionChoice>,
    /// Token counts (in streams: only in the usage chunk).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

/// One model in `GET /v1/models`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ModelObject {
    /// Its name.
    pub id: String,
    /// `model`.
    pub object: &'static str,
    /// Unix seconds (file time).
    pub created: u64,
    /// `kiln`.
    pub owned_by: &'static str,
}

/// `GET /v1/models` answer.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ModelList {
    /// `list`.
    pub object: &'static str,
    /// The models.
    pub data: Vec<ModelObject>,
}

/// OpenAI's error object.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ErrorBody {
    /// The error.
    #[schema(value_type = Object)]
    pub error: serde_json::Value,
}
