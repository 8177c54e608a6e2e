//! Running one request: admission, submission, reading events in coalesced
//! batches, and the bookkeeping (metrics, timing records) when it ends. A
//! [`Generation`] dropped before its last event (the client went away)
//! drops its engine stream, which cancels the request within one step.

use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use axum::body::Body;
use bytes::Bytes;
use kiln_core::{FinishReason, Sampled, StreamEvent, Timings, TokenId};
use kiln_engine::RequestStream;

use crate::answer::Reading;
use crate::error::ApiError;
use crate::pool::Lease;
use crate::state::{SharedState, TimingRecord};
use crate::validate::{check_vocab, ValidRequest};

/// Most events put into one socket write.
const MAX_BATCH: usize = 64;

/// A request admitted to a model and submitted to its engine.
pub struct Generation {
    stream: RequestStream,
    engine: kiln_engine::EngineHandle,
    /// The admission (keeps the model loaded).
    pub lease: Lease,
    /// The LoRA adapter's name when the request asked for one (answers
    /// name it as their model).
    shown_name: Option<String>,
    state: SharedState,
    started: Instant,
    /// Time spent waiting for the model to load.
    pub load_wait: Duration,
    /// From `started` to the submission to the engine (the template and
    /// tokenizer; a model load).
    admit: Duration,
    last_token: Option<Instant>,
    finished: bool,
    /// The engine is done with the request (its last events may still be queued).
    ended: bool,
    /// Prompt length in tokens.
    pub prompt_tokens: usize,
    generated: usize,
    /// How to read the answer (tool calls, reasoning).
    pub reading: Reading,
}

/// Maps token ids to their text and bytes.
pub struct TokenTexts(kiln_engine::EngineHandle);

impl TokenTexts {
    /// The token's text (lossy UTF-8) and bytes.
    pub fn token_text(&self, id: TokenId) -> (String, Vec<u8>) {
        let bytes = self.0.tokenizer().token_to_bytes(id).map(<[u8]>::to_vec).unwrap_or_default();
        (String::from_utf8_lossy(&bytes).into_owned(), bytes)
    }
}

/// A finished request, collected.
#[derive(Debug, Clone)]
pub struct Collected {
    /// Generated text.
    pub text: String,
    /// Generated tokens with sampling details when asked for.
    pub tokens: Vec<(TokenId, Option<Sampled>)>,
    /// Why it ended.
    pub reason: FinishReason,
    /// Engine timings.
    pub timings: Timings,
}

/// Prompts up to this many bytes are templated and tokenized on the
/// request's own task (see [`Generation::start`]).
const INLINE_PROMPT_BYTES: usize = 32 << 10;

/// Bytes of text (or tokens) a prompt holds, its segments included.
fn prompt_size(prompt: &kiln_engine::Prompt) -> usize {
    match prompt {
        kiln_engine::Prompt::Text(s) => s.len(),
        kiln_engine::Prompt::Chat(c) => {
            let tools = c.tools.as_ref().map_or(0, |t| t.to_string().len());
            c.messages.iter().map(|m| m.content.len()).sum::<usize>() + tools
        }
        kiln_engine::Prompt::Tokens(t) => t.len(),
        kiln_engine::Prompt::Segmented(s) => s.segments.iter().map(String::len).sum::<usize>() + prompt_size(&s.prompt),
    }
}

impl Generation {
    /// Loads (if needed) and admits to the model, then submits.
    pub async fn start(state: SharedState, req: ValidRequest) -> Result<Self, ApiError> {
        let started = Instant::now();
        let (base, adapter, lora_scale) = state.loras.route(&req.model, req.lora.as_deref())?;
        let (lease, load_wait) = state.pool.acquire(&base, req.keep_alive).await?;
        let engine = lease.model.engine()?.clone();
        let lora = match (&adapter, lease.alias.as_ref().and_then(|a| a.adapter.as_ref())) {
            (Some(e), None) => {
                Some(kiln_engine::LoraRequest { scale: lora_scale, ..crate::lora::ensure(&engine, e).await? })
            }
            (None, Some(own)) => Some(crate::model_adapter::ensure(&state, &engine, own).await?),
            (Some(e), Some(_)) => {
                return Err(ApiError::bad_param(
                    "lora",
                    format!(
                        "model '{}' has its own ADAPTER; a request applies one adapter, not also '{}'",
                        lease.name, e.name
                    ),
                ))
            }
            (None, None) => None,
        };
        let shown_name = adapter.map(|e| e.name);
        check_vocab(&req.params.sampling, engine.info().config.vocab_size)?;
        let mut prompt = req.prompt;
        let template = crate::preset::template(lease.alias.as_ref())?;
        let mut reading = req.shape.prepare(&engine, &mut prompt, template.as_ref());
        let prompt_bytes = prompt_size(&prompt);
        if prompt_bytes > state.limits.max_prompt_bytes {
            return Err(ApiError::bad(format!("the prompt is larger than {} bytes", state.limits.max_prompt_bytes)));
        }
        // Template rendering and tokenizing are CPU work: a long prompt's
        // goes to the blocking pool, off the async workers. A short one
        // (a chat turn: well under a millisecond, mostly cache hits) runs
        // here: handing it to another thread and back costs two thread
        // wake-ups, more than the work.
        let custom = template.is_some();
        let mut params = req.params;
        let (tokens, engine, params) = if prompt_bytes <= INLINE_PROMPT_BYTES {
            (crate::preset::prompt_tokens(&engine, &prompt, template.as_ref(), &mut params), engine, params)
        } else {
            tokio::task::spawn_blocking(move || {
                (crate::preset::prompt_tokens(&engine, &prompt, template.as_ref(), &mut params), engine, params)
            })
            .await
            .map_err(|e| ApiError::Internal(e.to_string()))?
        };
        let (tokens, segments) = tokens?;
        reading.read_prompt(&engine, &tokens);
        let constraint = req.shape.constraint(&engine, &reading)?;
        // Next-turn prefill writes the model's own template's turn opening:
        // not for a conversation a Modelfile template formats.
        let chat_turn = params.chat_turn && !custom;
        let params = kiln_engine::Params { constraint, chat_turn, lora, segments, ..params };
        // The engine's clock (`ttft_ms`) starts inside the submission.
        let admit = started.elapsed();
        let stream = engine.submit_tokens(tokens, params)?;
        let prompt_tokens = stream.prompt_tokens;
        Ok(Self {
            stream,
            engine,
            lease,
            shown_name,
            state,
            started,
            load_wait,
            admit,
            last_token: None,
            finished: false,
            ended: false,
            prompt_tokens,
            generated: 0,
            reading,
        })
    }

    /// The model's name.
    pub fn model_name(&self) -> &str {
        self.shown_name.as_deref().unwrap_or(&self.lease.name)
    }

    /// Token texts of the model (for logprobs).
    pub fn token_text_source(&self) -> TokenTexts {
        TokenTexts(self.engine.clone())
    }

    /// The next events. The first token goes out alone and at once; after
    /// it, a batch starts with the next event and gathers for
    /// [`crate::state::AppState::stream_flush`] or until the request ends,
    /// sleeping meanwhile (the engine's sends do not wake this task), then
    /// takes up to 64 of what arrived. A fast decoder so costs one wake-up
    /// and one socket write per interval instead of one per token. `None`
    /// after the end.
    pub async fn next_batch(&mut self) -> Option<Vec<StreamEvent>> {
        if self.finished {
            return None;
        }
        let first = self.stream.next().await?;
        let mut batch = vec![first];
        let deadline = tokio::time::Instant::now() + self.state.stream_flush;
        let hold = self.last_token.is_some() && !self.state.stream_flush.is_zero();
        if hold && !self.ended && !is_last(batch.last()) {
            // Sleep to the deadline without polling the stream, so the
            // engine's sends wake nobody (one wake-up per batch, not one per
            // token); the end of the request cuts the wait short.
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => {}
                _ = self.stream.ended() => self.ended = true,
            }
        }
        while batch.len() < MAX_BATCH && !is_last(batch.last()) {
            match self.stream.try_next() {
                Some(Some(ev)) => batch.push(ev),
                Some(None) | None => break,
            }
        }
        self.observe(&batch);
        Some(batch)
    }

    fn observe(&mut self, batch: &[StreamEvent]) {
        let now = Instant::now();
        let n = batch.iter().filter(|e| matches!(e, StreamEvent::Token { .. })).count();
        if n > 0 {
            let m = &self.state.metrics;
            match self.last_token {
                None => {
                    m.ttft.observe((now - self.started).as_secs_f64());
                    for _ in 1..n {
                        m.itl.observe(0.0);
                    }
                }
                Some(prev) => {
                    let each = (now - prev).as_secs_f64() / n as f64;
                    for _ in 0..n {
                        m.itl.observe(each);
                    }
                }
            }
            self.last_token = Some(now);
            self.generated += n;
        }
        match batch.last() {
            Some(StreamEvent::Done { reason, timings, .. }) => self.finish(reason_name(*reason), Some(timings)),
            Some(StreamEvent::Error(e)) => {
                tracing::warn!(model = %self.model_name(), "generation failed: {e}");
                self.finish("error", None)
            }
            _ => {}
        }
    }

    fn finish(&mut self, reason: &str, t: Option<&Timings>) {
        self.finished = true;
        let m = &self.state.metrics;
        // Counted here for both ways a cancellation ends: the handler dropped
        // mid-stream (Drop) or the engine's own `Done { Cancelled }` event.
        if reason == "cancelled" {
            m.cancelled.fetch_add(1, Ordering::Relaxed);
        }
        let t = t.cloned().unwrap_or_else(|| Timings {
            prompt_tokens: self.prompt_tokens,
            decode_tokens: self.generated,
            total_ms: self.started.elapsed().as_secs_f64() * 1e3,
            ..Default::default()
        });
        m.prompt_tokens.fetch_add(t.prompt_tokens as u64, Ordering::Relaxed);
        m.cached_tokens.fetch_add(t.cached_tokens as u64, Ordering::Relaxed);
        m.generated_tokens.fetch_add(t.decode_tokens as u64, Ordering::Relaxed);
        // A first token that was generated but never sent as text (an end
        // token, or a stop string held back) still has a time to first
        // token: the elapsed time less what the engine spent after it.
        if self.last_token.is_none() && t.decode_tokens > 0 && t.ttft_ms > 0.0 {
            let after_first = (t.total_ms - t.ttft_ms).max(0.0) / 1e3;
            m.ttft.observe((self.started.elapsed().as_secs_f64() - after_first).max(0.0));
        }
        let rec = TimingRecord {
            model: self.model_name().to_string(),
            prompt_tokens: t.prompt_tokens,
            cached_tokens: t.cached_tokens,
            prefill_tokens: t.prefill_tokens,
            prefill_chunk: self.state.prefill_chunk,
            ttft_ms: t.ttft_ms,
            decode_tokens: t.decode_tokens,
            decode_tok_s: t.decode_tok_s(),
            total_ms: t.total_ms,
            finish_reason: reason.to_string(),
            queue_ms: t.queue_ms,
            prefill_ms: t.prefill_ms,
            admit_ms: self.admit.as_secs_f64() * 1e3,
            draft_proposed: t.draft_proposed,
            draft_accepted: t.draft_accepted,
        };
        tracing::info!(
            model = %rec.model, prompt_tokens = rec.prompt_tokens, cached_tokens = rec.cached_tokens,
            ttft_ms = rec.ttft_ms, decode_tokens = rec.decode_tokens, decode_tok_s = rec.decode_tok_s,
            finish_reason = %rec.finish_reason, dropped_messages = t.dropped_messages,
            context_shifts = t.context_shifts, "request finished"
        );
        if let Some(sink) = &self.state.timings {
            sink.write(&rec);
        }
    }

    /// Runs to the end and collects the output.
    pub async fn collect(mut self) -> Result<Collected, ApiError> {
        let (mut text, mut tokens) = (String::new(), Vec::new());
        while let Some(batch) = self.next_batch().await {
            for ev in batch {
                match ev {
                    StreamEvent::Token { token, text: t, logprob } => {
                        text.push_str(&t);
                        tokens.push((token, logprob));
                    }
                    StreamEvent::Done { reason, text: t, timings } => {
                        text.push_str(&t);
                        return Ok(Collected { text, tokens, reason, timings });
                    }
                    StreamEvent::Error(e) => return Err(ApiError::Internal(e)),
                }
            }
        }
        Err(ApiError::Unavailable("the engine stopped before the request finished".into()))
    }
}

impl Drop for Generation {
    fn drop(&mut self) {
        if !self.finished {
            self.finish("cancelled", None);
        }
    }
}

fn is_last(ev: Option<&StreamEvent>) -> bool {
    matches!(ev, Some(StreamEvent::Done { .. } | StreamEvent::Error(_)))
}

/// The name of a finish reason in timing records.
pub fn reason_name(r: FinishReason) -> &'static str {
    match r {
        FinishReason::Stop => "stop",
        FinishReason::Length => "length",
        FinishReason::ContextLength => "context_length",
        FinishReason::Cancelled => "cancelled",
    }
}

/// Turns event batches into the bytes of a streamed response.
pub trait Render: Send + 'static {
    /// Bytes sent before any event (may be empty).
    fn head(&mut self, gen: &Generation) -> Bytes;
    /// The bytes for one batch, and whether the stream is complete.
    fn batch(&mut self, gen: &Generation, events: Vec<StreamEvent>) -> (Bytes, bool);
    /// The bytes for an error that ends the stream.
    fn error(&mut self, gen: &Generation, e: &ApiError) -> Bytes;
}

/// A response body streaming `gen` through `r`. Dropping the body (the
/// client disconnected) drops the generation, which cancels it.
pub fn stream_body<R: Render>(gen: Generation, r: R) -> Body {
    struct S<R> {
        gen: Generation,
        r: R,
        started: bool,
        done: bool,
    }
    let s = S { gen, r, started: false, done: false };
    let st = futures_util::stream::unfold(s, |mut s| async move {
        if s.done {
            return None;
        }
        if !s.started {
            s.started = true;
            let head = s.r.head(&s.gen);
            return Some((Ok::<_, Infallible>(head), s));
        }
        let bytes = match s.gen.next_batch().await {
            Some(events) => {
                let (b, fin) = s.r.batch(&s.gen, events);
                s.done = fin;
                b
            }
            None => {
                s.done = true;
                s.r.error(&s.gen, &ApiError::Unavailable("the engine stopped before the request finished".into()))
            }
        };
        Some((Ok(bytes), s))
    });
    Body::from_stream(st)
}
