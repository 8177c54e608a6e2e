//! The stand-in of a device backend that this build leaves out (a backend
//! crate built without its cargo feature): its types exist, so the engine
//! has one code path whatever the build, and opening a device fails with
//! an error that names the feature to build with. Nothing of it can be
//! made, so every operation is unreachable (`Infallible`).
//!
//! A backend crate describes its device with [`NotBuilt`] and names the
//! stand-in as its backend and KV types:
//!
//! ```
//! use kiln_backend::absent::{Absent, AbsentKv, NotBuilt};
//!
//! pub struct NoToy;
//! impl NotBuilt for NoToy {
//!     const DEVICE: &'static str = "toy";
//!     const HINT: &'static str = "this kiln was built without the toy backend: \
//!         rebuild with `cargo build --release -p kiln --features toy`";
//!     type Options = ();
//! }
//! pub type ToyBackend = Absent<NoToy>;
//! pub type ToyKv = AbsentKv<NoToy>;
//!
//! let hints = kiln_backend::ModelHints { head_dim: 64, bf16_weights: false, encoder: false };
//! let e = ToyBackend::open(&(), &hints).err().expect("never built");
//! assert_eq!(e.to_string(), format!("toy: {}", NoToy::HINT));
//! ```

use std::convert::Infallible;
use std::marker::PhantomData;

use crate::{
    AttnIn, AttnShape, Backend, BackendError, BufferKind, Draw, Feature, ForwardBatch, Glu, KvMemory, KvSpec,
    MatrixDesc, ModelHints, Result, RopeDesc,
};

/// A device whose backend this build leaves out.
pub trait NotBuilt {
    /// The backend's name in errors (`cuda`, `wgpu`).
    const DEVICE: &'static str;
    /// What opening it says: that this build lacks it and the command
    /// (the cargo feature) that builds a kiln with it.
    const HINT: &'static str;
    /// What the real backend's `open` takes.
    type Options;
}

/// The backend of device `D` in a build without it: cannot be made.
pub struct Absent<D> {
    never: Infallible,
    device: PhantomData<fn() -> D>,
}

/// The KV memory of device `D` in a build without it: never made.
pub struct AbsentKv<D> {
    never: Infallible,
    device: PhantomData<fn() -> D>,
}

impl<D: NotBuilt> Absent<D> {
    /// Always fails with [`NotBuilt::HINT`]: this build has no such backend.
    pub fn open(_opts: &D::Options, _hints: &ModelHints) -> Result<Self> {
        Err(Self::not_built())
    }

    /// The error of opening this device: a [`BackendError::Device`] that
    /// says how to get a build with it.
    pub fn not_built() -> BackendError {
        BackendError::Device { device: D::DEVICE, what: D::HINT.to_string() }
    }
}

impl<D> KvMemory for AbsentKv<D> {
    fn num_blocks(&self) -> usize {
        match self.never {}
    }
    fn block_size(&self) -> usize {
        match self.never {}
    }
    fn tier_slots(&self) -> usize {
        match self.never {}
    }
    fn tier_batch(&self) -> usize {
        match self.never {}
    }
    fn tier_save(&mut self, _: &[u32], _: &[u32]) -> Result<()> {
        match self.never {}
    }
    fn tier_load(&mut self, _: &[u32], _: &[u32]) -> Result<()> {
        match self.never {}
    }
    fn tier_slot(&mut self, _: usize) -> Result<Vec<u16>> {
        match self.never {}
    }
    fn format_name(&self) -> &'static str {
        match self.never {}
    }
}

impl<D> Backend for Absent<D> {
    type Matrix = Infallible;
    type Vector = Infallible;
    type Rope = Infallible;
    type Buffer = Infallible;
    type Kv = AbsentKv<D>;
    type Step = Infallible;

    fn name(&self) -> String {
        match self.never {}
    }
    fn samples_on_device(&self) -> bool {
        match self.never {}
    }
    fn supports(&self, _: Feature) -> bool {
        match self.never {}
    }
    fn matrix(&mut self, _: MatrixDesc) -> Result<Infallible> {
        match self.never {}
    }
    fn matrix_bytes(&self, _: &Infallible) -> usize {
        match self.never {}
    }
    fn vector(&mut self, _: &[f32]) -> Result<Infallible> {
        match self.never {}
    }
    fn rope(&mut self, _: &RopeDesc) -> Result<Infallible> {
        match self.never {}
    }
    fn buffer(&mut self, _: BufferKind, _: usize) -> Result<Infallible> {
        match self.never {}
    }
    fn kv(&mut self, _: &KvSpec) -> Result<AbsentKv<D>> {
        match self.never {}
    }
    fn begin(&mut self, _: &ForwardBatch, _: &AbsentKv<D>, _: &[Option<Draw>]) -> Result<Infallible> {
        match self.never {}
    }
    fn run(&mut self, _: &Infallible, _: &mut dyn FnMut(&mut Self) -> Result<()>) -> Result<()> {
        match self.never {}
    }
    fn finish(&mut self, _: &Infallible, _: &mut Infallible, _: &mut Vec<u32>, _: &mut Vec<f32>) -> Result<()> {
        match self.never {}
    }
    fn embed(&mut self, _: &Infallible, _: &Infallible, _: f32, _: &mut Infallible) -> Result<()> {
        match self.never {}
    }
    fn attn_in(
        &mut self,
        _: &Infallible,
        _: &mut Infallible,
        _: &AttnIn<'_, Self>,
        _: &mut AbsentKv<D>,
        _: usize,
        _: &mut Infallible,
    ) -> Result<()> {
        match self.never {}
    }
    fn attention(
        &mut self,
        _: &Infallible,
        _: &Infallible,
        _: &AbsentKv<D>,
        _: usize,
        _: &AttnShape,
        _: &mut Infallible,
    ) -> Result<()> {
        match self.never {}
    }
    fn linear_add(
        &mut self,
        _: &Infallible,
        _: &Infallible,
        _: &Infallible,
        _: Option<(&Infallible, f32)>,
        _: &mut Infallible,
    ) -> Result<()> {
        match self.never {}
    }
    fn norm_glu(
        &mut self,
        _: &Infallible,
        _: &mut Infallible,
        _: &Infallible,
        _: f32,
        _: &Infallible,
        _: Glu,
        _: &mut Infallible,
    ) -> Result<()> {
        match self.never {}
    }
    fn head(
        &mut self,
        _: &Infallible,
        _: &mut Infallible,
        _: &Infallible,
        _: f32,
        _: &Infallible,
        _: &mut Infallible,
    ) -> Result<()> {
        match self.never {}
    }
}
