//! # kiln-bind
//!
//! What kiln's language bindings (`bindings/python`, `bindings/node`) share,
//! so that each binding only maps types: [`load`] turns a model name and
//! load options into a running [`EngineHandle`]; [`GenOptions`] holds the
//! generation options as a caller gave them and checks them into engine
//! [`Params`] with messages that use the caller's own names ([`Style`]);
//! [`Input`] and [`chat_prompt`] build prompts; [`Event`] is a stream event
//! in the flat shape both languages expose; [`collect`] and [`next_event`]
//! read a stream; [`bench_engine`] measures the engine as `kiln bench`
//! does, for the bindings' benchmarks to compare against in one process.
//!
//! ```no_run
//! use kiln_bind::{load, GenOptions, Input, LoadOptions, Style};
//! # fn main() -> Result<(), kiln_bind::BindError> {
//! let engine = load("smollm2", &LoadOptions::default(), Style::Snake)?;
//! let opts = GenOptions { max_tokens: Some(16), ..GenOptions::default() };
//! let params = opts.params(Style::Snake)?;
//! let stream = engine.submit(kiln_engine::Request { prompt: Input::Text("Once".into()).prompt()?, params })?;
//! println!("{}", kiln_bind::collect(stream)?.text);
//! # Ok(()) }
//! ```
#![warn(missing_docs, unreachable_pub)]
#![deny(unused_must_use)]

mod bench;
mod error;
mod event;
mod load;
mod options;
mod prompt;

pub use bench::{bench_engine, Sample};
pub use error::BindError;
pub use event::{collect, collect_async, next_event, next_event_async, ready_event, Collected, Event};
pub use kiln_engine::{EngineHandle, Params, Prompt, Request, RequestStream};
pub use load::{load, LoadOptions};
pub use options::{GenOptions, Style};
pub use prompt::{chat_prompt, detokenize, tokenize, Input};
