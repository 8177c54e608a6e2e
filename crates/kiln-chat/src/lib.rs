//! kiln's chat formats: what models write for tool calls and reasoning, and how to ask
//! them for a call.
//!
//! * [`ToolFormat`] and [`ReasoningFormat`] name the ways model families write tool calls
//!   (`<tool_call>` blocks, Llama 3 JSON, Mistral `[TOOL_CALLS]`, gpt-oss harmony) and
//!   reasoning (`<think>` blocks, harmony channels); `detect` picks them from a chat
//!   template and a vocabulary.
//! * [`parse`] splits a whole answer into content, reasoning and [`ToolCall`]s;
//!   [`StreamParser`] does the same on text deltas and gives the same result for any
//!   split, holding back only text that could still become a marker.
//! * [`call_grammar`] writes an llguidance Lark grammar that admits exactly a call to one
//!   of the offered tools, for `tool_choice: "required"` or a named function.
//! * [`tools_preamble`] describes tools in a system prompt for templates that ignore the
//!   `tools` variable ([`template_takes_tools`]).
//!
//! ```
//! use kiln_chat::{parse, ReasoningFormat, ToolFormat};
//! let out = "<think>The user wants weather.</think>\n<tool_call>\n\
//!            {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
//! let parsed = parse(out, ToolFormat::Hermes, ReasoningFormat::Think, true, false);
//! assert_eq!(parsed.reasoning.as_deref(), Some("The user wants weather."));
//! assert_eq!(parsed.content, "");
//! assert_eq!(parsed.tool_calls[0].name, "get_weather");
//! assert_eq!(parsed.tool_calls[0].arguments, r#"{"city":"Paris"}"#);
//! ```
#![warn(missing_docs, unreachable_pub)]

mod calls;
mod detect;
mod grammar;
mod harmony;
mod preamble;
mod scan;
mod stream;

use serde::{Deserialize, Deserializer, Serialize};

pub use detect::{prompt_opens_reasoning, ReasoningFormat, ToolFormat};
pub use grammar::{call_grammar, call_grammar_after_reasoning};
pub use preamble::{template_takes_tools, tools_preamble};
pub use stream::StreamParser;

/// A function tool as the client declared it (OpenAI `tools[i].function`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tool {
    /// The function's name, as the model must write it.
    pub name: String,
    /// What the function does, for the model.
    #[serde(default)]
    pub description: Option<String>,
    /// The JSON schema of the arguments object. A missing, `null` or empty (`{}`) schema
    /// deserializes as `{"type":"object"}`.
    #[serde(default = "object_schema", deserialize_with = "de_parameters")]
    pub parameters: serde_json::Value,
}

impl Tool {
    /// The arguments schema, with an empty or `null` schema read as `{"type":"object"}`
    /// (for tools built in code rather than deserialized).
    pub fn schema(&self) -> serde_json::Value {
        normalize_schema(self.parameters.clone())
    }
}

fn object_schema() -> serde_json::Value {
    serde_json::json!({"type": "object"})
}

fn normalize_schema(v: serde_json::Value) -> serde_json::Value {
    match &v {
        serde_json::Value::Null => object_schema(),
        serde_json::Value::Object(m) if m.is_empty() => object_schema(),
        _ => v,
    }
}

fn de_parameters<'de, D: Deserializer<'de>>(d: D) -> Result<serde_json::Value, D::Error> {
    Ok(normalize_schema(serde_json::Value::deserialize(d)?))
}

/// One call the model made.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The function the model called.
    pub name: String,
    /// The JSON text of the arguments object, compact (`{"city":"Paris"}`).
    pub arguments: String,
}

/// The parsed answer.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Parsed {
    /// What the user sees as the answer.
    pub content: String,
    /// The model's reasoning, if it wrote any (never `Some("")`).
    pub reasoning: Option<String>,
    /// The calls, in the order the model wrote them.
    pub tool_calls: Vec<ToolCall>,
}

impl Parsed {
    /// Adds one streamed piece; collecting every piece of a [`StreamParser`] gives what
    /// [`parse`] gives for the whole text.
    pub fn push(&mut self, piece: Piece) {
        match piece {
            Piece::Content(s) => self.content.push_str(&s),
            Piece::Reasoning(s) => self.reasoning.get_or_insert_with(String::new).push_str(&s),
            Piece::ToolCallStart { name, .. } => self.tool_calls.push(ToolCall { name, arguments: String::new() }),
            Piece::ToolCallArgs { index, delta } => {
                if let Some(call) = self.tool_calls.get_mut(index) {
                    call.arguments.push_str(&delta);
                }
            }
        }
    }
}

/// One piece of a streamed answer. Text pieces are never empty.
#[derive(Debug, Clone, PartialEq)]
pub enum Piece {
    /// Answer text.
    Content(String),
    /// Reasoning text.
    Reasoning(String),
    /// A call starts; `index` counts this answer's calls from 0.
    ToolCallStart {
        /// The call's index among this answer's calls.
        index: usize,
        /// The function called.
        name: String,
    },
    /// More of a call's arguments text (kiln sends the whole compact object at once).
    ToolCallArgs {
        /// The call's index among this answer's calls.
        index: usize,
        /// Arguments text to append.
        delta: String,
    },
}

/// Errors of [`call_grammar`]; the messages are written for API clients.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChatError {
    /// A tool name the model could not write back reliably.
    #[error("tool name {0:?} is invalid: use 1 to 64 characters from A-Z, a-z, 0-9, '_', '.' and '-'")]
    InvalidToolName(String),
    /// Two tools with one name.
    #[error("tool name {0:?} is declared more than once")]
    DuplicateTool(String),
    /// `tool_choice` names a function that is not among `tools`.
    #[error("tool_choice names function {0:?}, which is not among the declared tools")]
    UnknownTool(String),
    /// A call is required but no tools were declared.
    #[error("tool_choice requires a tool call, but no tools were declared")]
    NoTools,
    /// A tool's `parameters` is not a JSON schema object.
    #[error("parameters of tool {0:?} must be a JSON schema object")]
    InvalidSchema(String),
}

/// Parses a whole answer.
///
/// `tools_offered`: false → never extract tool calls (their text stays content).
/// `starts_in_reasoning`: the prompt ended inside `<think>`, so the answer starts as
/// reasoning (see [`prompt_opens_reasoning`]).
pub fn parse(
    text: &str,
    tools: ToolFormat,
    reasoning: ReasoningFormat,
    tools_offered: bool,
    starts_in_reasoning: bool,
) -> Parsed {
    let mut p = StreamParser::new(tools, reasoning, tools_offered, starts_in_reasoning);
    let mut parsed = Parsed::default();
    for piece in p.push(text).into_iter().chain(p.finish()) {
        parsed.push(piece);
    }
    parsed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_deserializes_with_missing_or_empty_parameters() {
        let t: Tool = serde_json::from_str(r#"{"name":"now"}"#).unwrap();
        assert_eq!(t.parameters, serde_json::json!({"type":"object"}));
        let t: Tool = serde_json::from_str(r#"{"name":"now","parameters":{}}"#).unwrap();
        assert_eq!(t.parameters, serde_json::json!({"type":"object"}));
        let t: Tool =
            serde_json::from_str(r#"{"name":"f","description":"d","parameters":{"type":"object","properties":{}}}"#)
                .unwrap();
        assert_eq!(t.description.as_deref(), Some("d"));
        assert_eq!(t.parameters["properties"], serde_json::json!({}));
    }
}
