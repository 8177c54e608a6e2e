//! gpt-oss harmony output: a sequence of messages, each a header
//! (`<|channel|>NAME`, maybe `to=RECIPIENT`, maybe `<|constrain|>json`), `<|message|>`, a
//! body, and an end (`<|end|>`, `<|call|>`, `<|return|>`, or the next `<|start|>` /
//! `<|channel|>`). The channel decides where a body goes: `analysis` → reasoning,
//! `final` (and `commentary` without a recipient) → content, a recipient → a tool call
//! whose arguments are the body. Text outside any message is content.

use crate::calls::harmony_args;
use crate::scan::{find_marker, hold_from};
use crate::stream::Emit;
use crate::ToolCall;

const START: &str = "<|start|>";
const CHANNEL: &str = "<|channel|>";
const MESSAGE: &str = "<|message|>";
const END: &str = "<|end|>";
const CALL: &str = "<|call|>";
const RETURN: &str = "<|return|>";

/// Markers that matter outside a message, in the order of [`Harmony::outside`]'s match.
const OUTSIDE: [&str; 6] = [START, CHANNEL, MESSAGE, END, CALL, RETURN];
/// Markers that end a body.
const BODY_ENDS: [&str; 5] = [END, CALL, RETURN, START, CHANNEL];

#[derive(Debug, Clone, PartialEq, Eq)]
enum Body {
    Reasoning,
    Content,
    Call(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    Outside,
    /// In a header; `buf` holds it (from after `<|start|>`, or from `<|channel|>` on).
    Header,
    Body(Body),
}

/// The harmony state machine.
#[derive(Debug)]
pub(crate) struct Harmony {
    calls: bool,
    reasoning: bool,
    state: State,
    buf: String,
    /// Where the search in a header or a call body resumes.
    searched: usize,
}

impl Harmony {
    /// `calls`: recipients make tool calls (else their bodies are content); `reasoning`:
    /// the analysis channel is reasoning (else content).
    pub(crate) fn new(calls: bool, reasoning: bool) -> Self {
        Harmony { calls, reasoning, state: State::Outside, buf: String::new(), searched: 0 }
    }

    pub(crate) fn push(&mut self, delta: &str, e: &mut Emit) {
        self.buf.push_str(delta);
        while self.step(e) {}
    }

    /// Decides what it can; false when it must wait for more text.
    fn step(&mut self, e: &mut Emit) -> bool {
        match self.state.clone() {
            State::Outside => self.outside(e),
            State::Header => {
                let Some(pos) = self.find_resuming(MESSAGE) else {
                    return false;
                };
                let body = self.classify(&self.buf[..pos]);
                self.buf.drain(..pos + MESSAGE.len());
                self.state = State::Body(body);
                self.searched = 0;
                true
            }
            State::Body(body) => self.body(body, e),
        }
    }

    fn outside(&mut self, e: &mut Emit) -> bool {
        match find_marker(&self.buf, &OUTSIDE) {
            Some((pos, m)) => {
                e.content(&self.buf[..pos]);
                let marker = OUTSIDE[m];
                self.buf.drain(..pos + marker.len());
                self.searched = 0;
                self.state = match marker {
                    START => State::Header,
                    CHANNEL => {
                        self.buf.insert_str(0, CHANNEL);
                        self.searched = CHANNEL.len();
                        State::Header
                    }
                    MESSAGE => State::Body(Body::Content),
                    _ => State::Outside,
                };
                true
            }
            None => {
                let hold = hold_from(&self.buf, &OUTSIDE);
                e.content(&self.buf[..hold]);
                self.buf.drain(..hold);
                false
            }
        }
    }

    fn body(&mut self, body: Body, e: &mut Emit) -> bool {
        let found = match body {
            Body::Call(_) => self.find_any_resuming(&BODY_ENDS),
            _ => find_marker(&self.buf, &BODY_ENDS),
        };
        let Some((pos, m)) = found else {
            if !matches!(body, Body::Call(_)) {
                let hold = hold_from(&self.buf, &BODY_ENDS);
                let text = self.buf[..hold].to_string();
                self.emit_text(&body, &text, e);
                self.buf.drain(..hold);
            }
            return false;
        };
        let text = self.buf[..pos].to_string();
        self.buf.drain(..pos + BODY_ENDS[m].len());
        self.close(body, &text, e);
        self.searched = 0;
        self.state = match BODY_ENDS[m] {
            START => State::Header,
            CHANNEL => {
                self.buf.insert_str(0, CHANNEL);
                self.searched = CHANNEL.len();
                State::Header
            }
            _ => State::Outside,
        };
        true
    }

    fn emit_text(&self, body: &Body, text: &str, e: &mut Emit) {
        match body {
            Body::Reasoning => e.reasoning(text),
            Body::Content => e.content(text),
            Body::Call(_) => {}
        }
    }

    /// A message ended with `text` as the rest of its body.
    fn close(&self, body: Body, text: &str, e: &mut Emit) {
        match body {
            Body::Call(name) => match harmony_args(text) {
                Some(arguments) => e.call(ToolCall { name, arguments }),
                None => {
                    e.content(text);
                    e.end_message();
                }
            },
            other => {
                self.emit_text(&other, text, e);
                e.end_message();
            }
        }
    }

    /// Where a header's body goes.
    fn classify(&self, header: &str) -> Body {
        let word_at =
            |at: usize| -> String { header[at..].chars().take_while(|c| !c.is_whitespace() && *c != '<').collect() };
        let recipient = header
            .match_indices("to=")
            .find(|(i, _)| *i == 0 || header[..*i].ends_with(|c: char| c.is_whitespace() || c == '>'))
            .map(|(i, _)| word_at(i + "to=".len()));
        let channel = header.find(CHANNEL).map(|i| word_at(i + CHANNEL.len()));
        if let (Some(r), true) = (recipient, self.calls) {
            let name = r.strip_prefix("functions.").unwrap_or(&r);
            if !name.is_empty() {
                return Body::Call(name.to_string());
            }
        }
        match channel.as_deref() {
            Some("analysis") if self.reasoning => Body::Reasoning,
            _ => Body::Content,
        }
    }

    /// `marker` in `buf`, searching only text not searched before (plus an overlap).
    fn find_resuming(&mut self, marker: &str) -> Option<usize> {
        self.find_any_resuming(&[marker]).map(|(pos, _)| pos)
    }

    fn find_any_resuming(&mut self, markers: &[&str]) -> Option<(usize, usize)> {
        let longest = markers.iter().map(|m| m.len()).max().unwrap_or(1);
        let mut from = self.searched.saturating_sub(longest - 1);
        while !self.buf.is_char_boundary(from) {
            from -= 1;
        }
        self.searched = self.buf.len();
        find_marker(&self.buf[from..], markers).map(|(pos, m)| (from + pos, m))
    }

    pub(crate) fn finish(&mut self, e: &mut Emit) {
        let rest = std::mem::take(&mut self.buf);
        match std::mem::replace(&mut self.state, State::Outside) {
            State::Outside => e.content(&rest),
            // an unfinished header is protocol, not text
            State::Header => {}
            State::Body(body) => self.close(body, &rest, e),
        }
    }
}
