//! Ollama request and response bodies, with the field names Ollama's
//! clients use.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::knobs::RawKnobs;

/// `options` of `/api/generate` and `/api/chat`: the sampling and stop
/// knobs in Ollama's spelling ([`crate::knobs`]).
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
pub struct Options {
    /// The knobs as sent.
    #[serde(flatten)]
    #[schema(ignore)]
    pub knobs: RawKnobs,
}

/// `POST /api/generate` body.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct GenerateRequest {
    /// Model name.
    #[schema(min_length = 1)]
    pub model: String,
    /// The prompt (empty: just load the model).
    #[serde(default)]
    pub prompt: String,
    /// System prompt.
    pub system: Option<String>,
    /// Skip the chat template.
    #[serde(default)]
    pub raw: bool,
    /// Stream NDJSON (default true).
    pub stream: Option<bool>,
    /// Sampling options.
    pub options: Option<Options>,
    /// How long the model stays loaded afterwards (`5m`, seconds, `-1`, `0`).
    #[schema(value_type = Option<String>)]
    pub keep_alive: Option<serde_json::Value>,
    /// `"json"` or a JSON schema the answer must match.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub format: Option<serde_json::Value>,
    /// Thinking models: return the reasoning as `thinking` (true, or
    /// `low`/`medium`/`high` for gpt-oss) or ask the model not to think (false).
    #[serde(default)]
    #[schema(value_type = Option<bool>)]
    pub think: Option<serde_json::Value>,
    /// A Go template (Ollama's) for this request, in place of the model's
    /// chat template or its Modelfile's; empty: none.
    pub template: Option<String>,
    /// `context` (token ids of an earlier response) is read from here;
    /// fields kiln cannot honour (`suffix`, `images`) are refused unless
    /// empty.
    #[serde(flatten)]
    #[schema(ignore)]
    pub other: serde_json::Map<String, serde_json::Value>,
}

/// A chat message.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct Message {
    /// `system`, `user`, `assistant` or `tool`.
    pub role: String,
    /// The text.
    #[serde(default)]
    pub content: String,
    /// The model's reasoning (answers; accepted back in requests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking: Option<String>,
    /// Calls the model made.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<OllamaToolCall>,
    /// On a `tool` message: the tool that answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_name: Option<String>,
    /// Images (refused: no vision models yet).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<String>,
}

/// A call, in Ollama's shape (arguments as an object).
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct OllamaToolCall {
    /// The function and its arguments.
    pub function: OllamaFunctionCall,
}

/// The function of an [`OllamaToolCall`].
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct OllamaFunctionCall {
    /// Which call of the answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<usize>,
    /// The function's name.
    pub name: String,
    /// Its arguments.
    #[schema(value_type = Object)]
    pub arguments: serde_json::Value,
}

/// A tool the model may call (`tools[i]`): OpenAI's shape.
pub type Tool = crate::openai::types::ToolIn;

/// `POST /api/chat` body.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[schema(as = OllamaChatRequest)]
pub struct ChatRequest {
    /// Model name.
    #[schema(min_length = 1)]
    pub model: String,
    /// The conversation (empty: just load the model).
    #[serde(default)]
    pub messages: Vec<Message>,
    /// Stream NDJSON (default true).
    pub stream: Option<bool>,
    /// Sampling options.
    pub options: Option<Options>,
    /// Keep-alive.
    #[schema(value_type = Option<String>)]
    pub keep_alive: Option<serde_json::Value>,
    /// Tools the model may call.
    #[serde(default)]
    pub tools: Option<Vec<Tool>>,
    /// `"json"` or a JSON schema the answer must match.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub format: Option<serde_json::Value>,
    /// Thinking models: return the reasoning as `message.thinking` (true,
    /// or `low`/`medium`/`high`) or ask the model not to think (false).
    #[serde(default)]
    #[schema(value_type = Option<bool>)]
    pub think: Option<serde_json::Value>,
    /// Other fields are refused unless null.
    #[serde(flatten)]
    #[schema(ignore)]
    pub other: serde_json::Map<String, serde_json::Value>,
}

/// Timing fields of a final response (nanoseconds); absent on other lines.
#[derive(Debug, Clone, Default, Serialize, ToSchema)]
pub struct Stats {
    /// Whole request.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_duration: Option<u64>,
    /// Waiting for the model to load.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub load_duration: Option<u64>,
    /// Prompt tokens.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_eval_count: Option<usize>,
    /// Prompt processing time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_eval_duration: Option<u64>,
    /// Generated tokens.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eval_count: Option<usize>,
    /// Generation time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eval_duration: Option<u64>,
}

/// One `/api/generate` response line (or the whole response).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct GenerateResponse {
    /// Model name.
    #[schema(min_length = 1)]
    pub model: String,
    /// RFC 3339 time.
    pub created_at: String,
    /// New text.
    pub response: String,
    /// New reasoning text (thinking models).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thinking: Option<String>,
    /// Whether this is the last line.
    pub done: bool,
    /// `stop`, `length`, `load` or `unload` on the last line.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub done_reason: Option<String>,
    /// Timings, on the last line.
    #[serde(flatten)]
    pub stats: Stats,
    /// On the last line: the prompt's and the answer's token ids; send them
    /// back as `context` to continue.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context: Option<Vec<u32>>,
}

/// One `/api/chat` response line (or the whole response).
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = OllamaChatResponse)]
pub struct ChatResponse {
    /// Model name.
    #[schema(min_length = 1)]
    pub model: String,
    /// RFC 3339 time.
    pub created_at: String,
    /// The assistant's new text.
    pub message: Message,
    /// Whether this is the last line.
    pub done: bool,
    /// On the last line.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub done_reason: Option<String>,
    /// Timings, on the last line.
    #[serde(flatten)]
    pub stats: Stats,
}

/// Model details.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Details {
    /// Empty.
    pub parent_model: String,
    /// `gguf` or `safetensors`.
    pub format: String,
    /// Architecture, when loaded.
    pub family: String,
    /// Same, as a list.
    pub families: Vec<String>,
    /// Parameter count, when known.
    pub parameter_size: String,
    /// Quantization.
    pub quantization_level: String,
}

/// One model of `/api/tags`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TagModel {
    /// Name.
    pub name: String,
    /// Name (newer clients read this).
    #[schema(min_length = 1)]
    pub model: String,
    /// RFC 3339 file time.
    pub modified_at: String,
    /// Bytes.
    pub size: u64,
    /// An identifier: 64 hex digits that change when the file does (the
    /// SHA-256 of its size and time, not of its bytes). `ollama list`
    /// shows the first 12 as the ID.
    pub digest: String,
    /// Details.
    pub details: Details,
}

/// `GET /api/tags` answer.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Tags {
    /// Models.
    pub models: Vec<TagModel>,
}

/// One model of `/api/ps`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PsModel {
    /// Name.
    pub name: String,
    /// Name.
    #[schema(min_length = 1)]
    pub model: String,
    /// Bytes.
    pub size: u64,
    /// Identifier, as in `/api/tags`.
    pub digest: String,
    /// Details.
    pub details: Details,
    /// When it unloads (RFC 3339).
    pub expires_at: String,
    /// Bytes in GPU memory (0 on CPU).
    pub size_vram: u64,
    /// The context length it was loaded with, in tokens (`ollama ps`
    /// shows it as CONTEXT).
    pub context_length: usize,
}

/// `GET /api/ps` answer.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Ps {
    /// Loaded models.
    pub models: Vec<PsModel>,
}

/// `POST /api/show` body.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct ShowRequest {
    /// Model name (required unless the older `name` is given).
    #[schema(min_length = 1)]
    pub model: Option<String>,
    /// Older clients send `name`.
    pub name: Option<String>,
    /// Only `false`: kiln has no verbose form (tensor and tokenizer lists).
    pub verbose: Option<bool>,
    /// Other fields (`system`, `template`, `options`, which Ollama's Go
    /// client sends empty) are refused unless empty.
    #[serde(flatten)]
    #[schema(ignore)]
    pub other: serde_json::Map<String, serde_json::Value>,
}

/// `POST /api/show` answer.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ShowResponse {
    /// A Modelfile that makes the model (`FROM name`; for an alias made by
    /// `/api/create` or `/api/copy`, its `SYSTEM` and `PARAMETER`s too).
    pub modelfile: String,
    /// For an alias: its parameters, one `name value` per line.
    pub parameters: String,
    /// Chat template source, when loaded.
    pub template: String,
    /// Details.
    pub details: Details,
    /// Architecture facts, when loaded.
    #[schema(value_type = Object)]
    pub model_info: serde_json::Value,
    /// `completion`, and `tools` when the loaded model's template takes tools.
    pub capabilities: Vec<String>,
    /// RFC 3339 file time.
    pub modified_at: String,
}

/// `GET /api/version` answer.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Version {
    /// The Ollama API version kiln speaks.
    pub version: String,
}

/// Formats a time as RFC 3339 in UTC (`2024-05-01T12:00:00.123456789Z`).
pub fn rfc3339(t: std::time::SystemTime) -> String {
    let d = t.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    // Civil date from days since 1970-01-01 (proleptic Gregorian).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:09}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_nanos()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn rfc3339_dates() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000000000Z");
        // 2024-02-29T12:34:56Z = 1709210096
        assert_eq!(rfc3339(UNIX_EPOCH + Duration::from_secs(1_709_210_096)), "2024-02-29T12:34:56.000000000Z");
        assert_eq!(rfc3339(UNIX_EPOCH + Duration::from_secs(951_782_400)), "2000-02-29T00:00:00.000000000Z");
    }
}

/// An error in Ollama's shape.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct OllamaErrorBody {
    /// What went wrong.
    pub error: String,
}
