//! Grammars that force a tool call, in llguidance's Lark dialect, for
//! `tool_choice: "required"` or a named function.
//!
//! Each grammar's `start` admits exactly what the format writes for one call (or, with
//! `parallel`, one or more), with the arguments constrained by the tool's schema through
//! `%json { ... }`. Call objects are written `{"name": ..., "arguments": ...}` with the
//! name first (llguidance keeps the schema's property order). Formats:
//!
//! | format  | start                                                                      |
//! |---------|----------------------------------------------------------------------------|
//! | Hermes  | `"<tool_call>\n" CALL "\n</tool_call>"`, parallel: separated by `"\n"`       |
//! | Llama3  | `{"name": ..., "parameters": ...}`, parallel: separated by `"; "`           |
//! | Mistral | `"[TOOL_CALLS]"` then a JSON array of calls (one item unless parallel)      |
//! | Harmony | `<\|channel\|>"commentary to=functions.NAME "<\|constrain\|>"json"<\|message\|>ARGS<\|call\|>` |
//! | Generic | one call object; parallel: a JSON array of them                            |
//!
//! Harmony markers are special tokens (`<|channel|>` in Lark names the vocabulary's
//! special token, so the grammar only compiles against a harmony vocabulary); a harmony
//! message carries one call, so `parallel` changes nothing there. Mistral's
//! `[TOOL_CALLS]` is written as text: Lark can name only `<...>`-shaped special tokens,
//! and the detokenized text reads the same to the parsers.

use serde_json::Value;

use crate::{ChatError, ReasoningFormat, Tool, ToolFormat};

/// What the model must write when a call is required: a grammar in llguidance's Lark
/// dialect for `format`, allowing exactly a call (or, with `parallel`, one or more calls)
/// to one of `tools` (or only to `only` when named), the arguments valid against that
/// tool's schema via `%json{...}`.
///
/// Errors: no tools, a tool name outside `[A-Za-z0-9_.-]{1,64}`, a name declared twice,
/// `only` naming an undeclared tool, or `parameters` that is not a schema object.
pub fn call_grammar(
    format: ToolFormat,
    tools: &[Tool],
    only: Option<&str>,
    parallel: bool,
) -> Result<String, ChatError> {
    call_grammar_after_reasoning(format, tools, only, parallel, ReasoningFormat::None, false)
}

/// [`call_grammar`] that first lets the model reason as `reasoning` writes it: an
/// optional `<think>...</think>` block (required to close when `starts_in_reasoning`, as
/// the prompt opened it), or for harmony an optional analysis message
/// (`<|channel|>analysis<|message|>...<|end|><|start|>assistant`) before the call.
pub fn call_grammar_after_reasoning(
    format: ToolFormat,
    tools: &[Tool],
    only: Option<&str>,
    parallel: bool,
    reasoning: ReasoningFormat,
    starts_in_reasoning: bool,
) -> Result<String, ChatError> {
    let chosen = choose(tools, only)?;
    let mut g = String::new();
    let calls = match reasoning {
        ReasoningFormat::Think if starts_in_reasoning => {
            g.push_str("start: think_rest WS calls\n");
            "calls"
        }
        ReasoningFormat::Think => {
            g.push_str("start: (\"<think>\" think_rest WS)? calls\n");
            "calls"
        }
        ReasoningFormat::Harmony => {
            g.push_str("start: analysis? calls\n");
            g.push_str("analysis: <|channel|> \"analysis\" <|message|> ANALYSIS <|end|> <|start|> \"assistant\"\n");
            g.push_str("ANALYSIS: /(.|\\n)*/\n");
            "calls"
        }
        ReasoningFormat::None => "start",
    };
    if reasoning == ReasoningFormat::Think {
        g.push_str("think_rest[lazy]: /(.|\\n)*<\\/think>/\n");
        g.push_str("WS: /[ \\t\\r\\n]*/\n");
    }
    match format {
        ToolFormat::Hermes => {
            let call = format!("{} call {}", lit("<tool_call>\n"), lit("\n</tool_call>"));
            g.push_str(&repeat_rule(calls, &call, "\n", parallel));
            g.push_str(&format!("call: %json {}\n", compact(&any_call(&chosen, "arguments"))));
        }
        ToolFormat::Llama3 => {
            g.push_str(&repeat_rule(calls, "call", "; ", parallel));
            g.push_str(&format!("call: %json {}\n", compact(&any_call(&chosen, "parameters"))));
        }
        ToolFormat::Mistral => {
            let max = if parallel { "" } else { ", \"maxItems\": 1" };
            let array =
                format!("{{\"type\": \"array\", \"items\": {}, \"minItems\": 1{max}}}", any_call(&chosen, "arguments"));
            g.push_str(&format!("{calls}: {} call_list\n", lit("[TOOL_CALLS]")));
            g.push_str(&format!("call_list: %json {}\n", compact(&array)));
        }
        ToolFormat::Generic if parallel => {
            let array =
                format!("{{\"type\": \"array\", \"items\": {}, \"minItems\": 1}}", any_call(&chosen, "arguments"));
            g.push_str(&format!("{calls}: %json {}\n", compact(&array)));
        }
        ToolFormat::Generic => {
            g.push_str(&format!("{calls}: %json {}\n", compact(&any_call(&chosen, "arguments"))));
        }
        ToolFormat::Harmony => {
            let names: Vec<String> = (0..chosen.len()).map(|i| format!("call_{i}")).collect();
            g.push_str(&format!("{calls}: {}\n", names.join(" | ")));
            for (i, tool) in chosen.iter().enumerate() {
                let header = lit(&format!("commentary to=functions.{} ", tool.name));
                g.push_str(&format!(
                    "call_{i}: <|channel|> {header} <|constrain|> \"json\" <|message|> args_{i} <|call|>\n"
                ));
                g.push_str(&format!("args_{i}: %json {}\n", compact_tight(&tool.schema().to_string())));
            }
        }
    }
    Ok(g)
}

/// A schema's text with fixed separators (`", "`, `": "`, as `json.dumps`
/// and the templates' `tojson` write them) and no other whitespace: a call
/// is read by a program, the separators are forced (fast-forwarded), and a
/// model cannot spend its budget on blank space.
fn compact(schema: &str) -> String {
    with_guidance(
        schema,
        r#""x-guidance": {"whitespace_flexible": false, "item_separator": ", ", "key_separator": ": "}"#,
    )
}

/// [`compact`] without spaces (`{"city":"Paris"}`), as gpt-oss writes its arguments.
fn compact_tight(schema: &str) -> String {
    with_guidance(
        schema,
        r#""x-guidance": {"whitespace_flexible": false, "item_separator": ",", "key_separator": ":"}"#,
    )
}

fn with_guidance(schema: &str, guidance: &str) -> String {
    match schema.strip_prefix('{') {
        Some(rest) if rest.trim_start().starts_with('}') => format!("{{{guidance}}}"),
        Some(rest) => format!("{{{guidance}, {rest}"),
        None => schema.to_string(),
    }
}

/// `rule: item (sep item)*` when parallel, else `rule: item`.
fn repeat_rule(rule: &str, item: &str, sep: &str, parallel: bool) -> String {
    if parallel {
        format!("{rule}: {item} ({} {item})*\n", lit(sep))
    } else {
        format!("{rule}: {item}\n")
    }
}

/// A Lark string literal (Lark strings are JSON strings).
fn lit(s: &str) -> String {
    Value::String(s.to_string()).to_string()
}

/// The schema of a call object to any of `tools`, with arguments under `args_key`.
fn any_call(tools: &[&Tool], args_key: &str) -> String {
    let one = |t: &Tool| {
        format!(
            "{{\"type\": \"object\", \"properties\": {{\"name\": {{\"const\": {}}}, {}: {}}}, \"required\": [\"name\", {}], \"additionalProperties\": false}}",
            lit(&t.name),
            lit(args_key),
            t.schema(),
            lit(args_key),
        )
    };
    match tools {
        [t] => one(t),
        _ => {
            let all: Vec<String> = tools.iter().map(|t| one(t)).collect();
            format!("{{\"anyOf\": [{}]}}", all.join(", "))
        }
    }
}

/// Checks the declared tools and picks those a call may go to.
fn choose<'a>(tools: &'a [Tool], only: Option<&str>) -> Result<Vec<&'a Tool>, ChatError> {
    if tools.is_empty() {
        return Err(ChatError::NoTools);
    }
    for (i, t) in tools.iter().enumerate() {
        if !valid_name(&t.name) {
            return Err(ChatError::InvalidToolName(t.name.clone()));
        }
        if tools[..i].iter().any(|o| o.name == t.name) {
            return Err(ChatError::DuplicateTool(t.name.clone()));
        }
        if !t.schema().is_object() {
            return Err(ChatError::InvalidSchema(t.name.clone()));
        }
    }
    match only {
        None => Ok(tools.iter().collect()),
        Some(name) => match tools.iter().find(|t| t.name == name) {
            Some(t) => Ok(vec![t]),
            None => Err(ChatError::UnknownTool(name.to_string())),
        },
    }
}

/// `[A-Za-z0-9_.-]{1,64}`.
pub(crate) fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn weather() -> Tool {
        Tool {
            name: "get_weather".into(),
            description: Some("Current weather".into()),
            parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        }
    }

    fn now() -> Tool {
        Tool { name: "now".into(), description: None, parameters: json!({}) }
    }

    #[test]
    fn hermes_grammar_shape() {
        let g = call_grammar(ToolFormat::Hermes, &[weather(), now()], None, false).unwrap();
        assert!(g.starts_with("start: \"<tool_call>\\n\" call \"\\n</tool_call>\"\n"), "{g}");
        assert!(g.contains("\"anyOf\""));
        assert!(g.contains("{\"const\": \"now\"}, \"arguments\": {\"type\":\"object\"}"), "{g}");
        let g = call_grammar(ToolFormat::Hermes, &[weather(), now()], Some("now"), true).unwrap();
        assert!(!g.contains("anyOf") && !g.contains("get_weather"), "{g}");
        assert!(g.contains(")*"), "{g}");
    }

    #[test]
    fn every_format_names_the_tool() {
        for format in
            [ToolFormat::Hermes, ToolFormat::Llama3, ToolFormat::Mistral, ToolFormat::Harmony, ToolFormat::Generic]
        {
            for parallel in [false, true] {
                let g = call_grammar(format, &[weather()], None, parallel).unwrap();
                assert!(g.contains("get_weather") && g.starts_with("start:"), "{format:?}: {g}");
            }
        }
        let g = call_grammar(ToolFormat::Harmony, &[weather()], None, false).unwrap();
        assert!(g.contains("<|channel|> \"commentary to=functions.get_weather \" <|constrain|>"));
        let g = call_grammar(ToolFormat::Llama3, &[weather()], None, false).unwrap();
        assert!(g.contains("\"parameters\""));
    }

    #[test]
    fn rejects_bad_declarations() {
        let mut bad = weather();
        bad.name = "get weather".into();
        let err = call_grammar(ToolFormat::Hermes, &[bad], None, false).unwrap_err();
        assert!(matches!(err, ChatError::InvalidToolName(_)));
        assert!(err.to_string().contains("\"get weather\""));
        let err = call_grammar(ToolFormat::Hermes, &[weather()], Some("nope"), false);
        assert_eq!(err, Err(ChatError::UnknownTool("nope".into())));
        let err = call_grammar(ToolFormat::Hermes, &[weather(), weather()], None, false);
        assert_eq!(err, Err(ChatError::DuplicateTool("get_weather".into())));
        assert_eq!(call_grammar(ToolFormat::Hermes, &[], None, false), Err(ChatError::NoTools));
        let mut schema = weather();
        schema.parameters = json!("string");
        let err = call_grammar(ToolFormat::Hermes, &[schema], None, false);
        assert_eq!(err, Err(ChatError::InvalidSchema("get_weather".into())));
        assert!(!valid_name(&"a".repeat(65)) && valid_name("ns.tool-1_x"));
    }
}
