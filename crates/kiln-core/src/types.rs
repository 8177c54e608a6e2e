//! Requests, sampling parameters, finish reasons and stream events: the
//! vocabulary shared by the engine, the server, the CLI and the bindings.

use serde::{Deserialize, Serialize};

/// A token id.
pub type TokenId = u32;

/// Hard cap on the repetition-penalty window, so the per-token cost of the
/// penalty stage stays bounded whatever a request asks for.
pub const MAX_REPEAT_LAST_N: usize = 4096;

/// Maximum number of alternatives reported per token with `top_logprobs`.
pub const MAX_TOP_LOGPROBS: usize = 20;

/// How the next token is chosen. Defaults give plain greedy decoding.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SamplingParams {
    /// 0 means greedy (argmax); otherwise logits are divided by it.
    pub temperature: f32,
    /// Keep only the `top_k` most likely tokens; 0 disables.
    pub top_k: usize,
    /// Nucleus sampling: keep the smallest set whose probability reaches `top_p`; 1 disables.
    pub top_p: f32,
    /// Drop tokens whose probability is below `min_p` times the most likely one; 0 disables.
    pub min_p: f32,
    /// Multiplicative repetition penalty (llama.cpp / HF semantics); 1 disables.
    pub repetition_penalty: f32,
    /// Window (in tokens) the repetition, presence and frequency penalties look at.
    /// Clamped to [`MAX_REPEAT_LAST_N`].
    pub repeat_last_n: usize,
    /// OpenAI presence penalty (subtracted once per token seen); 0 disables.
    pub presence_penalty: f32,
    /// OpenAI frequency penalty (subtracted per occurrence); 0 disables.
    pub frequency_penalty: f32,
    /// Added to the logit of the given token before sampling.
    pub logit_bias: Vec<(TokenId, f32)>,
    /// Seed of the random stream; `None` picks one from entropy.
    pub seed: Option<u64>,
    /// Report the log-probability of each chosen token.
    pub logprobs: bool,
    /// Also report this many most likely alternatives per position (≤ [`MAX_TOP_LOGPROBS`]).
    pub top_logprobs: usize,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repetition_penalty: 1.0,
            repeat_last_n: 64,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            logit_bias: Vec::new(),
            seed: None,
            logprobs: false,
            top_logprobs: 0,
        }
    }
}

/// When generation ends, besides the model's own end-of-sequence tokens.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct StopParams {
    /// Maximum number of generated tokens.
    pub max_tokens: usize,
    /// Strings that end generation; they are matched across token boundaries
    /// and never emitted.
    pub stop: Vec<String>,
    /// Extra token ids that end generation.
    pub stop_token_ids: Vec<TokenId>,
    /// Keep generating past end-of-sequence tokens (benchmarks).
    pub ignore_eos: bool,
}

impl Default for StopParams {
    fn default() -> Self {
        Self { max_tokens: 256, stop: Vec::new(), stop_token_ids: Vec::new(), ignore_eos: false }
    }
}

/// Why a sequence stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// An end-of-sequence token or a stop string.
    Stop,
    /// `max_tokens` reached.
    Length,
    /// The context window is full.
    ContextLength,
    /// The client went away or the request was cancelled.
    Cancelled,
}

impl FinishReason {
    /// The OpenAI `finish_reason` string.
    pub fn as_openai(self) -> &'static str {
        match self {
            Self::Stop => "stop",
            Self::Length | Self::ContextLength => "length",
            Self::Cancelled => "cancelled",
        }
    }
}

/// A token with its log-probability.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TokenLogprob {
    /// Token id.
    pub token: TokenId,
    /// Natural-log probability after the sampling transforms' temperature scaling.
    pub logprob: f32,
}

/// What the sampler picked at one position.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sampled {
    /// The chosen token.
    pub token: TokenId,
    /// Its log-probability (from the full distribution, see [`TokenLogprob`]).
    pub logprob: f32,
    /// The most likely alternatives, when requested.
    pub top_logprobs: Vec<TokenLogprob>,
}

/// Timings and counts of one request, reported with its last event.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Timings {
    /// Tokens in the prompt.
    pub prompt_tokens: usize,
    /// Prompt tokens whose KV was reused: from the prefix cache, and
    /// copied from the segment cache (`segment_tokens`).
    pub cached_tokens: usize,
    /// Of `cached_tokens`, tokens of marked segments copied from the
    /// segment cache (keys re-rotated to their position).
    #[serde(default)]
    pub segment_tokens: usize,
    /// Tokens of marked segments computed in the request: the recomputed
    /// first tokens of each cached segment, and whole segments that were
    /// not cached when the request was admitted.
    #[serde(default)]
    pub segment_recomputed: usize,
    /// Prompt tokens actually computed (`prompt_tokens - cached_tokens`).
    pub prefill_tokens: usize,
    /// Time from submission until the first generated token, in ms.
    pub ttft_ms: f64,
    /// Time spent in prefill forwards, in ms.
    pub prefill_ms: f64,
    /// Generated tokens.
    pub decode_tokens: usize,
    /// Time from the first to the last generated token, in ms.
    pub decode_ms: f64,
    /// Time from submission to completion, in ms.
    pub total_ms: f64,
    /// Time spent waiting before the first forward, in ms.
    pub queue_ms: f64,
    /// Tokens proposed by speculative decoding (0 without it).
    #[serde(default)]
    pub draft_proposed: usize,
    /// Of those, tokens the model agreed with (kept in the output).
    #[serde(default)]
    pub draft_accepted: usize,
    /// Oldest chat messages dropped so the prompt fits the context
    /// (context shift).
    #[serde(default)]
    pub dropped_messages: usize,
    /// Times the answer reached the context and old tokens were dropped
    /// (context shift).
    #[serde(default)]
    pub context_shifts: usize,
}

impl Timings {
    /// Prefill throughput in tokens per second.
    pub fn prefill_tok_s(&self) -> f64 {
        per_second(self.prefill_tokens, self.prefill_ms)
    }
    /// Decode throughput in tokens per second, the first token excluded.
    pub fn decode_tok_s(&self) -> f64 {
        per_second(self.decode_tokens.saturating_sub(1), self.decode_ms)
    }
}

fn per_second(n: usize, ms: f64) -> f64 {
    if ms <= 0.0 {
        0.0
    } else {
        n as f64 * 1000.0 / ms
    }
}

/// One event of a request's output stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum StreamEvent {
    /// A generated token. `text` is the new, complete UTF-8 text it makes
    /// visible (possibly empty while a multi-byte character or a possible stop
    /// string is pending).
    Token {
        /// Token id.
        token: TokenId,
        /// Newly visible text.
        text: String,
        /// Sampling details when logprobs were requested.
        logprob: Option<Sampled>,
    },
    /// The request finished; always the last event of a successful stream.
    Done {
        /// Why it finished.
        reason: FinishReason,
        /// Text held back at the end (e.g. a partial stop-string match that
        /// never completed), flushed before finishing.
        text: String,
        /// Timings and counts.
        timings: Timings,
    },
    /// The request failed; always the last event of a failed stream.
    Error(String),
}
