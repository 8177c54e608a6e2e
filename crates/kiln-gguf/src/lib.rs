//! # kiln-gguf
//!
//! A safe reader (and a small writer) for GGUF model files, versions 2 and 3.
//!
//! Model files come from strangers: every count, string length, array length,
//! tensor shape and data offset is checked against the file size before any
//! allocation, and every failure is a [`GgufError`] naming the problem (and
//! the file). No input can make this crate panic or abort; a corrupt count can
//! never trigger a huge allocation.
//!
//! ## Reading
//!
//! ```no_run
//! use kiln_gguf::GgufFile;
//! # fn main() -> Result<(), kiln_gguf::GgufError> {
//! let file = GgufFile::open("SmolLM2-135M-Instruct.Q4_1.gguf")?; // memory-mapped
//! let meta = file.metadata();
//! let arch = meta.arch()?; // "llama"
//! let n_layers = meta.arch_u32("block_count")?; // "llama.block_count"
//! let vocab: &[String] = meta.get_str_array("tokenizer.ggml.tokens")?;
//! for t in file.tensors() {
//!     println!("{} {:?} {} at {:?}", t.name, t.dims, t.ty, t.data_range());
//! }
//! let q = file.tensor("blk.0.attn_q.weight").expect("tensor present");
//! let bytes: &[u8] = file.tensor_data(q); // borrowed from the mapping
//! let owned = file.tensor_bytes_arc(q); // keeps the mapping alive on its own
//! # let _ = (arch, n_layers, vocab, bytes, owned); Ok(()) }
//! ```
//!
//! [`GgufFile`] is an `Arc` inside: clone it freely. Tensor `dims` are in
//! GGUF order, innermost (contiguous) dimension first.
//!
//! ## Metadata
//!
//! [`Metadata`] keeps file order. Getters `get_*` fail on a missing key,
//! `opt_*` return `Ok(None)`; both fail on a wrong type. Integer getters
//! accept any integer type whose value fits (writers disagree on
//! `u32`/`i32`/`u64`). Arrays are stored by element type ([`Array`]).
//!
//! ## Writing
//!
//! [`GgufWriter`] builds v3 files from metadata and raw tensor bytes; tests
//! across kiln use it to generate tiny random models.
//!
//! ## What is checked
//!
//! Magic and version (v1 and big-endian files are refused with a clear
//! message), header counts against the file size, every string length and
//! UTF-8, value type ids, array lengths (before allocating) and nesting depth
//! (at most 8), duplicate keys and tensor names, `general.alignment` (nonzero
//! power of two), tensor rank (1 to 4), dims (nonzero, product without
//! overflow), GGML type ids, innermost dim a multiple of the block size,
//! offsets (aligned, in bounds) and that no two tensors overlap.
//!
//! ## Fuzzing
//!
//! [`parse`] takes any byte slice and returns `Ok` or `Err`; it is the entry
//! point for a fuzz target (see its docs).
#![warn(missing_docs, unreachable_pub)]
#![deny(unused_must_use)]

mod error;
mod file;
mod metadata;
mod reader;
mod tensor;
mod types;
mod value;
mod writer;

pub use error::{GgufError, Result};
pub use file::{parse, GgufFile, TensorBytes, ALIGNMENT_KEY, DEFAULT_ALIGNMENT};
pub use metadata::Metadata;
pub use reader::{MAX_ARRAY_DEPTH, MAX_DIMS};
pub use tensor::TensorInfo;
pub use types::GgmlType;
pub use value::{Array, Value, ValueType};
pub use writer::GgufWriter;
