//! # kiln-engine
//!
//! The engine behind the CLI, the server and the bindings. [`EngineHandle::start`]
//! loads a model and starts one engine thread that owns the model, the paged
//! KV cache and the scheduler; callers [`EngineHandle::submit`] requests and
//! read [`kiln_core::StreamEvent`]s from a [`RequestStream`]. The engine never
//! waits on a reader: events go through an unbounded channel, and a dropped
//! stream cancels its request within one step.
//!
//! ```no_run
//! use kiln_engine::{EngineConfig, EngineHandle, Prompt, Request};
//! # fn main() -> Result<(), kiln_engine::EngineError> {
//! let engine = EngineHandle::start("model.gguf".as_ref(), EngineConfig::default())?;
//! let out = engine.generate(Request::new(Prompt::Text("Once upon a time".into())))?;
//! println!("{} ({:.1} tok/s)", out.text, out.timings.decode_tok_s());
//! # Ok(()) }
//! ```
#![warn(missing_docs, unreachable_pub)]
#![deny(unused_must_use)]

pub mod answer;
mod chat_fit;
mod config;
mod context_shift;
mod draft;
mod embed;
mod engine_loop;
mod error;
mod event_tx;
mod grammar;
mod handle;
pub mod lora;
pub mod memory;
mod next_turn;
pub mod probe;
mod request;
mod segments;
mod sequence;
mod spec;
mod stats;
mod tier;
pub mod worker;

pub use config::{
    Device, EngineConfig, DEFAULT_MAX_CTX, DEFAULT_MAX_SEGMENTS, DEFAULT_SEGMENT_CONTEXT, DEFAULT_SEGMENT_RECOMPUTE,
    GPU_PREFILL_CHUNK, WGPU_PREFILL_CHUNK,
};
pub use embed::{is_embedding_model, Embedder, EmbedderInfo, BATCH_TOKENS};
pub use error::{EngineError, Result};
pub use handle::{check_draft, CancelHandle, Completion, EngineHandle, ModelInfo, RequestStream};
pub use kiln_core::{FinishReason, SamplingParams, StopParams, StreamEvent, Timings};
pub use kiln_cuda::{AttnKernel, CudaOptions};
pub use kiln_kernels::CpuIsa;
pub use kiln_models::encoder::normalize;
pub use kiln_models::KvType;
pub use lora::{LoraInfo, LoraRequest};
pub use request::{
    segment_marker, ChatMessage, ChatPrompt, GoChatTemplate, Params, Prompt, Request, SegmentSpan, SegmentedPrompt,
    TemplateFunctionCall, TemplateToolCall,
};
pub use spec::SpecConfig;
pub use stats::{EngineStats, EngineStatsCell};
