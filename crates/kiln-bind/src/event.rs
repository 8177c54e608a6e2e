//! Stream events in the flat shape the bindings expose, and [`Events`],
//! the reader of one request's stream that also splits a chat answer into
//! content, reasoning and tool calls.

use kiln_engine::answer::Reading;
use kiln_engine::{CancelHandle, FinishReason, RequestStream, StreamEvent, Timings};

use crate::error::BindError;
use crate::reply::{Call, Calls, Reply};

/// One event of a stream: a generated token (`eos` false), then one last
/// event (`eos` true, no token) with the text held back until the end
/// (usually empty) and why the generation finished.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// The token id (`None` on the last event).
    pub id: Option<u32>,
    /// Text this event makes visible (may be empty while a multi-byte
    /// character or a possible stop string is pending). For a chat answer
    /// read for tools or reasoning: only the answer's content.
    pub text: String,
    /// The token's natural-log probability, when asked for (`logprobs`).
    pub logprob: Option<f32>,
    /// Whether this is the last event.
    pub eos: bool,
    /// On the last event: `stop`, `length`, `cancelled`, or `tool_calls`
    /// (the answer ended by itself after calling tools).
    pub finish_reason: Option<&'static str>,
    /// Reasoning text this event makes visible (a model that reasons).
    pub reasoning: String,
    /// Tool calls this event completes.
    pub tool_calls: Vec<Call>,
}

pub(crate) fn reason_name(r: FinishReason) -> &'static str {
    match r {
        FinishReason::Stop => "stop",
        FinishReason::Length | FinishReason::ContextLength => "length",
        FinishReason::Cancelled => "cancelled",
    }
}

/// Maps one engine event; `None` (the stream closed) before `Done` is an error.
fn convert(ev: Option<StreamEvent>) -> Result<Event, BindError> {
    let event = |id, text, logprob, finish_reason: Option<&'static str>| Event {
        id,
        text,
        logprob,
        eos: finish_reason.is_some(),
        finish_reason,
        reasoning: String::new(),
        tool_calls: Vec::new(),
    };
    match ev {
        Some(StreamEvent::Token { token, text, logprob }) => {
            Ok(event(Some(token), text, logprob.map(|s| s.logprob), None))
        }
        Some(StreamEvent::Done { reason, text, .. }) => Ok(event(None, text, None, Some(reason_name(reason)))),
        Some(StreamEvent::Error(e)) => Err(BindError::Failed(e)),
        None => Err(BindError::Failed("the engine stopped before the request finished".into())),
    }
}

/// The events of one request. A chat answer read for tool calls or
/// reasoning ([`Reading`] other than plain) goes through the model family's
/// parser: each event's `text` is content only, `reasoning` and
/// `tool_calls` carry the rest.
pub struct Events {
    stream: RequestStream,
    done: bool,
    reading: Reading,
    parser: Option<kiln_chat::StreamParser>,
    calls: Calls,
}

impl Events {
    /// Reads `stream`, an answer to be read as `reading` says.
    pub fn new(stream: RequestStream, reading: Reading) -> Self {
        let parser = (reading != Reading::PLAIN).then(|| reading.stream_parser());
        Self { stream, done: false, reading, parser, calls: Calls::default() }
    }

    /// Cancels the request from anywhere.
    pub fn cancel_handle(&self) -> CancelHandle {
        self.stream.cancel_handle()
    }

    /// Prompt length in tokens.
    pub fn prompt_tokens(&self) -> usize {
        self.stream.prompt_tokens
    }

    fn map(&mut self, ev: Option<StreamEvent>) -> Result<Option<Event>, BindError> {
        let ev = convert(ev);
        self.done = !matches!(ev, Ok(Event { eos: false, .. }));
        let Some(parser) = self.parser.as_mut() else { return ev.map(Some) };
        let mut ev = ev?;
        let mut pieces = parser.push(&std::mem::take(&mut ev.text));
        if ev.eos {
            pieces.extend(parser.finish());
        }
        for piece in pieces {
            match piece {
                kiln_chat::Piece::Content(t) => ev.text.push_str(&t),
                kiln_chat::Piece::Reasoning(t) if !self.reading.drop_reasoning => ev.reasoning.push_str(&t),
                kiln_chat::Piece::Reasoning(_) => {}
                kiln_chat::Piece::ToolCallStart { name, .. } => self.calls.start(name),
                kiln_chat::Piece::ToolCallArgs { delta, .. } => self.calls.args(&delta),
            }
        }
        ev.tool_calls = self.calls.take_new();
        if ev.finish_reason == Some("stop") && self.calls.made() {
            ev.finish_reason = Some("tool_calls");
        }
        Ok(Some(ev))
    }

    /// The next event, blocking; `Ok(None)` after the last one.
    pub fn next_blocking(&mut self) -> Result<Option<Event>, BindError> {
        if self.done {
            return Ok(None);
        }
        let ev = self.stream.blocking_next();
        self.map(ev)
    }

    /// The next event if one is already waiting, without blocking: `None`
    /// when the caller must wait; `Some(Ok(None))` after the last one. A
    /// binding takes this first so that an event already queued costs no
    /// wait (for Python, no release of the GIL).
    pub fn ready(&mut self) -> Option<Result<Option<Event>, BindError>> {
        if self.done {
            return Some(Ok(None));
        }
        let ev = self.stream.try_next()?;
        Some(self.map(ev))
    }

    /// The next event without blocking a thread; `Ok(None)` after the last one.
    pub async fn next_async(&mut self) -> Result<Option<Event>, BindError> {
        if self.done {
            return Ok(None);
        }
        let ev = self.stream.next().await;
        self.map(ev)
    }

    fn reply(&self, text: String, reason: FinishReason, timings: Timings) -> Reply {
        Reply::read(&self.reading, text, reason_name(reason), timings)
    }

    /// Reads the rest of the answer, blocking.
    pub fn collect(&mut self) -> Result<Reply, BindError> {
        let mut text = String::new();
        loop {
            match self.stream.blocking_next() {
                Some(StreamEvent::Token { text: t, .. }) => text.push_str(&t),
                Some(StreamEvent::Done { reason, text: t, timings }) => {
                    text.push_str(&t);
                    self.done = true;
                    return Ok(self.reply(text, reason, timings));
                }
                ev => return Err(self.map(ev).err().unwrap_or(BindError::Failed("unexpected event".into()))),
            }
        }
    }

    /// Reads the rest of the answer without blocking a thread.
    pub async fn collect_async(&mut self) -> Result<Reply, BindError> {
        let mut text = String::new();
        loop {
            match self.stream.next().await {
                Some(StreamEvent::Token { text: t, .. }) => text.push_str(&t),
                Some(StreamEvent::Done { reason, text: t, timings }) => {
                    text.push_str(&t);
                    self.done = true;
                    return Ok(self.reply(text, reason, timings));
                }
                ev => return Err(self.map(ev).err().unwrap_or(BindError::Failed("unexpected event".into()))),
            }
        }
    }
}
