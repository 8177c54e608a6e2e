//! What shapes an answer besides sampling: the tools a model may call, a
//! required format (JSON, a JSON schema, a grammar) and the model's
//! reasoning. A route reads these from its body into a [`Shape`]; once the
//! model is known, [`Shape::prepare`] puts the tools into the conversation
//! (through the model's own template, or a preamble when the template knows
//! no tools) and says how to read the answer ([`Reading`]: the model
//! family's tool-call and reasoning formats, [`kiln_chat`]); once the prompt
//! is tokenized, [`Shape::constraint`] picks what the engine enforces
//! (llguidance, see docs/structured-output.md).

use kiln_chat::{ReasoningFormat, Tool, ToolFormat};
use kiln_engine::{
    ChatMessage, ChatPrompt, EngineHandle, GoChatTemplate, Prompt, TemplateFunctionCall, TemplateToolCall,
};
use kiln_grammar::Constraint;
use serde_json::{json, Value};

use crate::error::ApiError;

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
    /// routes; not raw completions).
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
}

impl Shape {
    /// Fits the request to `engine`'s model: the tools go into the
    /// conversation (through the model's template or a preamble), and the
    /// family's formats say how to read the answer. `starts_in_reasoning`
    /// is set later, from the prompt's tokens ([`ends_in_think`]). With a
    /// Modelfile `template`, the tools go through it when it reads `.Tools`.
    pub fn prepare(&self, engine: &EngineHandle, prompt: &mut Prompt, go_template: Option<&GoChatTemplate>) -> Reading {
        let tok = engine.tokenizer();
        let template = tok.chat_template().unwrap_or("");
        let has = |t: &str| tok.token_id(t).is_some();
        let (tool_format, reasoning_format) = if self.chat {
            (ToolFormat::detect(template, has), ReasoningFormat::detect(template, has))
        } else {
            (ToolFormat::Generic, ReasoningFormat::None)
        };
        let offered = !self.tools.is_empty() && self.choice != ToolChoice::None;
        if let Prompt::Chat(chat) = prompt {
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
    /// schema or grammar is a 400 that says why.
    pub fn constraint(&self, engine: &EngineHandle, reading: &Reading) -> Result<Option<Constraint>, ApiError> {
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
                .map_err(|e| ApiError::bad_param("tools", e.to_string()))?;
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
            engine.check_constraint(c).map_err(|e| match ApiError::from(e) {
                ApiError::BadRequest { message, .. } => {
                    ApiError::bad_param(if self.format.is_some() { "response_format" } else { "tools" }, message)
                }
                other => other,
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

/// Reads a request's `tools` (OpenAI's shape, which Ollama shares).
pub fn tools(tools: Option<Vec<crate::openai::types::ToolIn>>) -> Result<Vec<Tool>, ApiError> {
    (tools.unwrap_or_default().into_iter().enumerate())
        .map(|(i, t)| {
            if t.kind != "function" {
                let field = format!("tools[{i}].type");
                return Err(ApiError::bad_param(&field, format!("`{field}` must be \"function\", got {:?}", t.kind)));
            }
            tool(t.function.name, t.function.description, t.function.parameters, i)
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

/// Reads a declared tool, checking its name and schema.
fn tool(name: String, description: Option<String>, parameters: Option<Value>, i: usize) -> Result<Tool, ApiError> {
    let field = format!("tools[{i}].function.name");
    if name.is_empty() || name.len() > 64 || !name.chars().all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c)) {
        return Err(ApiError::bad_param(
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
            return Err(ApiError::bad_param(&field, format!("`{field}` must be a JSON schema object")));
        }
    };
    Ok(Tool { name, description, parameters })
}

/// Checks the tools as a whole: names are unique, and a named choice names one.
pub fn check_tools(tools: &[Tool], choice: &ToolChoice) -> Result<(), ApiError> {
    for (i, t) in tools.iter().enumerate() {
        if tools[..i].iter().any(|u| u.name == t.name) {
            return Err(ApiError::bad_param("tools", format!("two tools are named {:?}", t.name)));
        }
    }
    match choice {
        ToolChoice::Named(n) if !tools.iter().any(|t| &t.name == n) => {
            Err(ApiError::bad_param("tool_choice", format!("`tool_choice` names {n:?}, which is not among `tools`")))
        }
        ToolChoice::Required | ToolChoice::Named(_) if tools.is_empty() => {
            Err(ApiError::bad_param("tool_choice", "`tool_choice` requires a call but `tools` is empty"))
        }
        _ => Ok(()),
    }
}

/// A call in a message sent back, as templates read it. `arguments` is JSON
/// text (OpenAI) or an object (Ollama).
pub fn template_call(id: String, name: String, arguments: Value, field: &str) -> Result<TemplateToolCall, ApiError> {
    let arguments = match arguments {
        Value::String(s) => serde_json::from_str::<Value>(&s)
            .map_err(|e| ApiError::bad_param(field, format!("`{field}` is not valid JSON: {e}")))?,
        Value::Null => json!({}),
        v => v,
    };
    if !arguments.is_object() {
        return Err(ApiError::bad_param(field, format!("`{field}` must be a JSON object")));
    }
    Ok(TemplateToolCall { id, kind: "function".into(), function: TemplateFunctionCall { name, arguments } })
}

/// Whether a prompt's last tokens leave it inside `<think>` (the template
/// opened the reasoning for the model).
pub fn ends_in_think(engine: &EngineHandle, tokens: &[u32]) -> bool {
    let tail = &tokens[tokens.len().saturating_sub(8)..];
    kiln_chat::prompt_opens_reasoning(&engine.tokenizer().decode(tail, false))
}

/// A new call id.
pub fn call_id() -> String {
    crate::openai::convert::new_id("call").replacen('-', "_", 1)
}
