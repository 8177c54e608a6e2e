//! The CUDA backend of a build without the `cuda` feature: the stand-in of
//! `kiln_backend::absent`, so that the engine is one code path, and
//! opening a device says how to get a build that has it.

use kiln_backend::absent::{Absent, AbsentKv, NotBuilt};

use crate::CudaOptions;

/// The CUDA device in a build without it.
pub struct NoCuda;

impl NotBuilt for NoCuda {
    const DEVICE: &'static str = "cuda";
    const HINT: &'static str = "this kiln was built without CUDA support: rebuild with \
                                `cargo build --release -p kiln --features cuda` (docs/cuda.md)";
    type Options = CudaOptions;
}

/// A GPU (this build has no CUDA backend: [`CudaBackend::open`] fails
/// saying how to get one).
pub type CudaBackend = Absent<NoCuda>;

/// The KV memory of a GPU (never made in this build).
pub type CudaKv = AbsentKv<NoCuda>;
