//! The wgpu backend of a build without the `wgpu` feature: the types exist
//! so that the engine is one code path, and opening a device says how to
//! get a build that has it.

use std::convert::Infallible;

use kiln_backend::{
    AttnIn, AttnShape, Backend, BufferKind, Draw, Feature, ForwardBatch, Glu, KvMemory, KvSpec, MatrixDesc, ModelHints,
    Result, RopeDesc,
};

use crate::{AdapterSummary, WgpuError, WgpuOptions};

/// A wgpu device (this build has no wgpu backend: it cannot be made).
pub struct WgpuBackend {
    never: Infallible,
}

/// The KV memory of a wgpu device (never made in this build).
pub struct WgpuKv {
    never: Infallible,
}

impl WgpuBackend {
    /// Always fails: this build has no wgpu backend.
    pub fn open(_opts: &WgpuOptions, _hints: &ModelHints) -> Result<Self> {
        Err(WgpuError::NotBuilt.into())
    }
    /// The adapter this backend runs on.
    pub fn adapter(&self) -> &AdapterSummary {
        match self.never {}
    }
    /// Whether the backend implements `f` (asked without a device).
    pub fn supports_feature(f: Feature) -> bool {
        crate::supports_feature(f)
    }
}

impl KvMemory for WgpuKv {
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
impl Backend for WgpuBackend {
    type Matrix = Infallible;
    type Vector = Infallible;
    type Rope = Infallible;
    type Buffer = Infallible;
    type Kv = WgpuKv;
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
    fn kv(&mut self, _: &KvSpec) -> Result<WgpuKv> {
        match self.never {}
    }
    fn begin(&mut self, _: &ForwardBatch, _: &WgpuKv, _: &[Option<Draw>]) -> Result<Infallible> {
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
        _: &mut WgpuKv,
        _: usize,
        _: &mut Infallible,
    ) -> Result<()> {
        match self.never {}
    }
    fn attention(
        &mut self,
        _: &Infallible,
        _: &Infallible,
        _: &WgpuKv,
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
