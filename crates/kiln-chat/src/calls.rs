//! Reading calls out of a recognised block: the JSON (or Python-like) text between a
//! format's markers. Every reader is all-or-nothing: `None` leaves the block as content.

use serde_json::{Map, Value};

use crate::ToolCall;

/// A call from a JSON object with "name" and "arguments" (or "parameters"); arguments may
/// be an object, a string holding one, or missing (`{}`). An OpenAI-style
/// `{"function": {...}}` wrapper is accepted too.
pub(crate) fn call_from_value(v: &Value) -> Option<ToolCall> {
    let obj = v.as_object()?;
    if let Some(inner @ Value::Object(_)) = obj.get("function") {
        if !obj.contains_key("name") {
            return call_from_value(inner);
        }
    }
    let name = obj.get("name")?.as_str()?.trim();
    if name.is_empty() {
        return None;
    }
    let args = obj.get("arguments").or_else(|| obj.get("parameters"));
    Some(ToolCall { name: name.to_string(), arguments: arguments_text(args)? })
}

/// Compact JSON text of an arguments value: an object, a string holding an object's JSON,
/// or nothing (`{}`).
pub(crate) fn arguments_text(args: Option<&Value>) -> Option<String> {
    let obj = match args {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(v @ Value::Object(_)) => v.clone(),
        Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
            Ok(v @ Value::Object(_)) => v,
            _ => return None,
        },
        Some(_) => return None,
    };
    serde_json::to_string(&obj).ok()
}

/// Calls from one JSON value: an object, or a non-empty array of objects.
fn calls_from_value(v: &Value) -> Option<Vec<ToolCall>> {
    match v {
        Value::Array(items) if !items.is_empty() => items.iter().map(call_from_value).collect(),
        Value::Object(_) => Some(vec![call_from_value(v)?]),
        _ => None,
    }
}

/// JSON values one after another, separated by whitespace and, if `sep` is given, by that
/// character; `None` unless the whole text is such a sequence of at least one value.
fn json_sequence(text: &str, sep: Option<char>) -> Option<Vec<Value>> {
    let mut rest = text.trim();
    let mut values = Vec::new();
    while !rest.is_empty() {
        let (v, used) = first_json(rest)?;
        values.push(v);
        rest = rest[used..].trim_start();
        if let Some(c) = sep {
            rest = rest.strip_prefix(c).unwrap_or(rest).trim_start();
        }
    }
    (!values.is_empty()).then_some(values)
}

/// The JSON value at the start of `text` and the bytes it spans.
fn first_json(text: &str) -> Option<(Value, usize)> {
    let mut it = serde_json::Deserializer::from_str(text).into_iter::<Value>();
    let v = it.next()?.ok()?;
    Some((v, it.byte_offset()))
}

/// Inside `<tool_call>...</tool_call>`: one object (an array of them is accepted).
pub(crate) fn hermes_block(body: &str) -> Option<Vec<ToolCall>> {
    let values = json_sequence(body, None)?;
    match values.as_slice() {
        [v] => calls_from_value(v),
        _ => None,
    }
}

/// A whole Llama 3 answer: JSON objects separated by `;`.
pub(crate) fn llama_json(text: &str) -> Option<Vec<ToolCall>> {
    json_sequence(text, Some(';'))?.iter().map(call_from_value).collect()
}

/// After `<|python_tag|>`: JSON objects separated by `;`, or built-in calls written
/// `name.call(key="value", n=1)`, one per line.
pub(crate) fn llama_python_tag(body: &str) -> Option<Vec<ToolCall>> {
    let mut body = body.trim();
    for end in ["<|eom_id|>", "<|eot_id|>"] {
        body = body.strip_suffix(end).unwrap_or(body).trim_end();
    }
    if body.starts_with('{') {
        return llama_json(body);
    }
    body.lines().map(str::trim).filter(|l| !l.is_empty()).map(python_call).collect()
}

/// `name.call(k="v", n=1)` or `name(k="v")` → call `name` with `{"k":"v","n":1}`.
fn python_call(line: &str) -> Option<ToolCall> {
    let open = line.find('(')?;
    let inner = line[open + 1..].strip_suffix(')')?;
    let head = line[..open].trim();
    let name = head.strip_suffix(".call").unwrap_or(head);
    let name_ok = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    if name.is_empty() || !name.chars().all(name_ok) {
        return None;
    }
    let mut args = Map::new();
    let mut rest = inner.trim();
    while !rest.is_empty() {
        let eq = rest.find('=')?;
        let key = rest[..eq].trim();
        if key.is_empty() || !key.chars().all(name_ok) {
            return None;
        }
        let (value, used) = python_value(rest[eq + 1..].trim_start())?;
        args.insert(key.to_string(), value);
        let after = rest[eq + 1..].trim_start();
        rest = after[used..].trim_start();
        rest = match rest.strip_prefix(',') {
            Some(r) => r.trim_start(),
            None if rest.is_empty() => rest,
            None => return None,
        };
    }
    Some(ToolCall { name: name.to_string(), arguments: serde_json::to_string(&Value::Object(args)).ok()? })
}

/// A Python literal at the start of `s`: a quoted string, or a bare token up to the next
/// comma (JSON, or `True`/`False`/`None`). Returns the value and the bytes it spans.
fn python_value(s: &str) -> Option<(Value, usize)> {
    let quote = s.chars().next()?;
    if quote == '"' || quote == '\'' {
        let mut out = String::new();
        let mut chars = s.char_indices().skip(1);
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    let (_, e) = chars.next()?;
                    out.push(match e {
                        'n' => '\n',
                        't' => '\t',
                        other => other,
                    });
                }
                c if c == quote => return Some((Value::String(out), i + 1)),
                c => out.push(c),
            }
        }
        return None;
    }
    let end = s.find(',').unwrap_or(s.len());
    let token = s[..end].trim();
    let value = match token {
        "True" => Value::Bool(true),
        "False" => Value::Bool(false),
        "None" => Value::Null,
        t => serde_json::from_str(t).ok()?,
    };
    Some((value, end))
}

/// After `[TOOL_CALLS]`: a JSON array of calls (v3) or `name[ARGS]{...}` (v11+; an
/// optional `[CALL_ID]id` after the name is skipped), possibly several in a row.
pub(crate) fn mistral_block(body: &str) -> Option<Vec<ToolCall>> {
    let body = body.trim();
    if body.starts_with('[') || body.starts_with('{') {
        let values = json_sequence(body, None)?;
        return match values.as_slice() {
            [v] => calls_from_value(v),
            _ => None,
        };
    }
    let mut calls = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        let args_at = rest.find("[ARGS]")?;
        let head = &rest[..args_at];
        let name = head.split("[CALL_ID]").next().unwrap_or(head).trim();
        if name.is_empty() || name.contains(char::is_whitespace) {
            return None;
        }
        let after = rest[args_at + "[ARGS]".len()..].trim_start();
        let (v, used) = first_json(after)?;
        if !v.is_object() {
            return None;
        }
        calls.push(ToolCall { name: name.to_string(), arguments: serde_json::to_string(&v).ok()? });
        rest = after[used..].trim_start();
    }
    (!calls.is_empty()).then_some(calls)
}

/// A whole answer in no known format: one JSON object or array of calls, bare or inside
/// a ```` ``` ```` / ```` ```json ```` fence.
pub(crate) fn generic_whole(text: &str) -> Option<Vec<ToolCall>> {
    let mut body = text.trim();
    if let Some(fenced) = body.strip_prefix("```") {
        let first_line_end = fenced.find('\n')?;
        let lang = fenced[..first_line_end].trim();
        if !(lang.is_empty() || lang.eq_ignore_ascii_case("json")) {
            return None;
        }
        body = fenced[first_line_end + 1..].trim_end().strip_suffix("```")?;
    }
    let values = json_sequence(body, None)?;
    match values.as_slice() {
        [v] => calls_from_value(v),
        _ => None,
    }
}

/// A harmony call body: the arguments object's JSON.
pub(crate) fn harmony_args(body: &str) -> Option<String> {
    let values = json_sequence(body, None)?;
    match values.as_slice() {
        [v @ Value::Object(_)] => serde_json::to_string(v).ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(name: &str, args: &str) -> ToolCall {
        ToolCall { name: name.into(), arguments: args.into() }
    }

    #[test]
    fn hermes_bodies() {
        let body = "\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n";
        assert_eq!(hermes_block(body), Some(vec![call("get_weather", r#"{"city":"Paris"}"#)]));
        let stringly = r#"{"name": "f", "arguments": "{\"a\": 1}"}"#;
        assert_eq!(hermes_block(stringly), Some(vec![call("f", r#"{"a":1}"#)]));
        assert_eq!(hermes_block(r#"{"name": "now"}"#), Some(vec![call("now", "{}")]));
        assert_eq!(hermes_block(r#"{"name": "f", "arguments": {"a": 1}"#), None);
        assert_eq!(hermes_block(r#"{"arguments": {}}"#), None);
        assert_eq!(hermes_block(r#"{"name": "f", "arguments": [1]}"#), None);
        assert_eq!(hermes_block("{} {}"), None);
    }

    #[test]
    fn llama_bodies() {
        let two = r#"{"name": "a", "parameters": {"x": 1}}; {"name": "b", "parameters": {}}"#;
        assert_eq!(llama_json(two), Some(vec![call("a", r#"{"x":1}"#), call("b", "{}")]));
        assert_eq!(llama_json("I think so."), None);
        let builtin = r#"brave_search.call(query="weather in Menlo Park, CA")"#;
        assert_eq!(
            llama_python_tag(builtin),
            Some(vec![call("brave_search", r#"{"query":"weather in Menlo Park, CA"}"#)])
        );
        let mixed = r#"wolfram_alpha.call(query='2+2', n=3, exact=True)"#;
        // key order follows serde_json's map (sorted, or as written with preserve_order)
        let parsed = llama_python_tag(mixed).unwrap();
        let args: Value = serde_json::from_str(&parsed[0].arguments).unwrap();
        assert_eq!(parsed[0].name, "wolfram_alpha");
        assert_eq!(args, serde_json::json!({"query": "2+2", "n": 3, "exact": true}));
        assert_eq!(llama_python_tag("print(1 + 1)"), None);
        let eom = "{\"name\": \"f\", \"parameters\": {}}<|eom_id|>";
        assert_eq!(llama_python_tag(eom), Some(vec![call("f", "{}")]));
    }

    #[test]
    fn mistral_bodies() {
        let v3 = r#"[{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "now", "arguments": {}}]"#;
        assert_eq!(mistral_block(v3), Some(vec![call("get_weather", r#"{"city":"Paris"}"#), call("now", "{}")]));
        let v11 = r#"get_weather[ARGS]{"city": "Paris"}"#;
        assert_eq!(mistral_block(v11), Some(vec![call("get_weather", r#"{"city":"Paris"}"#)]));
        let with_id = r#"get_weather[CALL_ID]a1b2c3d4e[ARGS]{"city": "Paris"}"#;
        assert_eq!(mistral_block(with_id), Some(vec![call("get_weather", r#"{"city":"Paris"}"#)]));
        assert_eq!(mistral_block("get_weather[ARGS]{\"city\": "), None);
        assert_eq!(mistral_block("just words"), None);
    }

    #[test]
    fn generic_bodies() {
        let fenced = "```json\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n```";
        assert_eq!(generic_whole(fenced), Some(vec![call("f", r#"{"a":1}"#)]));
        assert_eq!(generic_whole("```python\nprint(1)\n```"), None);
        let arr = r#"[{"name": "f", "parameters": {}}, {"name": "g"}]"#;
        assert_eq!(generic_whole(arr), Some(vec![call("f", "{}"), call("g", "{}")]));
        assert_eq!(generic_whole(r#"{"answer": 42}"#), None);
        assert_eq!(harmony_args(r#" {"city": "Paris"} "#).as_deref(), Some(r#"{"city":"Paris"}"#));
        assert_eq!(harmony_args("{oops"), None);
    }
}
