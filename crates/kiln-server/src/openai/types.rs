//! OpenAI request and response bodies, as the official clients send and
//! expect them. A request's sampling and stop knobs are declared in
//! [`crate::knobs`]; its body keeps them as sent. A field kiln does not
//! know is a 400 that names it (never silently dropped); docs/server.md
//! lists the fields of each route.

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
    /// kiln extension: `"segment"` marks the text as a segment, whose KV is
    /// computed once and reused wherever it appears (docs/segment-cache.md).
    #[serde(default)]
    pub cache: Option<String>,
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
    /// A participant's name (or the tool's, on a `tool` message).
    #[serde(default)]
    pub name: Option<String>,
    /// The calls an assistant message made.
    #[serde(default)]
    pub tool_calls: Option<Vec<ToolCallIn>>,
    /// The call a `tool` message answers.
    #[serde(default)]
    pub tool_call_id: Option<String>,
    /// An earlier answer's reasoning, sent back (passed to the template).
    #[serde(default)]
    pub reasoning_content: Option<String>,
    /// Other fields: `refusal`, `audio`, `function_call` and the like may be
    /// null (clients echo answers back with them); anything else is refused.
    #[serde(flatten)]
    #[schema(ignore)]
    pub other: serde_json::Map<String, serde_json::Value>,
}

/// A call in an assistant message (as sent back by a client).
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct ToolCallIn {
    /// The call's id.
    #[serde(default)]
    pub id: Option<String>,
    /// `function`.
    #[serde(rename = "type", default)]
    pub kind: Option<String>,
    /// The function and its arguments.
    pub function: FunctionCallIn,
}

/// A function call: its name and its arguments as JSON text.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct FunctionCallIn {
    /// The function's name.
    pub name: String,
    /// The arguments, JSON text of an object (an object is accepted too).
    #[schema(value_type = String)]
    pub arguments: serde_json::Value,
}

/// A tool the model may call (`tools[i]`).
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct ToolIn {
    /// `function` (the only kind).
    #[serde(rename = "type")]
    pub kind: String,
    /// The function.
    pub function: FunctionIn,
}

/// A function tool's declaration.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct FunctionIn {
    /// Its name (`[A-Za-z0-9_.-]`, at most 64 characters).
    pub name: String,
    /// What it does.
    #[serde(default)]
    pub description: Option<String>,
    /// Its arguments' JSON schema (an object schema; default: any object).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub parameters: Option<serde_json::Value>,
    /// Enforce the schema (kiln enforces it whenever a call is required).
    #[serde(default)]
    pub strict: Option<bool>,
}

/// `tool_choice`: `none`, `auto`, `required`, or
/// `{"type": "function", "function": {"name": ...}}`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum ToolChoiceIn {
    /// `none`, `auto` or `required`.
    Mode(String),
    /// One named function.
    Named(NamedToolChoice),
}

/// A named `tool_choice`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct NamedToolChoice {
    /// `function`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The function to call.
    pub function: NamedFunction,
}

/// The function of a named `tool_choice`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct NamedFunction {
    /// Its name.
    pub name: String,
}

/// `response_format`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct ResponseFormat {
    /// `text`, `json_object`, `json_schema` or `grammar`.
    #[serde(rename = "type")]
    pub kind: String,
    /// For `json_schema`.
    #[serde(default)]
    pub json_schema: Option<JsonSchemaFormat>,
    /// For `grammar`: a Lark grammar (llguidance's dialect).
    #[serde(default)]
    pub grammar: Option<String>,
}

/// `response_format.json_schema`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct JsonSchemaFormat {
    /// The schema's name.
    pub name: String,
    /// What it is for.
    #[serde(default)]
    pub description: Option<String>,
    /// The JSON schema (default: any JSON object).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub schema: Option<serde_json::Value>,
    /// Enforce the schema (kiln always does).
    #[serde(default)]
    pub strict: Option<bool>,
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
    /// Tools the model may call.
    #[serde(default)]
    pub tools: Option<Vec<ToolIn>>,
    /// Whether and which tool to call (default: `auto` with tools, `none` without).
    #[serde(default)]
    pub tool_choice: Option<ToolChoiceIn>,
    /// Allow several calls in one answer (default true).
    #[serde(default)]
    pub parallel_tool_calls: Option<bool>,
    /// Constrain the answer: JSON, JSON of a schema, or a grammar.
    #[serde(default)]
    pub response_format: Option<ResponseFormat>,
    /// `low`, `medium` or `high`: passed to the chat template (gpt-oss).
    #[serde(default)]
    pub reasoning_effort: Option<String>,
    /// Variables for the chat template (`{"enable_thinking": false}`).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub chat_template_kwargs: Option<serde_json::Map<String, serde_json::Value>>,
    /// llama-server's adapters for this request: `[{"name" | "id", "scale"}]`
    /// (at most one with a non-zero scale; see docs/lora.md).
    #[serde(default)]
    pub lora: Option<Vec<crate::lora::LoraPick>>,
    /// Informational fields: `user` and `metadata` are accepted (logged nowhere).
    #[serde(flatten)]
    #[schema(ignore)]
    pub info: InfoFields,
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
    /// Constrain the text: JSON, JSON of a schema, or a grammar.
    #[serde(default)]
    pub response_format: Option<ResponseFormat>,
    /// kiln extension: a Lark grammar (llguidance's dialect) the text must match.
    #[serde(default)]
    pub grammar: Option<String>,
    /// llama-server's adapters for this request: `[{"name" | "id", "scale"}]`
    /// (at most one with a non-zero scale; see docs/lora.md).
    #[serde(default)]
    pub lora: Option<Vec<crate::lora::LoraPick>>,
    /// kiln extension: texts placed before `prompt`, in order, each a
    /// segment whose KV is computed once and reused wherever it appears
    /// (docs/segment-cache.md).
    #[serde(default)]
    pub segments: Option<Vec<String>>,
    /// Informational fields (`user`).
    #[serde(flatten)]
    #[schema(ignore)]
    pub info: InfoFields,
    /// The sampling and stop knobs, in the completions spelling ([`crate::knobs`]).
    #[serde(flatten)]
    #[schema(ignore)]
    pub knobs: RawKnobs,
}

/// Fields a client may send that change nothing kiln computes: accepted
/// when they say nothing kiln would have to do.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
pub struct InfoFields {
    /// An end-user id.
    #[serde(default)]
    pub user: Option<String>,
    /// Key-value tags.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<serde_json::Value>,
    /// Storing completions: only `false`.
    #[serde(default)]
    pub store: Option<bool>,
    /// `auto` or `default`.
    #[serde(default)]
    pub service_tier: Option<String>,
    /// Output modalities: only `["text"]`.
    #[serde(default)]
    pub modalities: Option<Vec<String>>,
}

/// `usage.prompt_tokens_details`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PromptTokensDetails {
    /// Prompt tokens served from the prefix cache.
    pub cached_tokens: usize,
}

/// `usage.context_shift` (a kiln extension, only when context shift
/// changed something: `kiln serve --context-shift`).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ContextShiftUsage {
    /// Oldest messages dropped so the conversation fits the context.
    pub dropped_messages: usize,
    /// Times the answer reached the context and old tokens were dropped.
    pub shifts: usize,
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
    /// What context shift did (a kiln extension; absent when nothing).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_shift: Option<ContextShiftUsage>,
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
    /// The text (null when the answer is only tool calls).
    pub content: Option<String>,
    /// The model's reasoning (`<think>`, harmony's analysis channel), apart from the answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    /// The calls the model made.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCallOut>,
}

/// A call the model made.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ToolCallOut {
    /// Its id (`call_...`).
    pub id: String,
    /// `function`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The function and its arguments (JSON text).
    pub function: FunctionCallOut,
}

/// The function of a [`ToolCallOut`].
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct FunctionCallOut {
    /// The function's name.
    pub name: String,
    /// Its arguments, JSON text.
    pub arguments: String,
}

/// A streamed piece of a call: the first chunk of a call has its id, type
/// and name; later ones add to `arguments`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ToolCallDelta {
    /// Which call of the answer.
    pub index: usize,
    /// On the call's first chunk.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// `function`, on the call's first chunk.
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<&'static str>,
    /// Name (first chunk) and arguments text.
    pub function: FunctionDelta,
}

/// The function part of a [`ToolCallDelta`].
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct FunctionDelta {
    /// On the call's first chunk.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// More of the arguments' JSON text.
    pub arguments: String,
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
    /// `stop`, `length`, `tool_calls` or `cancelled`.
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
    /// New reasoning text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    /// New pieces of tool calls.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCallDelta>,
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
    /// For a LoRA adapter: the model it applies to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
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
