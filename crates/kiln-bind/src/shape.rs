//! The chat options that shape an answer (tools, `tool_choice`,
//! `response_format`, reasoning) read from JSON into the engine's
//! [`Shape`], with errors that name the option as the caller writes it.

use kiln_engine::answer::{check_tool, check_tools, Reasoning, Shape, ShapeError, ToolChoice};
use kiln_engine::EngineError;
use kiln_grammar::Constraint;
use serde_json::{Map, Value};

use crate::error::BindError;
use crate::options::{GenOptions, Style};

/// Options that only a chat request reads.
const CHAT_ONLY: [&str; 5] =
    ["tools", "tool_choice", "parallel_tool_calls", "reasoning_effort", "chat_template_kwargs"];

/// Rewrites the snake_case option names an engine message quotes (`` `tool_choice` ``)
/// as `style` spells them.
pub(crate) fn restyle(style: Style, message: String) -> String {
    if style == Style::Snake {
        return message;
    }
    ["tool_choice", "response_format", "parallel_tool_calls"]
        .iter()
        .fold(message, |m, n| m.replace(&format!("`{n}"), &format!("`{}", style.name(n))))
}

/// A [`ShapeError`] for the caller.
pub(crate) fn shape_error(style: Style, e: ShapeError) -> BindError {
    match e {
        ShapeError::Invalid { message, .. } => BindError::Invalid(restyle(style, message)),
        ShapeError::Constraint { param, source: EngineError::Grammar(g) } if g.is_user_error() => {
            BindError::Invalid(format!("`{}`: {g}", style.name(param)))
        }
        ShapeError::Constraint { source, .. } => BindError::Engine(source),
    }
}

fn invalid(style: Style, message: &str) -> BindError {
    BindError::Invalid(restyle(style, message.to_string()))
}

impl GenOptions {
    fn chat_only_set(&self) -> Option<&'static str> {
        let set = [
            self.tools.is_some(),
            self.tool_choice.is_some(),
            self.parallel_tool_calls.is_some(),
            self.reasoning_effort.is_some(),
            self.chat_template_kwargs.is_some(),
        ];
        CHAT_ONLY.iter().zip(set).find(|(_, s)| *s).map(|(n, _)| *n)
    }

    /// Whether tools were declared (a `chat` that returns only text refuses them).
    pub fn has_tools(&self) -> bool {
        self.tools.as_ref().is_some_and(|t| !t.is_null())
    }

    /// The answer's shape: tools, `tool_choice`, `response_format` and
    /// reasoning; for a raw prompt (`chat` false) only `response_format`.
    pub fn shape(&self, style: Style, chat: bool) -> Result<Shape, BindError> {
        let format = self.response_format.as_ref().map(|f| constraint(style, f)).transpose()?.flatten();
        if !chat {
            if let Some(name) = self.chat_only_set() {
                return Err(BindError::Invalid(format!(
                    "`{}` applies to chat messages, not to a raw prompt",
                    style.name(name)
                )));
            }
            return Ok(Shape { format, ..Shape::default() });
        }
        let tools = self.tools.as_ref().map(|t| tools(style, t)).transpose()?.unwrap_or_default();
        let choice = match &self.tool_choice {
            None => {
                if tools.is_empty() {
                    ToolChoice::None
                } else {
                    ToolChoice::Auto
                }
            }
            Some(c) => tool_choice(style, c)?,
        };
        check_tools(&tools, &choice).map_err(|e| shape_error(style, e))?;
        if format.is_some() && matches!(choice, ToolChoice::Required | ToolChoice::Named(_)) {
            return Err(invalid(
                style,
                "`response_format` and a required `tool_choice` cannot both constrain one answer",
            ));
        }
        let parallel = self.parallel_tool_calls.unwrap_or(true);
        Ok(Shape { tools, choice, parallel, format, reasoning: Reasoning::Return, chat: true })
    }

    /// Variables for the chat template: `chat_template_kwargs` and `reasoning_effort`.
    pub fn template_vars(&self, style: Style) -> Result<Map<String, Value>, BindError> {
        let mut vars = match &self.chat_template_kwargs {
            None => Map::new(),
            Some(Value::Object(m)) => m.clone(),
            Some(_) => {
                let name = style.name("chat_template_kwargs");
                return Err(BindError::Invalid(format!("`{name}` must be an object of template variables")));
            }
        };
        if let Some(effort) = &self.reasoning_effort {
            if !["minimal", "low", "medium", "high"].contains(&effort.as_str()) {
                let name = style.name("reasoning_effort");
                return Err(BindError::Invalid(format!(
                    "`{name}` must be minimal, low, medium or high, got {effort:?}"
                )));
            }
            vars.insert("reasoning_effort".into(), effort.clone().into());
        }
        Ok(vars)
    }
}

/// OpenAI's `tools`: `[{"type": "function", "function": {"name", "description", "parameters"}}]`.
fn tools(style: Style, v: &Value) -> Result<Vec<kiln_chat::Tool>, BindError> {
    let Some(list) = v.as_array() else {
        return Err(BindError::Invalid(
            "`tools` must be a list of {\"type\": \"function\", \"function\": {\"name\": ...}} objects".into(),
        ));
    };
    let str_field = |f: &Value, k: &str, i: usize| -> Result<Option<String>, BindError> {
        match f.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(BindError::Invalid(format!("`tools[{i}].function.{k}` must be a string"))),
        }
    };
    (list.iter().enumerate())
        .map(|(i, t)| {
            match t.get("type").and_then(Value::as_str) {
                Some("function") => {}
                other => {
                    return Err(BindError::Invalid(format!(
                        "`tools[{i}].type` must be \"function\", got {}",
                        other.map_or("nothing".into(), |o| format!("{o:?}"))
                    )))
                }
            }
            let f = t
                .get("function")
                .filter(|f| f.is_object())
                .ok_or_else(|| BindError::Invalid(format!("`tools[{i}].function` must be an object")))?;
            let name = str_field(f, "name", i)?.unwrap_or_default();
            let description = str_field(f, "description", i)?;
            check_tool(name, description, f.get("parameters").cloned(), i).map_err(|e| shape_error(style, e))
        })
        .collect()
}

/// `tool_choice`: a mode, or `{"type": "function", "function": {"name": ...}}`.
fn tool_choice(style: Style, v: &Value) -> Result<ToolChoice, BindError> {
    if let Some(mode) = v.as_str() {
        return ToolChoice::from_mode(mode).map_err(|e| shape_error(style, e));
    }
    let named = (v.get("type").and_then(Value::as_str) == Some("function"))
        .then(|| v.get("function").and_then(|f| f.get("name")).and_then(Value::as_str))
        .flatten();
    match named {
        Some(n) => Ok(ToolChoice::Named(n.to_string())),
        None => Err(invalid(
            style,
            "`tool_choice` must be none, auto, required or {\"type\": \"function\", \"function\": {\"name\": ...}}",
        )),
    }
}

/// An OpenAI-style `response_format` as a constraint (`text`: none).
fn constraint(style: Style, f: &Value) -> Result<Option<Constraint>, BindError> {
    let name = style.name("response_format");
    let bad = || {
        BindError::Invalid(format!(
            "`{name}` must be {{\"type\": \"json_object\"}}, {{\"type\": \"json_schema\", \"json_schema\": {{\"schema\": {{...}}}}}}, {{\"type\": \"grammar\", \"grammar\": \"...\"}} or {{\"type\": \"text\"}}"
        ))
    };
    match f.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(Constraint::JsonObject)),
        Some("json_schema") => match f.get("json_schema").map(|j| j.get("schema")) {
            Some(None | Some(Value::Null)) => Ok(Some(Constraint::JsonObject)),
            Some(Some(schema @ Value::Object(_))) => Ok(Some(Constraint::JsonSchema(schema.clone()))),
            _ => Err(bad()),
        },
        Some("grammar") => match f.get("grammar").and_then(Value::as_str) {
            Some(g) => Ok(Some(Constraint::Lark(g.to_string()))),
            None => Err(bad()),
        },
        _ => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn err(o: GenOptions, style: Style, chat: bool) -> String {
        o.shape(style, chat).err().map(|e| e.to_string()).unwrap_or_default()
    }

    fn weather() -> Value {
        json!([{"type": "function", "function": {"name": "get_weather", "parameters": {
            "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])
    }

    #[test]
    fn tools_and_choices_become_a_shape() {
        let o = GenOptions { tools: Some(weather()), ..GenOptions::default() };
        let s = o.shape(Style::Snake, true).ok();
        assert_eq!(
            s.as_ref().map(|s| (s.tools.len(), s.choice.clone(), s.parallel)),
            Some((1, ToolChoice::Auto, true))
        );
        let o = GenOptions {
            tools: Some(weather()),
            tool_choice: Some(json!({"type": "function", "function": {"name": "get_weather"}})),
            parallel_tool_calls: Some(false),
            ..GenOptions::default()
        };
        let s = o.shape(Style::Snake, true).ok();
        assert_eq!(s.map(|s| (s.choice, s.parallel)), Some((ToolChoice::Named("get_weather".into()), false)));
        assert_eq!(GenOptions::default().shape(Style::Snake, true).ok().map(|s| s.choice), Some(ToolChoice::None));
    }

    #[test]
    fn formats_become_constraints() {
        let f = |v| GenOptions { response_format: Some(v), ..GenOptions::default() }.shape(Style::Snake, false);
        let schema = json!({"type": "object"});
        let s = f(json!({"type": "json_schema", "json_schema": {"schema": schema}})).ok();
        assert_eq!(s.and_then(|s| s.format), Some(Constraint::JsonSchema(schema)));
        assert_eq!(f(json!({"type": "json_object"})).ok().and_then(|s| s.format), Some(Constraint::JsonObject));
        assert!(f(json!({"type": "text"})).is_ok_and(|s| s.format.is_none()));
        assert!(f(json!({"type": "json_schema", "json_schema": {"schema": 3}})).is_err());
    }

    #[test]
    fn bad_shapes_are_named_in_the_callers_style() {
        let rf = GenOptions { response_format: Some(json!({"type": "xml"})), ..GenOptions::default() };
        assert!(err(rf, Style::Camel, true).starts_with("`responseFormat` must be"));
        let raw = GenOptions { tools: Some(weather()), ..GenOptions::default() };
        assert_eq!(err(raw, Style::Snake, false), "`tools` applies to chat messages, not to a raw prompt");
        let choice = GenOptions { tools: Some(weather()), tool_choice: Some(json!("often")), ..GenOptions::default() };
        assert!(err(choice, Style::Camel, true).starts_with("`toolChoice` must be none, auto"));
        let unknown = GenOptions {
            tools: Some(weather()),
            tool_choice: Some(json!({"type": "function", "function": {"name": "nope"}})),
            ..GenOptions::default()
        };
        assert!(err(unknown, Style::Snake, true).contains("\"nope\", which is not among `tools`"));
        let no_tools = GenOptions { tool_choice: Some(json!("required")), ..GenOptions::default() };
        assert!(err(no_tools, Style::Snake, true).contains("requires a call"));
        let bad_name = GenOptions {
            tools: Some(json!([{"type": "function", "function": {"name": "get weather"}}])),
            ..GenOptions::default()
        };
        assert!(err(bad_name, Style::Snake, true).starts_with("`tools[0].function.name` must be"));
        let bad_type = GenOptions { tools: Some(json!([{"type": "retrieval"}])), ..GenOptions::default() };
        assert!(err(bad_type, Style::Snake, true).starts_with("`tools[0].type` must be \"function\""));
        let both = GenOptions {
            tools: Some(weather()),
            tool_choice: Some(json!("required")),
            response_format: Some(json!({"type": "json_object"})),
            ..GenOptions::default()
        };
        assert!(err(both, Style::Camel, true).starts_with("`responseFormat` and a required `toolChoice`"));
        let effort = GenOptions { reasoning_effort: Some("max".into()), ..GenOptions::default() };
        assert!(effort.template_vars(Style::Camel).is_err_and(|e| e.to_string().starts_with("`reasoningEffort`")));
    }
}
