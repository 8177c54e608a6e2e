//! Prompts as callers give them: raw text, token ids, or chat messages.

use kiln_engine::{ChatMessage, ChatPrompt, EngineHandle, Prompt};
use serde_json::Value;

use crate::error::BindError;

/// A raw (untemplated) prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// Text, tokenized as is (BOS added per the model's settings).
    Text(String),
    /// Token ids, used as is.
    Tokens(Vec<i64>),
}

fn token_ids(ids: &[i64]) -> Result<Vec<u32>, BindError> {
    ids.iter()
        .map(|&id| u32::try_from(id).map_err(|_| BindError::Invalid(format!("token id {id} is out of range"))))
        .collect()
}

impl Input {
    /// The engine prompt (token ids are checked against the vocabulary at submission).
    pub fn prompt(self) -> Result<Prompt, BindError> {
        match self {
            Self::Text(s) => Ok(Prompt::Text(s)),
            Self::Tokens(t) => Ok(Prompt::Tokens(token_ids(&t)?)),
        }
    }
}

/// A conversation given as JSON, OpenAI's shape: `[{"role": "user",
/// "content": "Hi"}, ...]`, with an assistant's `tool_calls` (`{"id", "type":
/// "function", "function": {"name", "arguments"}}`, the arguments as JSON
/// text or an object), a tool message's `tool_call_id` and `name`, and
/// `reasoning_content`; to render with the model's chat template.
pub fn chat_prompt(messages: serde_json::Value) -> Result<Prompt, BindError> {
    let serde_json::Value::Array(list) = messages else {
        return Err(BindError::Invalid(
            "`messages` must be a list of {\"role\": ..., \"content\": ...} objects".into(),
        ));
    };
    if list.is_empty() {
        return Err(BindError::Invalid("`messages` must not be empty".into()));
    }
    let mut segments = Vec::new();
    let messages = list.into_iter().enumerate().map(|(i, m)| message(m, i, &mut segments)).collect::<Result<_, _>>()?;
    let chat = Prompt::Chat(ChatPrompt { messages, ..ChatPrompt::default() });
    if segments.is_empty() {
        Ok(chat)
    } else {
        Ok(Prompt::Segmented(kiln_engine::SegmentedPrompt { segments, prompt: Box::new(chat) }))
    }
}

/// The text of `messages[i].key` (`None` when absent or null).
fn text_field(m: &serde_json::Map<String, Value>, key: &str, i: usize) -> Result<Option<String>, BindError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(BindError::Invalid(format!("`messages[{i}].{key}` must be a string"))),
    }
}

/// A message's content: a string, or a list of `{"type": "text", "text":
/// ...}` parts, a part with `"cache": "segment"` going to `segments` (its
/// marker in the text).
fn content(m: &serde_json::Map<String, Value>, i: usize, segments: &mut Vec<String>) -> Result<String, BindError> {
    let Some(Value::Array(parts)) = m.get("content") else {
        return Ok(text_field(m, "content", i)?.unwrap_or_default());
    };
    let mut out = String::new();
    for (j, p) in parts.iter().enumerate() {
        let bad = |what: &str| BindError::Invalid(format!("`messages[{i}].content[{j}]` {what}"));
        if p.get("type").and_then(Value::as_str) != Some("text") {
            return Err(bad("must be a {\"type\": \"text\", \"text\": ...} part"));
        }
        let text = p.get("text").and_then(Value::as_str).ok_or_else(|| bad("needs `text`"))?;
        match p.get("cache") {
            None | Some(Value::Null) => out.push_str(text),
            Some(Value::String(s)) if s == "segment" => {
                if text.is_empty() {
                    return Err(bad("is an empty segment"));
                }
                out.push_str(&kiln_engine::segment_marker(segments.len()));
                segments.push(text.to_string());
            }
            Some(other) => return Err(bad(&format!("has `cache` {other}: only \"segment\""))),
        }
    }
    Ok(out)
}

fn message(m: Value, i: usize, segments: &mut Vec<String>) -> Result<ChatMessage, BindError> {
    let Value::Object(m) = m else {
        return Err(BindError::Invalid(format!(
            "`messages[{i}]` must be a {{\"role\": ..., \"content\": ...}} object"
        )));
    };
    const KNOWN: [&str; 6] = ["role", "content", "tool_calls", "tool_call_id", "name", "reasoning_content"];
    if let Some((k, _)) = m.iter().find(|(k, v)| !KNOWN.contains(&k.as_str()) && !v.is_null()) {
        return Err(BindError::Invalid(format!("`messages[{i}].{k}` is not supported")));
    }
    let role = text_field(&m, "role", i)?
        .filter(|r| !r.is_empty())
        .ok_or_else(|| BindError::Invalid(format!("`messages[{i}].role` is missing")))?;
    let mut out = ChatMessage::new(role, content(&m, i, segments)?);
    out.tool_call_id = text_field(&m, "tool_call_id", i)?;
    out.name = text_field(&m, "name", i)?;
    out.reasoning_content = text_field(&m, "reasoning_content", i)?;
    let calls = match m.get("tool_calls") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(c)) => c.clone(),
        Some(_) => return Err(BindError::Invalid(format!("`messages[{i}].tool_calls` must be a list"))),
    };
    for (j, c) in calls.into_iter().enumerate() {
        let f = c.get("function");
        let Some(name) = f.and_then(|f| f.get("name")).and_then(Value::as_str) else {
            return Err(BindError::Invalid(format!("`messages[{i}].tool_calls[{j}].function.name` is missing")));
        };
        let id = c.get("id").and_then(Value::as_str).map_or_else(|| format!("call_{i}_{j}"), str::to_string);
        let arguments = f.and_then(|f| f.get("arguments")).cloned().unwrap_or(Value::Null);
        let field = format!("messages[{i}].tool_calls[{j}].function.arguments");
        let call = kiln_engine::answer::template_call(id, name.to_string(), arguments, &field)
            .map_err(|e| BindError::Invalid(e.to_string()))?;
        out.tool_calls.push(call);
    }
    Ok(out)
}

/// `text` as token ids, without the BOS token the model may add to prompts
/// unless `add_special`.
pub fn tokenize(engine: &EngineHandle, text: &str, add_special: bool) -> Result<Vec<u32>, BindError> {
    engine.tokenizer().encode(text, add_special).map_err(|e| kiln_engine::EngineError::Tokenizer(e.to_string()).into())
}

/// Token ids as text (special tokens written out).
pub fn detokenize(engine: &EngineHandle, ids: &[i64]) -> Result<String, BindError> {
    let ids = token_ids(ids)?;
    let vocab = engine.info().config.vocab_size;
    if let Some(bad) = ids.iter().find(|&&id| id as usize >= vocab) {
        return Err(BindError::Invalid(format!("token id {bad} is outside the vocabulary ({vocab} tokens)")));
    }
    Ok(engine.tokenizer().decode(&ids, false))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_parse_or_say_why() {
        let p = chat_prompt(serde_json::json!([{"role": "user", "content": "Hi"}]));
        assert!(matches!(p, Ok(Prompt::Chat(c)) if c.messages == [ChatMessage::new("user", "Hi")]));
        let e = |v| chat_prompt(v).err().map(|e| e.to_string()).unwrap_or_default();
        assert_eq!(e(serde_json::json!([{"content": "Hi"}])), "`messages[0].role` is missing");
        assert!(e(serde_json::json!([])).contains("must not be empty"));
        assert!(e(serde_json::json!("Hi")).starts_with("`messages` must be a list"));
        assert_eq!(
            e(serde_json::json!([{"role": "user", "content": "Hi", "image": 1}])),
            "`messages[0].image` is not supported"
        );
        let bad_args = serde_json::json!([{"role": "assistant", "content": null,
            "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{"}}]}]);
        assert!(e(bad_args).starts_with("`messages[0].tool_calls[0].function.arguments` is not valid JSON"));
    }

    #[test]
    fn earlier_calls_and_results_are_read() {
        let p = chat_prompt(serde_json::json!([
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "w", "arguments": "{\"city\": \"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        ]));
        let Ok(Prompt::Chat(c)) = p else { panic!("{p:?}") };
        assert_eq!(c.messages[1].tool_calls[0].function.arguments, serde_json::json!({"city": "Paris"}));
        assert_eq!((c.messages[1].content.as_str(), c.messages[2].tool_call_id.as_deref()), ("", Some("call_1")));
    }

    #[test]
    fn content_parts_marked_as_segments_become_segments() {
        let p = chat_prompt(serde_json::json!([{"role": "user", "content": [
            {"type": "text", "text": "doc", "cache": "segment"},
            {"type": "text", "text": " Q?"}]}]));
        let Ok(Prompt::Segmented(s)) = p else { panic!("{p:?}") };
        assert_eq!(s.segments, ["doc"]);
        let Prompt::Chat(c) = *s.prompt else { panic!("not a chat") };
        assert_eq!(c.messages[0].content, kiln_engine::segment_marker(0) + " Q?");
        let e = |v| chat_prompt(v).err().map(|e| e.to_string()).unwrap_or_default();
        let bad = serde_json::json!([{"role": "user", "content": [{"type": "text", "text": "d", "cache": "all"}]}]);
        assert!(e(bad).contains("only \"segment\""));
        let empty =
            serde_json::json!([{"role": "user", "content": [{"type": "text", "text": "", "cache": "segment"}]}]);
        assert!(e(empty).contains("empty segment"));
    }

    #[test]
    fn token_inputs_are_range_checked() {
        assert_eq!(Input::Tokens(vec![1, 2]).prompt().ok(), Some(Prompt::Tokens(vec![1, 2])));
        assert!(Input::Tokens(vec![-1]).prompt().is_err());
        assert!(Input::Tokens(vec![1 << 40]).prompt().is_err());
    }
}
