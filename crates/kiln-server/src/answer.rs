//! What shapes an answer besides sampling, as the routes read it: the
//! shared part (tools into the conversation, how to read the answer, what
//! the engine enforces) is [`kiln_engine::answer`]; this module reads the
//! HTTP shapes into it and maps its errors to 400s that name the field.

use kiln_chat::Tool;
use kiln_engine::TemplateToolCall;
use serde_json::Value;

pub use kiln_engine::answer::{Reading, Reasoning, Shape, ToolChoice};

use crate::error::ApiError;

/// Reads a request's `tools` (OpenAI's shape, which Ollama shares).
pub fn tools(tools: Option<Vec<crate::openai::types::ToolIn>>) -> Result<Vec<Tool>, ApiError> {
    (tools.unwrap_or_default().into_iter().enumerate())
        .map(|(i, t)| {
            if t.kind != "function" {
                let field = format!("tools[{i}].type");
                return Err(ApiError::bad_param(&field, format!("`{field}` must be \"function\", got {:?}", t.kind)));
            }
            Ok(kiln_engine::answer::check_tool(t.function.name, t.function.description, t.function.parameters, i)?)
        })
        .collect()
}

/// The pieces of streamed `text` (`end`: the answer's last text) through
/// `parser`; without one (a plain answer) the text is content.
pub fn pieces(parser: &mut Option<kiln_chat::StreamParser>, text: &str, end: bool) -> Vec<kiln_chat::Piece> {
    let Some(p) = parser.as_mut() else { return vec![kiln_chat::Piece::Content(text.to_string())] };
    let mut pieces = p.push(text);
    if end {
        pieces.extend(p.finish());
    }
    pieces
}

/// Checks the tools as a whole: names are unique, and a named choice names one.
pub fn check_tools(tools: &[Tool], choice: &ToolChoice) -> Result<(), ApiError> {
    Ok(kiln_engine::answer::check_tools(tools, choice)?)
}

/// A call in a message sent back, as templates read it. `arguments` is JSON
/// text (OpenAI) or an object (Ollama).
pub fn template_call(id: String, name: String, arguments: Value, field: &str) -> Result<TemplateToolCall, ApiError> {
    Ok(kiln_engine::answer::template_call(id, name, arguments, field)?)
}

/// A new call id.
pub fn call_id() -> String {
    crate::openai::convert::new_id("call").replacen('-', "_", 1)
}
