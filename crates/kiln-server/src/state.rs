//! What every handler shares.

use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};

use serde::Serialize;

use crate::metrics::Metrics;
use crate::pool::ModelPool;
use crate::validate::Limits;

/// The server's shared state.
pub struct AppState {
    /// Loaded models.
    pub pool: ModelPool,
    /// Counters.
    pub metrics: Metrics,
    /// Request bounds.
    pub limits: Limits,
    /// Accepted bearer keys; empty: no key needed.
    pub api_keys: Vec<String>,
    /// Per-client concurrency limit, if any.
    pub client_limit: Option<std::sync::Arc<crate::client_limit::ClientLimiter>>,
    /// Per-request timing records.
    pub timings: Option<TimingsSink>,
    /// Prefill chunk of the engines (reported in timing records).
    pub prefill_chunk: usize,
    /// After the first token, how long streamed events are gathered into one write.
    pub stream_flush: std::time::Duration,
    /// Origins allowed to call from a browser page.
    pub cors: crate::cors::CorsOrigins,
    /// The server listens on a loopback address: browser requests must name
    /// it so in `Host` (DNS rebinding).
    pub loopback_only: bool,
    /// LoRA adapters requests may name.
    pub loras: crate::lora::LoraTable,
}

/// Shared state handle.
pub type SharedState = Arc<AppState>;

/// One per-request timing record.
#[derive(Debug, Clone, Serialize)]
pub struct TimingRecord {
    /// Model name.
    pub model: String,
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// Reused from the prefix cache.
    pub cached_tokens: usize,
    /// Computed.
    pub prefill_tokens: usize,
    /// Prefill chunk size.
    pub prefill_chunk: usize,
    /// Time to first token (engine), ms.
    pub ttft_ms: f64,
    /// Generated tokens.
    pub decode_tokens: usize,
    /// Decode speed, first token excluded.
    pub decode_tok_s: f64,
    /// Whole request, ms.
    pub total_ms: f64,
    /// `stop`, `length`, `context_length`, `cancelled`, `error`.
    pub finish_reason: String,
    /// Of `ttft_ms`: waiting in the engine's queue before the first step, ms.
    pub queue_ms: f64,
    /// Of `ttft_ms`: forward passes that computed the prompt, ms.
    pub prefill_ms: f64,
    /// Before the engine: finding (or loading) the model, rendering the
    /// chat template and tokenizing, ms. Not part of `ttft_ms`.
    pub admit_ms: f64,
    /// Tokens proposed by speculative decoding (`--draft`).
    pub draft_proposed: usize,
    /// Of those, tokens kept.
    pub draft_accepted: usize,
}

const CSV_HEADER: &str =
    "model,prompt_tokens,cached_tokens,prefill_tokens,prefill_chunk,ttft_ms,decode_tokens,decode_tok_s,total_ms,finish_reason,queue_ms,prefill_ms,admit_ms,draft_proposed,draft_accepted";

/// Appends timing records to a CSV (`.csv`) or JSON Lines (anything else) file.
pub struct TimingsSink {
    file: Mutex<std::fs::File>,
    csv: bool,
}

impl TimingsSink {
    /// Opens (appends to) `path`; a new CSV file gets a header.
    pub fn open(path: &Path) -> std::io::Result<Self> {
        let csv = path.extension().is_some_and(|e| e.eq_ignore_ascii_case("csv"));
        let fresh = std::fs::metadata(path).map(|m| m.len() == 0).unwrap_or(true);
        let mut file = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
        if csv && fresh {
            writeln!(file, "{CSV_HEADER}")?;
        }
        Ok(Self { file: Mutex::new(file), csv })
    }

    /// Writes one record (errors are logged, never returned to the client).
    pub fn write(&self, r: &TimingRecord) {
        let line = if self.csv {
            format!(
                "{},{},{},{},{},{:.3},{},{:.2},{:.3},{},{:.3},{:.3},{:.3},{},{}",
                r.model.replace([',', '\n', '"'], "_"),
                r.prompt_tokens,
                r.cached_tokens,
                r.prefill_tokens,
                r.prefill_chunk,
                r.ttft_ms,
                r.decode_tokens,
                r.decode_tok_s,
                r.total_ms,
                r.finish_reason,
                r.queue_ms,
                r.prefill_ms,
                r.admit_ms,
                r.draft_proposed,
                r.draft_accepted
            )
        } else {
            serde_json::to_string(r).unwrap_or_default()
        };
        if let Ok(mut f) = self.file.lock() {
            if let Err(e) = writeln!(f, "{line}") {
                tracing::warn!("cannot write the timings file: {e}");
            }
        }
    }
}
