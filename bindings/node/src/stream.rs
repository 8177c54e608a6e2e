//! A request's events, read one promise at a time.

use std::sync::Arc;

use kiln_bind::RequestStream;
use napi::threadsafe_function::{ErrorStrategy, ThreadSafeCallContext, ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi::JsFunction;
use napi_derive::napi;
use tokio::sync::Mutex;

use crate::to_js;

/// One event: a token (`eos` false), then a last event (`eos` true, no
/// `id`) with any text held back until the end and the `finishReason`.
#[napi(object)]
pub struct Event {
    pub id: Option<u32>,
    pub text: String,
    pub logprob: Option<f64>,
    pub eos: bool,
    pub finish_reason: Option<String>,
}

impl From<kiln_bind::Event> for Event {
    fn from(e: kiln_bind::Event) -> Self {
        Self {
            id: e.id,
            text: e.text,
            logprob: e.logprob.map(f64::from),
            eos: e.eos,
            finish_reason: e.finish_reason.map(str::to_string),
        }
    }
}

struct State {
    stream: RequestStream,
    done: bool,
}

/// The events of one request. Dropped (garbage-collected) or cancelled, the
/// request stops and frees its KV cache.
#[napi]
pub struct NativeStream {
    state: Arc<Mutex<State>>,
    cancel: kiln_engine::CancelHandle,
}

impl NativeStream {
    pub(crate) fn new(stream: RequestStream) -> Self {
        let cancel = stream.cancel_handle();
        Self { state: Arc::new(Mutex::new(State { stream, done: false })), cancel }
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
            let mut s = state.lock().await;
            let State { stream, done } = &mut *s;
            loop {
                let (next, last) = match kiln_bind::next_event_async(stream, done).await {
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

    /// The whole text (to the end of the request).
    #[napi]
    pub async fn collect(&self) -> napi::Result<Collected> {
        let mut s = self.state.lock().await;
        let c = kiln_bind::collect_async(&mut s.stream).await.map_err(to_js)?;
        s.done = true;
        Ok(Collected { text: c.text, finish_reason: c.finish_reason.to_string() })
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
    pub text: String,
    pub finish_reason: String,
}
