//! # kiln-bind
//!
//! What kiln's language bindings (`bindings/python`, `bindings/node`) share,
//! so that each binding only maps types: [`load`] turns a model name and
//! load options into a running [`Model`] (a text generator or an
//! embedder); [`GenOptions`] holds the generation options as a caller gave
//! them and checks them with messages that use the caller's own names
//! ([`Style`]); [`Input`] and [`chat_prompt`] build prompts; [`submit`]
//! sends a prompt with its options, tools, format and reasoning included
//! (the engine's [`kiln_engine::answer`], as the server uses it); [`Events`]
//! reads a request as [`Event`]s in the flat shape both languages expose,
//! or to a whole [`Reply`] (content, reasoning, tool calls); [`embed`] and
//! [`rerank`] run an embedding model; [`bench_engine`] measures the engine
//! as `kiln bench` does, for the bindings' benchmarks to compare against
//! in one process.
//!
//! ```no_run
//! use kiln_bind::{load, submit, GenOptions, Input, LoadOptions, Style};
//! # fn main() -> Result<(), kiln_bind::BindError> {
//! let model = load("smollm2", &LoadOptions::default(), Style::Snake)?;
//! let engine = model.generator("generate")?;
//! let opts = GenOptions { max_tokens: Some(16), ..GenOptions::default() };
//! let mut events = submit(engine, Input::Text("Once".into()).prompt()?, &opts, Style::Snake)?;
//! println!("{}", events.collect()?.content);
//! # Ok(()) }
//! ```
#![warn(missing_docs, unreachable_pub)]
#![deny(unused_must_use)]

mod bench;
mod embed;
mod error;
mod event;
mod load;
mod options;
mod prompt;
mod reply;
mod request;
mod shape;

pub use bench::{bench_engine, Sample};
pub use embed::{embed, embed_async, rerank, rerank_async, EmbedOptions};
pub use error::BindError;
pub use event::{Event, Events};
pub use kiln_engine::{Embedder, EngineHandle, Params, Prompt, Request, RequestStream};
pub use load::{load, LoadOptions, Model};
pub use options::{GenOptions, Style};
pub use prompt::{chat_prompt, detokenize, tokenize, Input};
pub use reply::{Call, Reply};
pub use request::submit;
