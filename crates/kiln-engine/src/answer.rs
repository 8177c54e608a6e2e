//! What shapes an answer besides sampling: the tools a model may call, a
//! required format (JSON, a JSON schema, a grammar) and the model's
//! reasoning. The server's routes and the language bindings read these into
//! a [`Shape`]; once the model is known, [`Shape::prepare`] puts the tools
//! into the conversation (through the model's own template, or a preamble
//! when the template knows no tools) and says how to read the answer
//! ([`Reading`]: the model family's tool-call and reasoning formats,
//! [`kiln_chat`]); once the prompt is tokenized, [`Reading::read_prompt`]
//! sees whether the template opened the reasoning and [`Shape::constraint`]
//! picks what the engine enforces (llguidance, docs/structured-output.md).
//!
//! ```no_run
//! use kiln_engine::answer::{Shape, ToolChoice};
//! use kiln_engine::{ChatMessage, EngineConfig, EngineHandle, Params, Prompt, Request};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let engine = EngineHandle::start("model.gguf".as_ref(), EngineConfig::default())?;
//! let tool = kiln_engine::answer::check_tool("now".into(), None, None, 0)?;
//! let shape = Shape { tools: vec![tool], choice: ToolChoice::Required, chat: true, ..Shape::default() };
//! let mut prompt = Prompt::chat(vec![ChatMessage::new("user", "What time is it?")]);
//! let mut reading = shape.prepare(&engine, &mut prompt, None);
//! let tokens = engine.prompt_tokens(&prompt)?;
//! reading.read_prompt(&engine, &tokens);
//! let params = Params { constraint: shape.constraint(&engine, &reading)?, chat_turn: true, ..Params::default() };
//! let out = engine.generate(Request { prompt: Prompt::Tokens(tokens), params })?;
//! println!("{:?}", reading.parse(&out.text).tool_calls);
//! # Ok(()) }
//! ```

use kiln_chat::{ReasoningFormat, Tool, ToolFormat};
use kiln_grammar::Constraint;
use serde_json::{json, Value};

use crate::error::EngineError;
use crate::handle::EngineHandle;
use crate::request::{ChatMessage, ChatPrompt, Prompt, TemplateFunctionCall, TemplateToolCall};

/// A request's tools, format or reasoning cannot be honoured. `param` names
/// the request field at fault, as the caller wrote it in OpenAI's shape
/// (`tools[0].function.name`, `response_format`).
#[derive(Debug, thiserror::Error)]
pub enum ShapeError {
    /// A field is invalid.
    #[error("{message}")]
    Invalid {
        /// The field.
        param: String,
        /// What is wrong, for the caller.
        message: String,
    },
    /// The engine refused the constraint the field asks for (an invalid or
    /// unenforceable schema or grammar).
    #[error("{source}")]
    Constraint {
        /// The field the constraint came from (`response_format` or `tools`).
        param: &'static str,
        /// Why.
        source: EngineError,
    },
}

impl ShapeError {
    fn invalid(param: &str, message: impl Into<String>) -> Self {
        Self::Invalid { param: param.to_string(), message: message.into() }
    }
}

/// `tool_choice`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ToolChoice {
    /// Never call a tool (the tools are not shown to the model).
    None,
    /// The model decides.
    #[default]
    Auto,
    /// The answer is one or more calls (constrained).
    Required,
    /// The answer is a call of this function (constrained).
    Named(String),
}

impl ToolChoice {
    /// `none`, `auto` or `required`.
    pub fn from_mode(mode: &str) -> Result<Self, ShapeError> {
        match mode {
            "none" => Ok(Self::None),
            "auto" => Ok(Self::Auto),
            "required" => Ok(Self::Required),
            other => Err(ShapeError::invalid(
                "tool_choice",
                format!("`tool_choice` must be none, auto, required or a named function, got {other:?}"),
            )),
        }
    }
}

/// What the reasoning of a model that thinks becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Reasoning {
    /// Returned apart from the answer (`reasoning_content`, `thinking`).
    #[default]
    Return,
    /// Dropped (Ollama's `think: false`).
    Drop,
}

/// A request's tools, format and reasoning, as the client sent them.
#[derive(Debug, Clone, Default)]
pub struct Shape {
    /// Declared tools.
    pub tools: Vec<Tool>,
    /// Whether and which to call.
    pub choice: ToolChoice,
    /// Several calls allowed in one answer.
    pub parallel: bool,
    /// A required format (`response_format`, Ollama `format`, a grammar).
    pub format: Option<Constraint>,
    /// What the reasoning becomes.
    pub reasoning: Reasoning,
    /// Whether the answer is read for tool calls and reasoning at all (chat
    /// requests; not raw completions).
    pub chat: bool,
}

/// How to read an answer: the formats of the model family, and what the
/// request offered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reading {
    /// How the family writes calls.
    pub tools: ToolFormat,
    /// How it writes reasoning.
    pub reasoning: ReasoningFormat,
    /// Tools were offered (otherwise call-like text stays content).
    pub tools_offered: bool,
    /// The prompt ended inside `<think>`: the answer starts as reasoning.
    pub starts_in_reasoning: bool,
    /// Drop the reasoning instead of returning it.
    pub drop_reasoning: bool,
}

impl Reading {
    /// Plain text: no tools, no reasoning.
    pub const PLAIN: Reading = Reading {
        tools: ToolFormat::Generic,
        reasoning: ReasoningFormat::None,
        tools_offered: false,
        starts_in_reasoning: false,
        drop_reasoning: false,
    };

    /// A streaming parser for this reading.
    pub fn stream_parser(&self) -> kiln_chat::StreamParser {
        kiln_chat::StreamParser::new(self.tools, self.reasoning, self.tools_offered, self.starts_in_reasoning)
    }

    /// Parses a whole answer.
    pub fn parse(&self, text: &str) -> kiln_chat::Parsed {
        let mut p = kiln_chat::parse(text, self.tools, self.reasoning, self.tools_offered, self.starts_in_reasoning);
        if self.drop_reasoning {
            p.reasoning = None;
        }
        p
    }

    /// Notes from the prompt's tokens whether the template opened the
    /// reasoning (`<think>` at its end), so the answer starts as reasoning.
    pub fn read_prompt(&mut self, engine: &EngineHandle, tokens: &[u32]) {
        if self.reasoning == ReasoningFormat::Think {
            self.starts_in_reasoning = ends_in_think(engine, tokens);
        }
    }
}

impl Shape {
    /// Fits the request to `engine`'s model: the tools go into the
    /// conversation (through the model's template or a preamble), and the
    /// family's formats say how to read the answer. `starts_in_reasoning`
    /// is set later, from the prompt's tokens ([`Reading::read_prompt`]).
    pub fn prepare(
        &self,
        engine: &EngineHandle,
        prompt: &mut Prompt,
        go_template: Option<&crate::GoChatTemplate>,
    ) -> Reading {
        let tok = engine.tokenizer();
        let template = tok.chat_template().unwrap_or("");
        let has = |t: &str| tok.token_id(t).is_some();
        let (tool_format, reasoning_format) = if self.chat {
            (ToolFormat::detect(template, has), ReasoningFormat::detect(template, has))
        } else {
            (ToolFormat::Generic, ReasoningFormat::None)
        };
        let offered = !self.tools.is_empty() && self.choice != ToolChoice::None;
        let chat = match prompt {
            Prompt::Segmented(s) => s.prompt.as_mut(),
            p => p,
        };
        if let Prompt::Chat(chat) = chat {
            // A Modelfile `template` takes the tools when it reads `.Tools`.
            let native = match go_template {
                Some(t) => t.takes_tools(),
                None => kiln_chat::template_takes_tools(template),
            };
            add_tools(chat, if offered { &self.tools } else { &[] }, tool_format, native);
        }
        Reading {
            tools: tool_format,
            reasoning: reasoning_format,
            tools_offered: offered,
            starts_in_reasoning: false,
            drop_reasoning: self.reasoning == Reasoning::Drop,
        }
    }

    /// What the engine enforces: a call of the offered tools when one is
    /// required (after the model's reasoning, when it reasons), else the
    /// requested format. Checked against the model's vocabulary: an invalid
    /// schema or grammar is an error that says why.
    pub fn constraint(&self, engine: &EngineHandle, reading: &Reading) -> Result<Option<Constraint>, ShapeError> {
        let constraint = match &self.choice {
            ToolChoice::Required | ToolChoice::Named(_) if reading.tools_offered => {
                let only = match &self.choice {
                    ToolChoice::Named(n) => Some(n.as_str()),
                    _ => None,
                };
                // A named function is called once (as OpenAI does).
                let parallel = self.parallel && only.is_none();
                // Arguments as strict as a JSON-schema answer: no keys the tool did not declare.
                let strict: Vec<Tool> = self
                    .tools
                    .iter()
                    .map(|t| {
                        let mut t = t.clone();
                        kiln_grammar::close_objects(&mut t.parameters);
                        t
                    })
                    .collect();
                let g = kiln_chat::call_grammar_after_reasoning(
                    reading.tools,
                    &strict,
                    only,
                    parallel,
                    reading.reasoning,
                    reading.starts_in_reasoning,
                )
                .map_err(|e| ShapeError::invalid("tools", e.to_string()))?;
                Some(Constraint::Lark(g))
            }
            // A model that reasons writes its reasoning first; the format
            // holds its answer (unless it was asked not to think).
            _ if reading.reasoning == ReasoningFormat::Think && self.reasoning == Reasoning::Return => {
                let opened = reading.starts_in_reasoning;
                match &self.format {
                    Some(Constraint::JsonObject) => Some(Constraint::JsonAfterThinking { schema: None, opened }),
                    Some(Constraint::JsonSchema(s)) => {
                        Some(Constraint::JsonAfterThinking { schema: Some(s.clone()), opened })
                    }
                    other => other.clone(),
                }
            }
            _ => self.format.clone(),
        };
        if let Some(c) = &constraint {
            engine.check_constraint(c).map_err(|source| ShapeError::Constraint {
                param: if self.format.is_some() { "response_format" } else { "tools" },
                source,
            })?;
        }
        Ok(constraint)
    }
}

/// Puts `tools` into the conversation: through the template's `tools`
/// variable when it renders them (`native`), otherwise as a preamble to the
/// system message, with earlier calls and results written as the model
/// would have written and read them.
fn add_tools(chat: &mut ChatPrompt, tools: &[Tool], format: ToolFormat, native: bool) {
    if native {
        if !tools.is_empty() {
            chat.tools = Some(Value::Array(tools.iter().map(tool_json).collect()));
        }
        return;
    }
    for m in &mut chat.messages {
        if !m.tool_calls.is_empty() {
            for c in std::mem::take(&mut m.tool_calls) {
                let call = json!({"name": c.function.name, "arguments": c.function.arguments});
                if !m.content.is_empty() {
                    m.content.push('\n');
                }
                m.content.push_str(&format!("<tool_call>\n{call}\n</tool_call>"));
            }
        }
        if m.role == "tool" {
            m.role = "user".into();
            m.content = format!("<tool_response>\n{}\n</tool_response>", m.content);
            m.tool_call_id = None;
        }
    }
    if tools.is_empty() {
        return;
    }
    let preamble = kiln_chat::tools_preamble(tools, format);
    match chat.messages.first_mut().filter(|m| m.role == "system") {
        Some(sys) => sys.content = format!("{}\n\n{preamble}", sys.content),
        None => chat.messages.insert(0, ChatMessage::new("system", preamble)),
    }
}

/// A tool as templates read it: `{"type": "function", "function": {...}}`.
fn tool_json(t: &Tool) -> Value {
    let mut f = json!({"name": t.name, "parameters": t.parameters});
    if let Some(d) = &t.description {
        f["description"] = Value::String(d.clone());
    }
    json!({"type": "function", "function": f})
}

/// Reads the `i`th declared function tool, checking its name and schema
/// (a missing, `null` or empty schema is `{"type": "object"}`).
pub fn check_tool(
    name: String,
    description: Option<String>,
    parameters: Option<Value>,
    i: usize,
) -> Result<Tool, ShapeError> {
    let field = format!("tools[{i}].function.name");
    if name.is_empty() || name.len() > 64 || !name.chars().all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c)) {
        return Err(ShapeError::invalid(
            &field,
            format!("`{field}` must be 1 to 64 letters, digits, `_`, `.` or `-`, got {name:?}"),
        ));
    }
    let parameters = match parameters {
        None | Some(Value::Null) => json!({"type": "object"}),
        Some(Value::Object(o)) if o.is_empty() => json!({"type": "object"}),
        Some(p @ Value::Object(_)) => p,
        Some(_) => {
            let field = format!("tools[{i}].function.parameters");
            return Err(ShapeError::invalid(&field, format!("`{field}` must be a JSON schema object")));
        }
    };
    Ok(Tool { name, description, parameters })
}

/// Checks the tools as a whole: names are unique, and a named choice names one.
pub fn check_tools(tools: &[Tool], choice: &ToolChoice) -> Result<(), ShapeError> {
    for (i, t) in tools.iter().enumerate() {
        if tools[..i].iter().any(|u| u.name == t.name) {
            return Err(ShapeError::invalid("tools", format!("two tools are named {:?}", t.name)));
        }
    }
    match choice {
        ToolChoice::Named(n) if !tools.iter().any(|t| &t.name == n) => {
            Err(ShapeError::invalid("tool_choice", format!("`tool_choice` names {n:?}, which is not among `tools`")))
        }
        ToolChoice::Required | ToolChoice::Named(_) if tools.is_empty() => {
            Err(ShapeError::invalid("tool_choice", "`tool_choice` requires a call but `tools` is empty"))
        }
        _ => Ok(()),
    }
}

/// A call in a message sent back, as templates read it. `arguments` is JSON
/// text (OpenAI) or an object (Ollama); `field` names it in errors.
pub fn template_call(id: String, name: String, arguments: Value, field: &str) -> Result<TemplateToolCall, ShapeError> {
    let arguments = match arguments {
        Value::String(s) => serde_json::from_str::<Value>(&s)
            .map_err(|e| ShapeError::invalid(field, format!("`{field}` is not valid JSON: {e}")))?,
        Value::Null => json!({}),
        v => v,
    };
    if !arguments.is_object() {
        return Err(ShapeError::invalid(field, format!("`{field}` must be a JSON object")));
    }
    Ok(TemplateToolCall { id, kind: "function".into(), function: TemplateFunctionCall { name, arguments } })
}

/// Whether a prompt's last tokens leave it inside `<think>` (the template
/// opened the reasoning for the model).
pub fn ends_in_think(engine: &EngineHandle, tokens: &[u32]) -> bool {
    let tail = &tokens[tokens.len().saturating_sub(8)..];
    kiln_chat::prompt_opens_reasoning(&engine.tokenizer().decode(tail, false))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tools_are_checked_with_their_field_named() {
        let e = check_tool("get weather".into(), None, None, 2).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.starts_with("`tools[2].function.name` must be 1 to 64"), "{e}");
        let e = check_tool("f".into(), None, Some(json!("x")), 0);
        assert!(matches!(e, Err(ShapeError::Invalid { param, .. }) if param == "tools[0].function.parameters"));
        let t = check_tool("now".into(), Some("d".into()), Some(json!({})), 0).ok();
        assert_eq!(t.map(|t| t.parameters), Some(json!({"type": "object"})));
        let now = Tool { name: "now".into(), description: None, parameters: json!({"type": "object"}) };
        assert!(check_tools(&[now.clone(), now.clone()], &ToolChoice::Auto).is_err());
        assert!(check_tools(std::slice::from_ref(&now), &ToolChoice::Named("later".into())).is_err());
        assert!(check_tools(&[], &ToolChoice::Required).is_err());
        assert!(check_tools(&[now], &ToolChoice::Named("now".into())).is_ok());
        assert_eq!(ToolChoice::from_mode("required").ok(), Some(ToolChoice::Required));
        assert!(ToolChoice::from_mode("sometimes").is_err());
    }

    #[test]
    fn earlier_calls_take_json_text_or_objects() {
        let c = template_call("c1".into(), "f".into(), json!("{\"a\": 1}"), "x").ok();
        assert_eq!(c.map(|c| c.function.arguments), Some(json!({"a": 1})));
        assert!(template_call("c1".into(), "f".into(), json!("[1]"), "x").is_err());
        assert!(template_call("c1".into(), "f".into(), json!("{"), "x").is_err());
    }

    #[test]
    fn tools_without_a_template_slot_become_a_preamble() {
        let tool = Tool { name: "now".into(), description: None, parameters: json!({"type": "object"}) };
        let mut chat = ChatPrompt::from(vec![ChatMessage::new("user", "time?")]);
        add_tools(&mut chat, std::slice::from_ref(&tool), ToolFormat::Generic, false);
        assert_eq!(chat.messages[0].role, "system");
        assert!(chat.messages[0].content.contains("now") && chat.tools.is_none());
        let mut chat = ChatPrompt::from(vec![ChatMessage::new("user", "time?")]);
        add_tools(&mut chat, &[tool], ToolFormat::Hermes, true);
        assert_eq!(chat.messages.len(), 1);
        assert_eq!(chat.tools.as_ref().map(|t| t[0]["function"]["name"].clone()), Some(json!("now")));
    }
}
