//! Tools for templates that don't know tools.
//!
//! Many small models' templates (SmolLM2's plain ChatML, for one) ignore the `tools`
//! variable, so a request's tools would never reach the model. A server checks
//! [`template_takes_tools`] once per template; when it is false and a request declares
//! tools, it puts [`tools_preamble`] at the start of the system prompt: prepended to the
//! first message if that is a `system` message (preamble, a blank line, then the
//! client's text), otherwise as a new `system` message before all others. The answer is
//! then parsed with the same `format` (for such templates usually
//! [`ToolFormat::Generic`], which reads the `<tool_call>` blocks the preamble asks for).

use crate::{Tool, ToolFormat};

/// Whether a template renders tools: it uses the variable `tools` inside a Jinja
/// expression or statement (`{{ ... }}` / `{% ... %}`).
pub fn template_takes_tools(template: &str) -> bool {
    let mut rest = template;
    while let Some(open) = rest.find(['{']) {
        let after = &rest[open + 1..];
        let close = match after.chars().next() {
            Some('{') => "}}",
            Some('%') => "%}",
            _ => {
                rest = after;
                continue;
            }
        };
        let inner = &after[1..];
        let end = inner.find(close).unwrap_or(inner.len());
        let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
        if inner[..end].split(|c: char| !ident(c)).any(|w| w == "tools") {
            return true;
        }
        rest = &inner[end..];
    }
    false
}

/// A system-prompt preamble describing `tools` and telling the model to answer a call as
/// `format` writes it (Generic and Hermes: `<tool_call>` blocks of JSON). The text is
/// deterministic: the same tools give the same preamble, so prompt caching keeps working.
pub fn tools_preamble(tools: &[Tool], format: ToolFormat) -> String {
    let mut s = String::from(
        "You can use tools. Each available tool is described by one JSON line in the \
         <tools> section: its name, what it does, and a JSON schema of its arguments.\n\n<tools>\n",
    );
    for t in tools {
        let line = serde_json::to_string(&ToolLine {
            name: &t.name,
            description: t.description.as_deref(),
            parameters: &t.schema(),
        })
        .unwrap_or_default();
        s.push_str(&line);
        s.push('\n');
    }
    s.push_str("</tools>\n\n");
    s.push_str(match format {
        ToolFormat::Hermes | ToolFormat::Generic | ToolFormat::Harmony => {
            "To use a tool, reply with a <tool_call> block holding one JSON object with the \
             tool's \"name\" and its \"arguments\" object, exactly like this:\n\
             <tool_call>\n{\"name\": \"TOOL_NAME\", \"arguments\": {\"ARG\": \"VALUE\"}}\n</tool_call>\n\
             For several calls, write one block per call. Write nothing else in a \
             block; the tool results will come back in the next message."
        }
        ToolFormat::Llama3 => {
            "To use a tool, reply with only a JSON object with the tool's \"name\" and its \
             \"parameters\" object, exactly like this:\n\
             {\"name\": \"TOOL_NAME\", \"parameters\": {\"ARG\": \"VALUE\"}}\n\
             For several calls, separate the objects with \"; \". Write nothing else when \
             calling; the tool results will come back in the next message."
        }
        ToolFormat::Mistral => {
            "To use a tool, reply with [TOOL_CALLS] followed by a JSON array of calls, each \
             with the tool's \"name\" and its \"arguments\" object, exactly like this:\n\
             [TOOL_CALLS][{\"name\": \"TOOL_NAME\", \"arguments\": {\"ARG\": \"VALUE\"}}]\n\
             Write nothing after the array; the tool results will come back in the next message."
        }
    });
    s.push_str("\nIf no tool is needed, answer normally.");
    s
}

#[derive(serde::Serialize)]
struct ToolLine<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    parameters: &'a serde_json::Value,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{parse, ReasoningFormat};
    use serde_json::json;

    #[test]
    fn finds_tools_variable() {
        assert!(template_takes_tools("{%- if tools %}{{ tools | tojson }}{% endif %}"));
        assert!(template_takes_tools("{% for t in tools %}x{% endfor %}"));
        let chatml = "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endfor %}";
        assert!(!template_takes_tools(chatml));
        assert!(!template_takes_tools("Use tools wisely. {{ builtin_tools }}"));
        assert!(!template_takes_tools("{{ message.tools_used }} {"));
    }

    #[test]
    fn preamble_lists_tools_and_is_deterministic() {
        let tools = vec![
            Tool {
                name: "get_weather".into(),
                description: Some("Current weather in a city".into()),
                parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}}),
            },
            Tool { name: "now".into(), description: None, parameters: json!({}) },
        ];
        let p = tools_preamble(&tools, ToolFormat::Generic);
        assert_eq!(p, tools_preamble(&tools, ToolFormat::Generic));
        // the schema's own key order depends on serde_json's map features; the rest is fixed
        assert!(p.contains(r#"{"name":"get_weather","description":"Current weather in a city","parameters":{"#), "{p}");
        assert!(p.contains(r#"{"name":"now","parameters":{"type":"object"}}"#), "{p}");
        assert!(p.contains("<tool_call>"));
        assert!(tools_preamble(&tools, ToolFormat::Llama3).contains("\"parameters\": {"));
        assert!(tools_preamble(&tools, ToolFormat::Mistral).contains("[TOOL_CALLS]["));
    }

    #[test]
    fn the_example_in_the_preamble_parses() {
        for format in [ToolFormat::Generic, ToolFormat::Hermes, ToolFormat::Llama3, ToolFormat::Mistral] {
            let p = tools_preamble(&[], format);
            let start = p.find(":\n").unwrap() + 2;
            let example = p[start..].lines().take_while(|l| !l.starts_with("For") && !l.starts_with("Write"));
            let example: Vec<&str> = example.collect();
            let parsed = parse(&example.join("\n"), format, ReasoningFormat::None, true, false);
            assert_eq!(parsed.tool_calls.len(), 1, "{format:?}: {example:?}");
            assert_eq!(parsed.tool_calls[0].name, "TOOL_NAME");
        }
    }
}
