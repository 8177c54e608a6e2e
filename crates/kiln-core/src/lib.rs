//! # kiln-core
//!
//! The tensor-free heart of kiln: request and event types ([`types`]), the
//! sampler chain ([`sample`]), the paged KV block manager with automatic
//! prefix caching ([`kv`]), the token-budget scheduler with chunked prefill
//! and preemption ([`sched`]) and stop-string matching ([`stop`]).
//!
//! Nothing here depends on a tensor library, so all of it is tested in
//! seconds with no model.
#![warn(missing_docs, unreachable_pub)]
#![deny(unused_must_use)]

pub mod kv;
pub mod sample;
pub mod sched;
pub mod stop;
pub mod types;

pub use types::*;
