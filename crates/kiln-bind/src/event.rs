//! Stream events in the flat shape the bindings expose, and readers of a
//! request's stream.

use kiln_engine::{FinishReason, RequestStream, StreamEvent, Timings};

use crate::error::BindError;

/// One event of a stream: a generated token (`eos` false), then one last
/// event (`eos` true, no token) with the text held back until the end
/// (usually empty) and why the generation finished.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// The token id (`None` on the last event).
    pub id: Option<u32>,
    /// Text this event makes visible (may be empty while a multi-byte
    /// character or a possible stop string is pending).
    pub text: String,
    /// The token's natural-log probability, when asked for (`logprobs`).
    pub logprob: Option<f32>,
    /// Whether this is the last event.
    pub eos: bool,
    /// On the last event: `stop`, `length` or `cancelled`.
    pub finish_reason: Option<&'static str>,
}

fn reason_name(r: FinishReason) -> &'static str {
    match r {
        FinishReason::Stop => "stop",
        FinishReason::Length | FinishReason::ContextLength => "length",
        FinishReason::Cancelled => "cancelled",
    }
}

/// Maps one engine event; `None` (the stream closed) before `Done` is an error.
fn convert(ev: Option<StreamEvent>) -> Result<Event, BindError> {
    match ev {
        Some(StreamEvent::Token { token, text, logprob }) => {
            Ok(Event { id: Some(token), text, logprob: logprob.map(|s| s.logprob), eos: false, finish_reason: None })
        }
        Some(StreamEvent::Done { reason, text, .. }) => {
            Ok(Event { id: None, text, logprob: None, eos: true, finish_reason: Some(reason_name(reason)) })
        }
        Some(StreamEvent::Error(e)) => Err(BindError::Failed(e)),
        None => Err(BindError::Failed("the engine stopped before the request finished".into())),
    }
}

/// The next event of `stream`, blocking; `Ok(None)` after the last one
/// (`*done` records that the last one was read).
pub fn next_event(stream: &mut RequestStream, done: &mut bool) -> Result<Option<Event>, BindError> {
    if *done {
        return Ok(None);
    }
    let ev = convert(stream.blocking_next());
    *done = !matches!(ev, Ok(Event { eos: false, .. }));
    ev.map(Some)
}

/// The next event of `stream` if one is already waiting, without blocking:
/// `None` when the caller must wait ([`next_event`]); `Some(Ok(None))` after
/// the last one. A binding takes this first so that an event already
/// queued costs no wait (for Python, no release of the GIL).
pub fn ready_event(stream: &mut RequestStream, done: &mut bool) -> Option<Result<Option<Event>, BindError>> {
    if *done {
        return Some(Ok(None));
    }
    let ev = convert(stream.try_next()?);
    *done = !matches!(ev, Ok(Event { eos: false, .. }));
    Some(ev.map(Some))
}

/// A whole generation.
#[derive(Debug, Clone, PartialEq)]
pub struct Collected {
    /// The generated text.
    pub text: String,
    /// `stop`, `length` or `cancelled`.
    pub finish_reason: &'static str,
    /// The engine's timings and counts.
    pub timings: Timings,
}

/// Reads a stream to its end, blocking.
pub fn collect(mut stream: RequestStream) -> Result<Collected, BindError> {
    let mut text = String::new();
    loop {
        match stream.blocking_next() {
            Some(StreamEvent::Token { text: t, .. }) => text.push_str(&t),
            Some(StreamEvent::Done { reason, text: t, timings }) => {
                text.push_str(&t);
                return Ok(Collected { text, finish_reason: reason_name(reason), timings });
            }
            ev => return Err(convert(ev).err().unwrap_or(BindError::Failed("unexpected event".into()))),
        }
    }
}

/// Reads a stream to its end without blocking a thread.
pub async fn collect_async(stream: &mut RequestStream) -> Result<Collected, BindError> {
    let mut text = String::new();
    loop {
        match stream.next().await {
            Some(StreamEvent::Token { text: t, .. }) => text.push_str(&t),
            Some(StreamEvent::Done { reason, text: t, timings }) => {
                text.push_str(&t);
                return Ok(Collected { text, finish_reason: reason_name(reason), timings });
            }
            ev => return Err(convert(ev).err().unwrap_or(BindError::Failed("unexpected event".into()))),
        }
    }
}

/// The next event of `stream` without blocking a thread; `Ok(None)` after the last one.
pub async fn next_event_async(stream: &mut RequestStream, done: &mut bool) -> Result<Option<Event>, BindError> {
    if *done {
        return Ok(None);
    }
    let ev = convert(stream.next().await);
    *done = !matches!(ev, Ok(Event { eos: false, .. }));
    ev.map(Some)
}
