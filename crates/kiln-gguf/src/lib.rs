//! # kiln-gguf
//!
//! A safe reader (and a small writer) for GGUF model files.
//!
//! Model files come from strangers: every count, string length, array length,
//! tensor shape and data offset is checked against the file size before any
//! allocation, and every failure is a [`GgufError`] naming the problem. No
//! input can make this crate panic or abort.
#![warn(missing_docs, unreachable_pub)]
#![deny(unused_must_use)]

mod types;

pub use types::GgmlType;
