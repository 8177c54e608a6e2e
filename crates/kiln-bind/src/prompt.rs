//! Prompts as callers give them: raw text, token ids, or chat messages.

use kiln_engine::{ChatMessage, ChatPrompt, EngineHandle, Prompt};

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

/// A conversation given as JSON (`[{"role": "user", "content": "Hi"}, ...]`,
/// OpenAI's shape, `tool_calls` and `tool_call_id` included) with optional
/// tool definitions, to render with the model's chat template.
pub fn chat_prompt(messages: serde_json::Value, tools: Option<serde_json::Value>) -> Result<Prompt, BindError> {
    let messages: Vec<ChatMessage> = serde_json::from_value(messages).map_err(|e| {
        BindError::Invalid(format!("`messages` must be a list of {{\"role\": ..., \"content\": ...}} objects: {e}"))
    })?;
    if messages.is_empty() {
        return Err(BindError::Invalid("`messages` must not be empty".into()));
    }
    Ok(Prompt::Chat(ChatPrompt { messages, tools, ..ChatPrompt::default() }))
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
        let p = chat_prompt(serde_json::json!([{"role": "user", "content": "Hi"}]), None);
        assert!(matches!(p, Ok(Prompt::Chat(c)) if c.messages == [ChatMessage::new("user", "Hi")]));
        let bad = chat_prompt(serde_json::json!([{"content": "Hi"}]), None).err().map(|e| e.to_string());
        assert!(bad.is_some_and(|e| e.contains("`messages` must be") && e.contains("role")));
        assert!(chat_prompt(serde_json::json!([]), None).is_err());
        assert!(chat_prompt(serde_json::json!("Hi"), None).is_err());
    }

    #[test]
    fn token_inputs_are_range_checked() {
        assert_eq!(Input::Tokens(vec![1, 2]).prompt().ok(), Some(Prompt::Tokens(vec![1, 2])));
        assert!(Input::Tokens(vec![-1]).prompt().is_err());
        assert!(Input::Tokens(vec![1 << 40]).prompt().is_err());
    }
}
