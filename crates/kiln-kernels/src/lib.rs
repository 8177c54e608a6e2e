//! # kiln-kernels
//!
//! The CPU kernels behind kiln's ops layer. Model code calls these and never
//! changes when a kernel does.
//!
//! - [`pool`]: a persistent thread pool (`run(|ith, nth| ...)`).
//! - [`isa`]: the instruction-set level every kernel dispatches on, and
//!   its cap (`KILN_CPU_ISA`, [`isa::set_cap`]).
//! - [`buf`]: large aligned buffers backed by huge pages where the OS allows.
//! - [`quant`]: GGUF block formats: dequantize (and quantize, for activations
//!   and tests) every supported [`GgmlType`].
//! - [`matmul`](mod@matmul): `y = x · Wᵀ` for a weight in any supported format, SIMD with
//!   runtime feature detection, each path tested against the plain reference.
//! - [`ops`]: RMSNorm, RoPE, SwiGLU, softmax and attention over paged KV.
//! - [`backend`]: all of it as a `kiln_backend::Backend` ([`CpuBackend`]),
//!   the device the model families run on.
#![warn(missing_docs, unreachable_pub)]
#![deny(unused_must_use)]

pub mod backend;
pub mod buf;
pub mod isa;
pub mod matmul;
pub mod ops;
pub mod pool;
pub mod quant;

pub use backend::{CpuBackend, CpuOptions};
pub use isa::CpuIsa;
pub use kiln_gguf::GgmlType;
pub use matmul::{matmul, matmul_multi, WeightView};
pub use pool::ThreadPool;
pub use quant::KernelError;
