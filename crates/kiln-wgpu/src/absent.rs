//! The wgpu backend of a build without the `wgpu` feature: the stand-in of
//! `kiln_backend::absent`, so that the engine is one code path, and
//! opening a device says how to get a build that has it.

use kiln_backend::absent::{Absent, AbsentKv, NotBuilt};

use crate::WgpuOptions;

/// The wgpu device in a build without it.
pub struct NoWgpu;

impl NotBuilt for NoWgpu {
    const DEVICE: &'static str = "wgpu";
    const HINT: &'static str = crate::NOT_BUILT;
    type Options = WgpuOptions;
}

/// A wgpu device (this build has no wgpu backend: [`WgpuBackend::open`]
/// fails saying how to get one).
pub type WgpuBackend = Absent<NoWgpu>;

/// The KV memory of a wgpu device (never made in this build).
pub type WgpuKv = AbsentKv<NoWgpu>;
