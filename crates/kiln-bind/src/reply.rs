//! A whole chat answer: content, reasoning and tool calls.

use std::sync::atomic::{AtomicU64, Ordering};

use kiln_engine::answer::Reading;
use kiln_engine::Timings;

/// One call the model made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// A new id (`call_...`), for the `tool` message that answers it.
    pub id: String,
    /// The function called (one of the declared tools).
    pub name: String,
    /// The arguments object as compact JSON text (`{"city":"Paris"}`).
    pub arguments: String,
}

/// A new call id: unique in this process, unlikely to repeat across processes.
fn call_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    format!("call_{:x}{nanos:08x}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// Calls being read from a stream.
#[derive(Debug, Default)]
pub(crate) struct Calls {
    all: Vec<Call>,
    sent: usize,
}

impl Calls {
    pub(crate) fn start(&mut self, name: String) {
        self.all.push(Call { id: call_id(), name, arguments: String::new() });
    }

    pub(crate) fn args(&mut self, delta: &str) {
        if let Some(c) = self.all.last_mut() {
            c.arguments.push_str(delta);
        }
    }

    /// Calls not yet handed out.
    pub(crate) fn take_new(&mut self) -> Vec<Call> {
        let new = self.all[self.sent..].to_vec();
        self.sent = self.all.len();
        new
    }

    pub(crate) fn made(&self) -> bool {
        !self.all.is_empty()
    }
}

/// A finished answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// The answer's text (for a raw prompt, or a plain chat answer, all of
    /// the generated text).
    pub content: String,
    /// The reasoning of a model that reasons (never `Some("")`).
    pub reasoning: Option<String>,
    /// The calls the model made, in order.
    pub tool_calls: Vec<Call>,
    /// `stop`, `length`, `cancelled`, or `tool_calls` (ended by itself after calls).
    pub finish_reason: &'static str,
    /// The engine's timings and counts.
    pub timings: Timings,
}

impl Reply {
    /// `text` read as `reading` says.
    pub(crate) fn read(reading: &Reading, text: String, finish_reason: &'static str, timings: Timings) -> Self {
        if *reading == Reading::PLAIN {
            return Self { content: text, reasoning: None, tool_calls: Vec::new(), finish_reason, timings };
        }
        let p = reading.parse(&text);
        let tool_calls: Vec<Call> =
            (p.tool_calls.into_iter()).map(|c| Call { id: call_id(), name: c.name, arguments: c.arguments }).collect();
        let finish_reason =
            if finish_reason == "stop" && !tool_calls.is_empty() { "tool_calls" } else { finish_reason };
        Self { content: p.content, reasoning: p.reasoning, tool_calls, finish_reason, timings }
    }
}

#[cfg(test)]
mod tests {
    use kiln_chat::{ReasoningFormat, ToolFormat};

    use super::*;

    #[test]
    fn answers_split_into_content_reasoning_and_calls() {
        let reading = Reading {
            tools: ToolFormat::Hermes,
            reasoning: ReasoningFormat::Think,
            tools_offered: true,
            ..Reading::PLAIN
        };
        let text = "<think>Weather, so a call.</think>\n<tool_call>\n{\"name\": \"w\", \"arguments\": {\"c\": 1}}\n</tool_call>";
        let r = Reply::read(&reading, text.into(), "stop", Timings::default());
        assert_eq!(r.reasoning.as_deref(), Some("Weather, so a call."));
        assert_eq!((r.content.as_str(), r.finish_reason), ("", "tool_calls"));
        assert_eq!((r.tool_calls[0].name.as_str(), r.tool_calls[0].arguments.as_str()), ("w", "{\"c\":1}"));
        assert!(r.tool_calls[0].id.starts_with("call_"));
        let plain = Reply::read(&Reading::PLAIN, text.into(), "length", Timings::default());
        assert_eq!((plain.content.as_str(), plain.finish_reason), (text, "length"));
    }
}
