//! [`GoChatTemplate`]: an Ollama Modelfile `TEMPLATE` (Go `text/template`,
//! run by [`kiln_gotmpl`]) applied to a conversation as Ollama applies it.
//!
//! * A template that reads `.Messages` gets the whole conversation once:
//!   `.Messages` (consecutive messages of one role, tool results aside,
//!   joined with a blank line), `.System` (every system message, joined
//!   likewise), `.Tools`, `.Response` (empty), `.Think`, `.ThinkLevel`,
//!   `.IsThinkSet`. Messages have `.Role`, `.Content`, `.Thinking`,
//!   `.ToolCalls` (`.ID`, `.Function.Index`, `.Function.Name`,
//!   `.Function.Arguments`, which prints as JSON), `.ToolName`,
//!   `.ToolCallID`; tools have Ollama's shape (`.Function.Parameters.Properties`
//!   a map of properties, each printing as JSON).
//! * An older template (`.System`, `.Prompt`, `.Response` only) runs once
//!   per exchange; for the last one it stops right after `{{ .Response }}`,
//!   so the answer continues from there. A template that reads neither
//!   messages nor a response gets `{{ .Response }}` added at its end.

use std::rc::Rc;

use kiln_gotmpl::{Field, Limits, Repr, Struct, Template, Value};
use serde_json::Map;

use crate::chat::ChatMessage;
use crate::error::{Result, TokenizeError};

/// A parsed Go chat template.
#[derive(Debug, Clone)]
pub struct GoChatTemplate {
    template: Template,
    /// It reads `.Messages` (else the per-exchange form).
    messages: bool,
}

impl GoChatTemplate {
    /// Parses a template; the error names the line and column.
    pub fn parse(source: &str) -> std::result::Result<Self, kiln_gotmpl::Error> {
        let mut template = Template::parse(source)?;
        let messages = template.mentions("messages");
        if !messages && !template.mentions("response") {
            template.append_field("Response");
        }
        Ok(Self { template, messages })
    }

    /// The source text.
    pub fn source(&self) -> &str {
        self.template.source()
    }

    /// Whether the template reads `.Tools` (else tools go into the system
    /// prompt, as for a Jinja template without them).
    pub fn takes_tools(&self) -> bool {
        self.template.mentions("tools")
    }

    /// Renders a conversation. `tools` is OpenAI's list (`[{"type":
    /// "function", "function": {...}}]`); `vars` may hold `enable_thinking`
    /// and `reasoning_effort` (`.Think`, `.ThinkLevel`, `.IsThinkSet`).
    pub fn render(
        &self,
        messages: &[ChatMessage],
        tools: Option<&serde_json::Value>,
        vars: &Map<String, serde_json::Value>,
    ) -> Result<String> {
        let err = |e: kiln_gotmpl::Error| TokenizeError::Template(e.to_string());
        let (system, collated) = collate(messages);
        let think = think(vars);
        // One budget for the whole prompt, however many renders make it.
        let mut budget = Limits::default();
        if self.messages {
            let mut data = vec![
                ("System".to_string(), Value::from(system)),
                ("Messages".to_string(), Value::list(collated.iter().map(message).collect())),
                ("Tools".to_string(), tools_value(tools)),
                ("Response".to_string(), Value::from("")),
            ];
            data.extend(think);
            return self.template.render_within(&Value::map(data), &mut budget).map_err(err);
        }
        let exchange = |system: &str, prompt: &str, response: &str| {
            let mut data = vec![
                ("System".to_string(), Value::from(system)),
                ("Prompt".to_string(), Value::from(prompt)),
                ("Response".to_string(), Value::from(response)),
            ];
            data.extend(think.iter().cloned());
            Value::map(data)
        };
        let mut out = String::new();
        let (mut system, mut prompt, mut response) = (String::new(), String::new(), String::new());
        for m in &collated {
            let flush = match m.role.as_str() {
                "system" => !prompt.is_empty() || !response.is_empty(),
                "user" => !response.is_empty(),
                _ => false,
            };
            if flush {
                let data = exchange(&system, &prompt, &response);
                out.push_str(&self.template.render_within(&data, &mut budget).map_err(err)?);
                (system, prompt, response) = Default::default();
            }
            match m.role.as_str() {
                "system" => system = m.content.clone(),
                "user" => prompt = m.content.clone(),
                "assistant" => response = m.content.clone(),
                _ => {}
            }
        }
        let last = self.template.cut_after_field("Response");
        out.push_str(&last.render_within(&exchange(&system, &prompt, &response), &mut budget).map_err(err)?);
        Ok(out)
    }
}

/// Every system message's text, and the conversation with consecutive
/// messages of one role (tool results aside) joined by a blank line.
fn collate(messages: &[ChatMessage]) -> (String, Vec<ChatMessage>) {
    let system: Vec<&str> = messages.iter().filter(|m| m.role == "system").map(|m| m.content.as_str()).collect();
    let mut out: Vec<ChatMessage> = Vec::new();
    for m in messages {
        match out.last_mut() {
            Some(prev) if prev.role == m.role && m.role != "tool" => {
                prev.content.push_str("\n\n");
                prev.content.push_str(&m.content);
            }
            _ => out.push(m.clone()),
        }
    }
    (system.join("\n\n"), out)
}

/// `.Think`, `.ThinkLevel`, `.IsThinkSet` from the request's
/// `enable_thinking` / `reasoning_effort`.
fn think(vars: &Map<String, serde_json::Value>) -> Vec<(String, Value)> {
    let level = vars.get("reasoning_effort").and_then(|v| v.as_str()).unwrap_or("");
    let enabled = vars.get("enable_thinking").and_then(|v| v.as_bool());
    let set = enabled.is_some() || !level.is_empty();
    let on = enabled.unwrap_or(false) || !level.is_empty();
    vec![
        ("Think".to_string(), Value::Bool(on)),
        ("ThinkLevel".to_string(), Value::from(level)),
        ("IsThinkSet".to_string(), Value::Bool(set)),
    ]
}

fn strukt(type_name: &'static str, fields: Vec<Field>, pointer: bool, repr: Repr) -> Value {
    Value::Struct(Rc::new(Struct { type_name, fields, pointer, repr }))
}

fn text(v: Option<&serde_json::Value>) -> Value {
    Value::from(v.and_then(|v| v.as_str()).unwrap_or(""))
}

/// A message as Ollama's templates see it.
fn message(m: &ChatMessage) -> Value {
    let calls: Vec<Value> = m
        .tool_calls
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let args = match &c.function.arguments {
                serde_json::Value::String(s) => serde_json::from_str(s).unwrap_or(serde_json::Value::Null),
                other => other.clone(),
            };
            let args = match Value::from_json(&args) {
                m @ Value::Map(_) => m,
                _ => Value::map([]),
            };
            let function = strukt(
                "template.templateToolCallFunction",
                vec![
                    Field::new("Index", Value::Int(i as i64)),
                    Field::new("Name", Value::from(c.function.name.as_str())),
                    Field::new("Arguments", args.with_repr(Repr::Json)),
                ],
                false,
                Repr::Go,
            );
            strukt(
                "template.templateToolCall",
                vec![Field::new("ID", Value::from(c.id.as_str())), Field::new("Function", function)],
                false,
                Repr::Go,
            )
        })
        .collect();
    let calls = if calls.is_empty() { Value::nil_list() } else { Value::list(calls) };
    let is_tool = m.role == "tool";
    strukt(
        "*template.templateMessage",
        vec![
            Field::new("Role", Value::from(m.role.as_str())),
            Field::new("Content", Value::from(m.content.as_str())),
            Field::new("Thinking", Value::from(m.reasoning_content.as_deref().unwrap_or(""))),
            Field::new("Images", Value::nil_list()),
            Field::new("ToolCalls", calls),
            Field::new("ToolName", Value::from(if is_tool { m.name.as_deref().unwrap_or("") } else { "" })),
            Field::new("ToolCallID", Value::from(m.tool_call_id.as_deref().unwrap_or(""))),
        ],
        true,
        Repr::Go,
    )
}

/// OpenAI's tool list in Ollama's template shape (prints as JSON).
fn tools_value(tools: Option<&serde_json::Value>) -> Value {
    let Some(list) = tools.and_then(|t| t.as_array()) else {
        return Value::nil_list().with_repr(Repr::Json);
    };
    Value::list(list.iter().map(tool).collect()).with_repr(Repr::Json)
}

fn any(v: Option<&serde_json::Value>) -> Value {
    v.map_or(Value::Nil, Value::from_json)
}

fn strings(v: Option<&serde_json::Value>) -> Value {
    match v.and_then(|v| v.as_array()) {
        Some(a) => Value::list(a.iter().map(|s| text(Some(s))).collect()),
        None => Value::nil_list(),
    }
}

fn tool(t: &serde_json::Value) -> Value {
    let f = t.get("function");
    let p = f.and_then(|f| f.get("parameters"));
    let parameters = strukt(
        "template.templateToolFunctionParameters",
        vec![
            Field::tagged("Type", "type", false, text(p.and_then(|p| p.get("type")))),
            Field::tagged("Defs", "$defs", true, any(p.and_then(|p| p.get("$defs")))),
            Field::tagged("Items", "items", true, any(p.and_then(|p| p.get("items")))),
            Field::tagged("Required", "required", true, strings(p.and_then(|p| p.get("required")))),
            Field::tagged("Properties", "properties", false, properties(p.and_then(|p| p.get("properties")))),
        ],
        false,
        Repr::Go,
    );
    let function = strukt(
        "template.templateToolFunction",
        vec![
            Field::tagged("Name", "name", false, text(f.and_then(|f| f.get("name")))),
            Field::tagged("Description", "description", false, text(f.and_then(|f| f.get("description")))),
            Field::tagged("Parameters", "parameters", false, parameters),
        ],
        false,
        Repr::Go,
    );
    strukt(
        "template.templateTool",
        vec![
            Field::tagged("Type", "type", false, text(t.get("type"))),
            Field::tagged("Items", "items", true, any(t.get("items"))),
            Field::tagged("Function", "function", false, function),
        ],
        false,
        Repr::Json,
    )
}

/// A JSON schema's `properties` as a map of Ollama's `api.ToolProperty`.
fn properties(v: Option<&serde_json::Value>) -> Value {
    let entries = v.and_then(|v| v.as_object()).map(|o| o.iter().map(|(k, p)| (k.clone(), property(p))));
    Value::map(entries.into_iter().flatten()).with_repr(Repr::Json)
}

fn property(p: &serde_json::Value) -> Value {
    let types = match p.get("type") {
        Some(serde_json::Value::String(s)) => Value::list(vec![Value::from(s.as_str())]),
        Some(a @ serde_json::Value::Array(_)) => strings(Some(a)),
        _ => Value::nil_list(),
    };
    let any_of = match p.get("anyOf").and_then(|a| a.as_array()) {
        Some(a) => Value::list(a.iter().map(property).collect()),
        None => Value::nil_list(),
    };
    let enum_values = match p.get("enum").and_then(|a| a.as_array()) {
        Some(a) => Value::list(a.iter().map(Value::from_json).collect()),
        None => Value::nil_list(),
    };
    let nested = match p.get("properties") {
        Some(n) => properties(Some(n)),
        None => Value::Nil,
    };
    strukt(
        "api.ToolProperty",
        vec![
            Field::tagged("AnyOf", "anyOf", true, any_of),
            Field::tagged("Type", "type", true, types.with_repr(Repr::TypeNames)),
            Field::tagged("Items", "items", true, any(p.get("items"))),
            Field::tagged("Description", "description", true, text(p.get("description"))),
            Field::tagged("Enum", "enum", true, enum_values),
            Field::tagged("Properties", "properties", true, nested),
            Field::tagged("Required", "required", true, strings(p.get("required"))),
        ],
        false,
        Repr::Go,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::{TemplateFunctionCall, TemplateToolCall};
    use serde_json::json;

    fn render(
        src: &str,
        messages: &[ChatMessage],
        tools: Option<&serde_json::Value>,
        vars: serde_json::Value,
    ) -> String {
        let t = GoChatTemplate::parse(src).unwrap();
        t.render(messages, tools, vars.as_object().unwrap()).unwrap()
    }

    #[test]
    fn messages_are_collated_and_system_gathered() {
        let msgs = [
            ChatMessage::new("system", "A"),
            ChatMessage::new("system", "B"),
            ChatMessage::new("user", "one"),
            ChatMessage::new("user", "two"),
            ChatMessage::new("tool", "r1"),
            ChatMessage::new("tool", "r2"),
        ];
        let out =
            render("{{ .System }}|{{ range .Messages }}{{ .Role }}={{ .Content }};{{ end }}", &msgs, None, json!({}));
        assert_eq!(out, "A\n\nB|system=A\n\nB;user=one\n\ntwo;tool=r1;tool=r2;");
    }

    #[test]
    fn tools_calls_and_thinking_in_ollamas_shapes() {
        let tools = json!([{"type": "function", "function": {"name": "get_weather", "description": "Weather <now>",
            "parameters": {"type": "object", "required": ["city"], "properties": {
                "city": {"type": "string", "description": "City"},
                "days": {"type": ["integer", "null"]}}}}}]);
        let mut call = ChatMessage::new("assistant", "");
        call.tool_calls.push(TemplateToolCall {
            id: "call_1".into(),
            kind: "function".into(),
            function: TemplateFunctionCall {
                name: "get_weather".into(),
                arguments: json!({"city": "Paris", "days": 2}),
            },
        });
        let mut result = ChatMessage::new("tool", "sunny");
        result.name = Some("get_weather".into());
        result.tool_call_id = Some("call_1".into());
        let msgs = [ChatMessage::new("user", "Weather?"), call, result];
        let t = r#"{{- if .Tools }}{{ range .Tools }}{{ .Function.Name }}({{ range $k, $p := .Function.Parameters.Properties }}{{ $k }}: {{ $p.Type }} / {{ toTypeScriptType $p }}, {{ end }})
{{ . }}
{{ end }}{{ end }}
{{- range .Messages }}{{ .Role }}:{{ range .ToolCalls }}{{ .Function.Name }}{{ .Function.Arguments }}[{{ .Function.Arguments.city }}]{{ end }}{{ .ToolName }}{{ .Content }}
{{ end }}{{ if .Think }}think {{ .ThinkLevel }}{{ end }}"#;
        let out = render(t, &msgs, Some(&tools), json!({"reasoning_effort": "high"}));
        let want = "get_weather(city: string / string, days: [integer null] / number | null, )\n\
            {\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Weather \\u003cnow\\u003e\",\
            \"parameters\":{\"type\":\"object\",\"required\":[\"city\"],\"properties\":{\"city\":{\"type\":\"string\",\
            \"description\":\"City\"},\"days\":{\"type\":[\"integer\",\"null\"]}}}}}\n\
            user:Weather?\nassistant:get_weather{\"city\":\"Paris\",\"days\":2}[Paris]\ntool:get_weathersunny\nthink high";
        assert_eq!(out, want);
        // No tools: `.Tools` is empty and prints as JSON null; thinking unset.
        let t = "{{ len .Messages }} {{ if .Tools }}t{{ end }}{{ .Tools }} {{ .Think }} {{ .IsThinkSet }}";
        assert_eq!(render(t, &msgs, None, json!({})), "3 null false false");
        let t = "{{ .Tools }} {{ .Think }} {{ .IsThinkSet }} {{ .Prompt }}";
        assert_eq!(render(t, &msgs, None, json!({"enable_thinking": false})), "<no value> false true Weather?");
        assert!(GoChatTemplate::parse("{{ $.Tools }}").unwrap().takes_tools());
        assert!(!GoChatTemplate::parse("{{ .Prompt }}").unwrap().takes_tools());
    }

    #[test]
    fn the_older_form_runs_per_exchange() {
        let t = "{{ if .System }}<s>{{ .System }}</s>{{ end }}[U]{{ .Prompt }}[A]{{ .Response }}[/A]";
        let msgs = [
            ChatMessage::new("system", "S"),
            ChatMessage::new("user", "1"),
            ChatMessage::new("assistant", "2"),
            ChatMessage::new("user", "3"),
        ];
        assert_eq!(render(t, &msgs, None, json!({})), "<s>S</s>[U]1[A]2[/A][U]3[A]");
        // An answer last is continued; a template without `.Response` gets it added.
        let msgs = [ChatMessage::new("user", "1"), ChatMessage::new("assistant", "par")];
        assert_eq!(render(t, &msgs, None, json!({})), "[U]1[A]par");
        assert_eq!(render("Q: {{ .Prompt }} A: ", &msgs, None, json!({})), "Q: 1 A: par");
    }

    #[test]
    fn the_exchanges_of_the_older_form_share_one_budget() {
        // Each exchange runs ~100,000 steps: fine alone, not 50 times.
        let t = GoChatTemplate::parse("{{ range 50000 }}{{ end }}{{ .Prompt }}{{ .Response }}").unwrap();
        let turn = [ChatMessage::new("user", "q"), ChatMessage::new("assistant", "a")];
        assert!(t.render(&turn, None, &Map::new()).is_ok());
        let long: Vec<ChatMessage> = turn.iter().cycle().take(100).cloned().collect();
        let e = t.render(&long, None, &Map::new()).unwrap_err().to_string();
        assert!(e.contains("steps"), "{e}");
    }

    #[test]
    fn errors_say_where() {
        let e = GoChatTemplate::parse("{{ range .Messages }}\n  {{ .Content }").unwrap_err().to_string();
        assert!(e.contains("line 2, column 15"), "{e}");
        let t = GoChatTemplate::parse("{{ range .Messages }}{{ .Nope }}{{ end }}").unwrap();
        let e = t.render(&[ChatMessage::new("user", "hi")], None, &Map::new()).unwrap_err().to_string();
        assert!(e.contains("line 1, column 25") && e.contains("can't evaluate field Nope"), "{e}");
    }
}
