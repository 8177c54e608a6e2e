//! The incremental parser: text deltas in, [`Piece`]s out. [`parse`](crate::parse) is
//! this parser fed the whole text at once, so both agree by construction; what the
//! property tests check is that the split never matters.
//!
//! Text flows through two layers. The reasoning layer takes a leading `<think>...</think>`
//! apart; the tool layer finds call blocks in what remains. Each layer holds back only a
//! tail that could still be the start of a marker it looks for, and a whole block until
//! its end marker (or the end of the answer). harmony output goes to its own machine
//! ([`crate::harmony`]), where channels decide both.

use crate::calls;
use crate::harmony::Harmony;
use crate::scan::{find_marker, hold_from, Sink};
use crate::{Piece, ReasoningFormat, ToolCall, ToolFormat};

const THINK_OPEN: &str = "<think>";
const THINK_CLOSE: &str = "</think>";
const TOOL_CALL_OPEN: &str = "<tool_call>";
const TOOL_CALL_CLOSE: &str = "</tool_call>";
const PYTHON_TAG: &str = "<|python_tag|>";
const MISTRAL_CALLS: &str = "[TOOL_CALLS]";
/// Openings of a fenced block that may hold a whole-answer call (Generic).
const FENCES: [&str; 4] = ["```json\n", "```\n", "```json\r\n", "```\r\n"];

/// Where pieces go: the content and reasoning sinks and the call counter.
#[derive(Debug)]
pub(crate) struct Emit {
    content: Sink,
    reasoning: Sink,
    calls: usize,
    out: Vec<Piece>,
}

impl Emit {
    fn new() -> Self {
        Emit { content: Sink::default(), reasoning: Sink::trimming_start(), calls: 0, out: Vec::new() }
    }

    pub(crate) fn content(&mut self, s: &str) {
        let t = self.content.text(s);
        self.push_content(t);
    }

    fn push_content(&mut self, t: String) {
        if !t.is_empty() {
            self.out.push(Piece::Content(t));
        }
    }

    pub(crate) fn reasoning(&mut self, s: &str) {
        let t = self.reasoning.text(s);
        if !t.is_empty() {
            self.out.push(Piece::Reasoning(t));
        }
    }

    /// A `<think>` block closed: content starts after the whitespace that follows.
    fn end_think(&mut self) {
        self.reasoning.boundary();
        self.content.boundary();
    }

    /// A harmony message ended.
    pub(crate) fn end_message(&mut self) {
        self.reasoning.paragraph();
        self.content.paragraph();
    }

    pub(crate) fn call(&mut self, call: ToolCall) {
        self.content.boundary();
        let index = self.calls;
        self.calls += 1;
        self.out.push(Piece::ToolCallStart { index, name: call.name });
        self.out.push(Piece::ToolCallArgs { index, delta: call.arguments });
    }

    fn finish(&mut self) {
        let t = self.content.finish(true);
        self.push_content(t);
        self.reasoning.finish(false);
    }
}

/// Incremental parser for streaming: text deltas in, pieces out.
///
/// Text that could be the start of a marker (`<tool_call>`, `</think>`, `<|channel|>`, …)
/// is held back until decided, so marker text never leaks into content; a call block is
/// held whole and its call is emitted (name, then the whole compact arguments) when the
/// block ends. Whitespace between text and a block is held and dropped. For Llama 3 and
/// Generic, an answer that starts with `{` (Generic: also `[` or a ```` ```json ```` fence)
/// is held until [`finish`](StreamParser::finish), as it may be one bare JSON call.
///
/// ```
/// use kiln_chat::{Piece, ReasoningFormat, StreamParser, ToolFormat};
/// let mut p = StreamParser::new(ToolFormat::Hermes, ReasoningFormat::None, true, false);
/// assert_eq!(p.push("Let me check. <tool_"), vec![Piece::Content("Let me check.".into())]);
/// assert_eq!(p.push("call>\n{\"name\": \"now\"}\n</tool_call>"), vec![
///     Piece::ToolCallStart { index: 0, name: "now".into() },
///     Piece::ToolCallArgs { index: 0, delta: "{}".into() },
/// ]);
/// assert_eq!(p.finish(), vec![]);
/// ```
#[derive(Debug)]
pub struct StreamParser {
    emit: Emit,
    inner: Inner,
}

#[derive(Debug)]
enum Inner {
    Layers { think: ThinkLayer, tools: ToolLayer },
    Harmony(Harmony),
}

impl StreamParser {
    /// A parser for one answer. `tools_offered`: false → never extract tool calls.
    /// `starts_in_reasoning`: the prompt ended inside `<think>`.
    pub fn new(tools: ToolFormat, reasoning: ReasoningFormat, tools_offered: bool, starts_in_reasoning: bool) -> Self {
        let inner = if tools == ToolFormat::Harmony || reasoning == ReasoningFormat::Harmony {
            Inner::Harmony(Harmony::new(
                tools_offered && tools == ToolFormat::Harmony,
                reasoning == ReasoningFormat::Harmony,
            ))
        } else {
            let think = match (reasoning, starts_in_reasoning) {
                (ReasoningFormat::Think, true) => ThinkState::Inside,
                (ReasoningFormat::Think, false) => ThinkState::Start,
                _ => ThinkState::After,
            };
            Inner::Layers {
                think: ThinkLayer { state: think, buf: String::new() },
                tools: ToolLayer::new(tools, tools_offered),
            }
        };
        StreamParser { emit: Emit::new(), inner }
    }

    /// Takes the next text delta; returns the pieces it decided.
    pub fn push(&mut self, delta: &str) -> Vec<Piece> {
        match &mut self.inner {
            Inner::Layers { think, tools } => think.push(delta, tools, &mut self.emit),
            Inner::Harmony(h) => h.push(delta, &mut self.emit),
        }
        std::mem::take(&mut self.emit.out)
    }

    /// End of the answer: flushes what was held. An unterminated call block that reads as
    /// a call is still a call; otherwise its text becomes content.
    pub fn finish(&mut self) -> Vec<Piece> {
        match &mut self.inner {
            Inner::Layers { think, tools } => think.finish(tools, &mut self.emit),
            Inner::Harmony(h) => h.finish(&mut self.emit),
        }
        self.emit.finish();
        std::mem::take(&mut self.emit.out)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ThinkState {
    /// Nothing but whitespace (or part of `<think>`) yet.
    Start,
    Inside,
    After,
}

/// Takes a leading `<think>...</think>` apart and passes the rest to the tool layer.
#[derive(Debug)]
struct ThinkLayer {
    state: ThinkState,
    buf: String,
}

impl ThinkLayer {
    fn push(&mut self, delta: &str, tools: &mut ToolLayer, e: &mut Emit) {
        if self.state == ThinkState::After {
            return tools.push(delta, e);
        }
        self.buf.push_str(delta);
        if self.state == ThinkState::Start {
            let t = self.buf.trim_start();
            if let Some(rest) = t.strip_prefix(THINK_OPEN) {
                self.buf = rest.to_string();
                self.state = ThinkState::Inside;
            } else if THINK_OPEN.starts_with(t) {
                return;
            } else {
                self.state = ThinkState::After;
                return tools.push(&std::mem::take(&mut self.buf), e);
            }
        }
        if let Some(pos) = self.buf.find(THINK_CLOSE) {
            e.reasoning(&self.buf[..pos]);
            e.end_think();
            let rest = self.buf.split_off(pos + THINK_CLOSE.len());
            self.buf.clear();
            self.state = ThinkState::After;
            tools.push(&rest, e);
        } else {
            let hold = hold_from(&self.buf, &[THINK_CLOSE]);
            e.reasoning(&self.buf[..hold]);
            self.buf.drain(..hold);
        }
    }

    fn finish(&mut self, tools: &mut ToolLayer, e: &mut Emit) {
        let rest = std::mem::take(&mut self.buf);
        match self.state {
            ThinkState::Inside => e.reasoning(&rest),
            _ => tools.push(&rest, e),
        }
        tools.finish(e);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ToolState {
    /// Only whitespace so far; the answer may turn out to be one bare JSON call.
    Start,
    Text,
    /// Inside a call block (after its opening marker).
    Block,
    /// The whole answer may be a bare JSON call: held until the end.
    Whole,
}

/// Finds call blocks in text.
#[derive(Debug)]
struct ToolLayer {
    format: ToolFormat,
    state: ToolState,
    buf: String,
    /// Markers that open a block (none when tools are not offered).
    opens: &'static [&'static str],
    /// Where the search for the block's end resumes.
    searched: usize,
}

impl ToolLayer {
    fn new(format: ToolFormat, offered: bool) -> Self {
        let opens: &'static [&'static str] = match (offered, format) {
            (false, _) | (true, ToolFormat::Harmony) => &[],
            (true, ToolFormat::Hermes | ToolFormat::Generic) => &[TOOL_CALL_OPEN],
            (true, ToolFormat::Llama3) => &[PYTHON_TAG],
            (true, ToolFormat::Mistral) => &[MISTRAL_CALLS],
        };
        let whole = offered && matches!(format, ToolFormat::Llama3 | ToolFormat::Generic);
        ToolLayer {
            format,
            state: if whole { ToolState::Start } else { ToolState::Text },
            buf: String::new(),
            opens,
            searched: 0,
        }
    }

    fn push(&mut self, delta: &str, e: &mut Emit) {
        self.buf.push_str(delta);
        loop {
            match self.state {
                ToolState::Start => {
                    let t = self.buf.trim_start();
                    match self.whole_answer_start(t) {
                        Some(true) => self.state = ToolState::Whole,
                        Some(false) => self.state = ToolState::Text,
                        None => return,
                    }
                }
                ToolState::Whole => return,
                ToolState::Text => match find_marker(&self.buf, self.opens) {
                    Some((pos, m)) => {
                        e.content(&self.buf[..pos]);
                        self.buf.drain(..pos + self.opens[m].len());
                        self.state = ToolState::Block;
                        self.searched = 0;
                    }
                    None => {
                        let hold = hold_from(&self.buf, self.opens);
                        e.content(&self.buf[..hold]);
                        self.buf.drain(..hold);
                        return;
                    }
                },
                ToolState::Block => {
                    let Some(end) = self.block_end() else { return };
                    let (body_end, next) = end;
                    let body = self.buf[..body_end].to_string();
                    self.buf.drain(..next);
                    self.close_block(&body, true, e);
                    self.searched = 0;
                    self.state = if self.format == ToolFormat::Mistral { ToolState::Block } else { ToolState::Text };
                }
            }
        }
    }

    /// Whether text starting with `t` (leading whitespace removed) is held whole: `Some`
    /// once decided.
    fn whole_answer_start(&self, t: &str) -> Option<bool> {
        let first = t.chars().next()?;
        if first == '{' {
            return Some(true);
        }
        if self.format != ToolFormat::Generic {
            return Some(false);
        }
        if first == '[' || FENCES.iter().any(|f| t.starts_with(f)) {
            Some(true)
        } else if FENCES.iter().any(|f| f.starts_with(t)) {
            None
        } else {
            Some(false)
        }
    }

    /// The end of the current block in `buf`: (body length, bytes to consume).
    fn block_end(&mut self) -> Option<(usize, usize)> {
        let marker = match self.format {
            ToolFormat::Hermes | ToolFormat::Generic => TOOL_CALL_CLOSE,
            // the next `[TOOL_CALLS]` ends a block and opens the next
            ToolFormat::Mistral => MISTRAL_CALLS,
            ToolFormat::Llama3 | ToolFormat::Harmony => return None,
        };
        let mut from = self.searched.saturating_sub(marker.len() - 1);
        while !self.buf.is_char_boundary(from) {
            from -= 1;
        }
        self.searched = self.buf.len();
        let pos = from + self.buf[from..].find(marker)?;
        Some((pos, pos + marker.len()))
    }

    /// A block ended (`closed`: by its end marker): its calls, or its text as content.
    fn close_block(&mut self, body: &str, closed: bool, e: &mut Emit) {
        let calls = match self.format {
            ToolFormat::Hermes | ToolFormat::Generic => calls::hermes_block(body),
            ToolFormat::Llama3 => calls::llama_python_tag(body),
            ToolFormat::Mistral => calls::mistral_block(body),
            ToolFormat::Harmony => None,
        };
        match calls {
            Some(calls) => calls.into_iter().for_each(|c| e.call(c)),
            None => {
                let open = self.opens.first().copied().unwrap_or_default();
                let close = match (closed, self.format) {
                    (true, ToolFormat::Hermes | ToolFormat::Generic) => TOOL_CALL_CLOSE,
                    _ => "",
                };
                e.content(&format!("{open}{body}{close}"));
            }
        }
    }

    fn finish(&mut self, e: &mut Emit) {
        let rest = std::mem::take(&mut self.buf);
        match self.state {
            ToolState::Start | ToolState::Text => e.content(&rest),
            ToolState::Block => self.close_block(&rest, false, e),
            ToolState::Whole => {
                let calls = match self.format {
                    ToolFormat::Generic => calls::generic_whole(&rest),
                    _ => calls::llama_json(&rest),
                };
                match calls {
                    Some(calls) => calls.into_iter().for_each(|c| e.call(c)),
                    None => e.content(&rest),
                }
            }
        }
    }
}
