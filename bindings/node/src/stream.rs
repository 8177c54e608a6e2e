//! A request's events, read one promise at a time.

use std::sync::Arc;

use kiln_bind::Events;
use napi::threadsafe_function::{ErrorStrategy, ThreadSafeCallContext, ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi::JsFunction;
use napi_derive::napi;
use tokio::sync::Mutex;

use crate::to_js;

/// One event: a token (`eos` false), then a last event (`eos` true, no
/// `id`) with any text held back until the end and the `finishReason`. A
/// chat answer's `text` is its content; `reasoning` and `toolCalls` (set
/// only when not empty) carry what else this event makes visible.
#[napi(object)]
pub struct Event {
    pub id: Option<u32>,
    pub text: String,
    pub logprob: Option<f64>,
    pub eos: bool,
    pub finish_reason: Option<String>,
    pub reasoning: Option<String>,
    pub tool_calls: Option<Vec<ToolCall>>,
}

/// A call the model made; `arguments` is the arguments object as JSON text.
#[napi(object)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

fn calls(calls: Vec<kiln_bind::Call>) -> Vec<ToolCall> {
    calls.into_iter().map(|c| ToolCall { id: c.id, name: c.name, arguments: c.arguments }).collect()
}

impl From<kiln_bind::Event> for Event {
    fn from(e: kiln_bind::Event) -> Self {
        Self {
            id: e.id,
            text: e.text,
            logprob: e.logprob.map(f64::from),
            eos: e.eos,
            finish_reason: e.finish_reason.map(str::to_string),
            reasoning: (!e.reasoning.is_empty()).then_some(e.reasoning),
            tool_calls: (!e.tool_calls.is_empty()).then(|| calls(e.tool_calls)),
        }
    }
}

/// The events of one request. Dropped (garbage-collected) or cancelled, the
/// request stops and frees its KV cache.
#[napi]
pub struct NativeStream {
    state: Arc<Mutex<Events>>,
    cancel: kiln_engine::CancelHandle,
}

impl NativeStream {
    pub(crate) fn new(events: Events) -> Self {
        let cancel = events.cancel_handle();
        Self { state: Arc::new(Mutex::new(events)), cancel }
    }
}

#[napi]
impl NativeStream {
    /// Calls `onEvent(null, event)` on the main thread for every event as
    /// it comes, then `onEvent(null, null)`; `onEvent(error)` if the request
    /// fails. One reader task and one threadsafe function per stream: an
    /// event costs one call into JavaScript.
    #[napi(ts_args_type = "onEvent: (err: Error | null, event: Event | null) => void")]
    pub fn start(&self, on_event: JsFunction) -> napi::Result<()> {
        let tsfn: ThreadsafeFunction<Option<Event>, ErrorStrategy::CalleeHandled> =
            on_event.create_threadsafe_function(0, |ctx: ThreadSafeCallContext<Option<Event>>| Ok(vec![ctx.value]))?;
        let state = Arc::clone(&self.state);
        napi::bindgen_prelude::spawn(async move {
            let mut events = state.lock().await;
            loop {
                let (next, last) = match events.next_async().await {
                    Ok(Some(ev)) => (Ok(Some(Event::from(ev))), false),
                    Ok(None) => (Ok(None), true),
                    Err(e) => (Err(to_js(e)), true),
                };
                tsfn.call(next, ThreadsafeFunctionCallMode::NonBlocking);
                if last {
                    break;
                }
            }
        });
        Ok(())
    }

    /// The whole answer (to the end of the request).
    #[napi]
    pub async fn collect(&self) -> napi::Result<Collected> {
        let r = self.state.lock().await.collect_async().await.map_err(to_js)?;
        Ok(Collected {
            content: r.content,
            reasoning: r.reasoning,
            tool_calls: calls(r.tool_calls),
            finish_reason: r.finish_reason.to_string(),
            prompt_tokens: u32::try_from(r.timings.prompt_tokens).unwrap_or(u32::MAX),
            completion_tokens: u32::try_from(r.timings.decode_tokens).unwrap_or(u32::MAX),
        })
    }

    /// Stops the request; its stream then ends with `finishReason` "cancelled".
    #[napi]
    pub fn cancel(&self) {
        self.cancel.cancel();
    }
}

impl Drop for NativeStream {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// A finished request.
#[napi(object)]
pub struct Collected {
    pub content: String,
    pub reasoning: Option<String>,
    pub tool_calls: Vec<ToolCall>,
    pub finish_reason: String,
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
}
