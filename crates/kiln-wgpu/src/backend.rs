//! [`WgpuBackend`]: the backend interface over the kernels of
//! [`crate::shaders`]. Each operation appends dispatches to the step's
//! compute pass (wgpu orders dispatches that share a buffer), binding
//! groups cached per kernel and buffers with the parameters at a dynamic
//! offset; the step is submitted in parts as it is recorded (see
//! [`FIRST_SUBMIT`]), [`Backend::run`] submits the last, and
//! [`Backend::finish`] reads the logits back.

use std::sync::Arc;

use kiln_backend::{
    AttnIn, AttnMask, AttnShape, Backend, BackendError, BufferKind, Draw, Feature, ForwardBatch, Glu, KvSpec,
    MatrixDesc, ModelHints, Result as BResult, RopeDesc, RopeStyle,
};

use crate::bind_cache::BindCache;
use crate::gpu::Gpu;
use crate::kernels::{Kernel, Kernels, PARAM_BYTES};
use crate::kv::{WgpuKv, MAX_HEAD_DIM};
use crate::matrix::{f32_bytes, WgpuMatrix};
use crate::profile::Profiler;
use crate::shaders;
use crate::{AdapterSummary, Result, WgpuError, WgpuOptions};

/// Bytes between two dispatches' parameters (the uniform offset alignment
/// every adapter accepts).
const PARAM_STRIDE: u64 = 256;
/// Steps of at most this many rows (one product workgroup's input rows)
/// norm the products' inputs and compute the gated unit inside the
/// products; larger steps (prompts) norm and gate once in kernels of their
/// own, since every product workgroup would repeat that work.
const FUSE_ROWS: usize = 8;
// Steps that norm inside the products take the forms that can.
const _: () = assert!(FUSE_ROWS < crate::shaders::TILED_FROM && FUSE_ROWS < 16);
/// Bind groups kept at most (the cache is emptied when it grows past
/// this: a step binds a few dozen distinct sets).
const MAX_BIND_GROUPS: usize = 4096;
/// Dispatches one step may record.
const MAX_DISPATCHES: u64 = 8192;
/// A step is submitted in parts as it is recorded, so that the GPU runs
/// the first layers while the host records the rest (recording costs the
/// host about as long per dispatch as the GPU spends on a small one): the
/// first part after this many dispatches, each later part twice the one
/// before (`KILN_WGPU_FIRST_SUBMIT` sets it; 0 submits each step whole).
const FIRST_SUBMIT: u64 = 8;

/// Most dispatches in one submitted part of a step
/// (`KILN_WGPU_SUBMIT_MAX` sets it).
const SUBMIT_MAX: u64 = u64::MAX;
/// Decode products over K-quant matrices of at least this many bytes
/// quantize their input row first (one more dispatch) and multiply by
/// integer dot products (product_dot.wgsl); smaller ones decode their
/// weights to floats (product_piece.wgsl), where the extra dispatch would
/// cost more than it saves. `KILN_WGPU_DOT_FROM` sets it.
const DOT_FROM: u64 = 4 << 20;
/// A decode step's gated unit is written by its own kernel (glu.wgsl)
/// before a down product of at least this many bytes that does not take
/// the integer-dot path (whose quant_x computes it once anyway); smaller
/// ones compute act(gate)·up as they read it, which saves a dispatch but
/// has every workgroup recompute every value (an exponential per weight
/// pair: on an H200 the 8B F16 decoded 149 tok/s so, 170 with the unit
/// apart; the 0.5B F16, 8.7 MB down products, 527–553 and 565–583; the
/// SmolLM2 shape, 0.55 MB, 614 fused and 569 apart).
/// `KILN_WGPU_GLU_APART_FROM` sets it.
const GLU_APART_FROM: u64 = 4 << 20;
/// Most rows one step may have (the workgroup grid's limit).
const MAX_ROWS: usize = 65535;
/// Attention splits a row's keys over several workgroups in steps of at
/// most this many rows (decode steps), when the step has fewer than
/// [`SPLIT_BELOW_GROUPS`] (row, head) workgroups without splits ...
const SPLIT_ROWS: usize = 32;
const SPLIT_BELOW_GROUPS: usize = 1024;
/// ... into at most this many splits of a multiple of 64 positions.
const MAX_SPLITS: usize = 16;

/// A vector of `f32` parameters on the device.
pub struct WgpuVector {
    buf: wgpu::Buffer,
    len: usize,
}

/// A rotary table on the device.
pub struct WgpuRope {
    cos: wgpu::Buffer,
    sin: wgpu::Buffer,
    rot_dim: usize,
    max_pos: usize,
    neox: bool,
}

/// An activation buffer: `f32` rows of `cols` values, room for the
/// backend's row limit.
pub struct WgpuBuffer {
    buf: wgpu::Buffer,
    cols: usize,
}

/// One step: its row counts (the metadata is in the backend's `meta`
/// buffer) and, when it samples on the device, where its draws start in
/// `meta` and which logit rows the host samples instead.
pub struct WgpuStep {
    n: usize,
    m: usize,
    draws: Option<u32>,
    host_rows: Vec<bool>,
}

/// Where each section of the step's metadata starts in `meta` (u32s).
#[derive(Debug, Clone, Copy)]
struct Meta {
    tokens: u32,
    positions: u32,
    slots: u32,
    row_seq: u32,
    logit_rows: u32,
    seq_table: u32,
    /// The window pool's slot of each row, and each sequence's first entry
    /// of its window table (after the block tables, from `tables` on; the
    /// block tables' entries where the KV memory has no window pool).
    wslots: u32,
    wseq_table: u32,
    tables: u32,
}

impl Meta {
    /// Words of the layout's fixed part for `t` rows.
    const fn words(t: usize) -> usize {
        8 * t
    }

    fn for_rows(t: usize) -> Self {
        let t = t as u32;
        Self {
            tokens: 0,
            positions: t,
            slots: 2 * t,
            row_seq: 3 * t,
            logit_rows: 4 * t,
            seq_table: 5 * t,
            wslots: 6 * t,
            wseq_table: 7 * t,
            tables: 8 * t,
        }
    }
}

/// kiln's portable GPU backend.
pub struct WgpuBackend {
    gpu: Gpu,
    k: Arc<Kernels>,
    max_rows: usize,
    meta_layout: Meta,
    meta: wgpu::Buffer,
    params: wgpu::Buffer,
    params_host: Vec<u8>,
    /// Bytes of `params_host` already written to `params` (earlier parts
    /// of the step).
    params_sent: usize,
    /// Dispatches of the step at which its next part is submitted, and
    /// that part's size (see [`FIRST_SUBMIT`]); `first_submit` 0: never.
    next_submit: u64,
    part: u64,
    first_submit: u64,
    /// See [`SUBMIT_MAX`].
    submit_max: u64,
    /// See [`WgpuOptions::stage_x`].
    stage_x: bool,
    /// See [`WgpuOptions::stage_glu`].
    stage_glu: bool,
    /// See [`WgpuOptions::fuse_combine`].
    fuse_combine: bool,
    /// A decode step's attention output whose key splits are not merged
    /// yet (see [`PendingCombine`]).
    pending_combine: Option<PendingCombine>,
    /// See [`DOT_FROM`].
    dot_from: u64,
    /// See [`GLU_APART_FROM`].
    glu_apart_from: u64,
    /// Steps of this many rows or more take 128-row product tiles
    /// ([`shaders::TILE128_FROM`]).
    tile128_from: usize,
    /// ... when their grid has at least this many workgroups
    /// ([`shaders::TILE128_GROUPS`]).
    tile128_groups: usize,
    /// Steps of at least this many rows take the tiled products
    /// ([`WgpuOptions::tiled_from`], more than [`FUSE_ROWS`]; `None`:
    /// [`shaders::TILED_FROM`], or [`shaders::coop_tiled_from`] with
    /// cooperative matrices).
    tiled_from: Option<usize>,
    /// A decode product's input row quantized for the integer-dot
    /// products (grown as needed).
    xq: WgpuBuffer,
    /// Where logits are read back through (grown as needed).
    staging: Option<wgpu::Buffer>,
    encoder: Option<wgpu::CommandEncoder>,
    /// The step's compute pass (ended before the encoder is finished).
    pass: Option<wgpu::ComputePass<'static>>,
    /// `KILN_WGPU_PROFILE`'s timestamps.
    profile: Option<Profiler>,
    /// Bind groups by kernel and buffers (emptied whenever a buffer they
    /// hold is replaced, so that none is kept alive).
    groups: BindCache,
    /// The step's batch (its tokens are checked on the host).
    batch: ForwardBatch,
    /// Normed rows (inputs of products), and a product's output before it
    /// is gated or normed, both grown as matrices arrive.
    h: WgpuBuffer,
    gu: WgpuBuffer,
    /// The last gated unit, when its output is left to the next product
    /// (`linear_add` reads `[gate | up]` itself; anything else writes it).
    pending_glu: Option<PendingGlu>,
    /// The buffer the step's last gated unit was written to (its rows
    /// enter a product as [`In::Wide`]).
    glu_out: Option<wgpu::Buffer>,
    /// Attention's per-split partial results (grown on first use).
    parts: WgpuBuffer,
    /// Most positions a row of the step attends to (its position + 1).
    step_keys: usize,
    dummy: wgpu::Buffer,
    /// Most logit rows one step may have (the logits buffer's rows).
    logit_rows: usize,
    /// Sample rows with draws on the device ([`WgpuOptions::host_sampling`]
    /// off).
    device_sampling: bool,
    /// Sampling's argmax candidates ([`shaders::SAMPLE_CHUNK`] logits
    /// each, two words) and picks (a token id per logit row), grown as
    /// needed.
    best_of: WgpuBuffer,
    picks: WgpuBuffer,
}

/// What a gated unit's output rows are scaled by in f16 prompt tiles
/// (product_coop.wgsl's `x_scale`; the sums are scaled back).
const WIDE_X_SCALE: f32 = 1.0 / 256.0;

/// What a product reads as its input rows.
#[derive(Clone, Copy)]
enum In<'a> {
    /// The rows as they are.
    Plain,
    /// The rows RMS-normed by these weights and epsilon.
    Normed(&'a WgpuVector, f32),
    /// A gated unit's `[gate | up]` rows: `act(gate) · up` (GELU's tanh
    /// form when `gelu`, else SiLU), staged in workgroup memory by a
    /// decode product where `staged` ([`WgpuBackend::stages_gated`]).
    Gated { gelu: bool, staged: bool },
    /// Attention's output row still in its key splits (the buffer bound
    /// is `parts`): merged on the way in (decode, staged forms only).
    Combined { heads: usize, head_dim: usize, nsplit: usize },
    /// The rows as they are, of a gated unit written apart: unnormed
    /// values that may pass f16's range (a model's largest activations
    /// enter the down product), so its prompt tiles stay f32, or enter
    /// cooperative ones scaled by [`WIDE_X_SCALE`].
    Wide,
}

/// A decode step's attention output left in its key splits (`parts`)
/// until a consumer reads it: the output product merges them on its way
/// in ([`shaders::STAGED_COMBINED`]); any other dispatch that binds the
/// output or `parts` has `attn_combine` write it first.
struct PendingCombine {
    out: wgpu::Buffer,
    heads: usize,
    head_dim: usize,
    nsplit: usize,
    n: usize,
}

/// A gated unit whose output rows are not written yet: the buffer they
/// stand for, whether the unit is GELU's, its width and the step's rows.
struct PendingGlu {
    out: wgpu::Buffer,
    gelu: bool,
    ff: usize,
    n: usize,
}

fn bad(what: String) -> BackendError {
    BackendError::Batch(what)
}

fn words(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

impl WgpuBackend {
    /// Opens adapter `opts.ordinal` and compiles the kernels.
    pub fn open(opts: &WgpuOptions, hints: &ModelHints) -> BResult<Self> {
        Ok(Self::open_inner(opts, hints)?)
    }

    fn open_inner(opts: &WgpuOptions, hints: &ModelHints) -> Result<Self> {
        if !hints.encoder && (hints.head_dim > MAX_HEAD_DIM || !hints.head_dim.is_multiple_of(8)) {
            return Err(WgpuError::Unsupported(format!(
                "attention heads of {} values (a multiple of 8, at most {MAX_HEAD_DIM})",
                hints.head_dim
            )));
        }
        if hints.encoder {
            return Err(WgpuError::Unsupported("encoder models".into()));
        }
        let max_rows = opts.max_batch_tokens.clamp(1, MAX_ROWS);
        let gpu = Gpu::open(opts)?;
        let coop = gpu.summary.coop_used;
        let k = Arc::new(Kernels::new(&gpu)?);
        let meta_layout = Meta::for_rows(max_rows);
        let meta = gpu.storage(4 * (Meta::words(max_rows) as u64 + 64), "step metadata")?;
        let params = gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("kernel parameters"),
            size: PARAM_STRIDE * MAX_DISPATCHES,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let h = WgpuBuffer { buf: gpu.storage(16, "normed rows")?, cols: 0 };
        let gu = WgpuBuffer { buf: gpu.storage(16, "product rows")?, cols: 0 };
        let parts = WgpuBuffer { buf: gpu.storage(16, "attention splits")?, cols: 0 };
        let xq = WgpuBuffer { buf: gpu.storage(16, "quantized product inputs")?, cols: 0 };
        let dummy = gpu.storage(16, "unused binding")?;
        let best_of = WgpuBuffer { buf: gpu.storage(16, "argmax candidates")?, cols: 0 };
        let picks = WgpuBuffer { buf: gpu.storage(16, "sampled tokens")?, cols: 0 };
        gpu.check()?;
        let profile = gpu.profiling.then(|| Profiler::new(&gpu));
        // Profiling times a step's dispatches in one pass.
        let first_submit = if gpu.profiling { 0 } else { opts.first_submit.unwrap_or(FIRST_SUBMIT) };
        Ok(Self {
            gpu,
            k,
            max_rows,
            meta_layout,
            meta,
            params,
            params_host: Vec::new(),
            params_sent: 0,
            next_submit: 0,
            part: 0,
            first_submit,
            submit_max: opts.submit_max.unwrap_or(SUBMIT_MAX),
            stage_x: opts.stage_x,
            stage_glu: opts.stage_glu,
            fuse_combine: opts.fuse_combine,
            pending_combine: None,
            dot_from: opts.dot_from.unwrap_or(DOT_FROM),
            glu_apart_from: opts.glu_apart_from.unwrap_or(GLU_APART_FROM),
            tile128_from: opts.tile128_from.unwrap_or(shaders::TILE128_FROM),
            tiled_from: opts.tiled_from.map(|t| t.max(FUSE_ROWS + 1)),
            tile128_groups: opts.tile128_groups.unwrap_or(if coop {
                shaders::COOP_TILE128_GROUPS
            } else {
                shaders::TILE128_GROUPS
            }),
            xq,
            staging: None,
            encoder: None,
            pass: None,
            profile,
            groups: BindCache::default(),
            batch: ForwardBatch::new(),
            h,
            gu,
            parts,
            pending_glu: None,
            glu_out: None,
            step_keys: 0,
            dummy,
            logit_rows: max_rows,
            device_sampling: !opts.host_sampling,
            best_of,
            picks,
        })
    }

    /// The adapter this backend runs on.
    pub fn adapter(&self) -> &AdapterSummary {
        &self.gpu.summary
    }

    /// Whether the backend implements `f` (asked without a device).
    pub fn supports_feature(f: Feature) -> bool {
        crate::supports_feature(f)
    }

    /// Grows a scratch buffer to `floats` values (forgetting the bind
    /// groups of the one it replaces).
    fn reserve(gpu: &Gpu, groups: &mut BindCache, b: &mut WgpuBuffer, floats: usize, what: &str) -> Result<()> {
        if floats > b.cols {
            b.buf = gpu.storage(4 * floats as u64, what)?;
            b.cols = floats;
            groups.clear();
        }
        Ok(())
    }

    /// Records one dispatch of kernel `k` with `params` (binding 0) and
    /// `buffers` (its storage bindings, in order).
    fn dispatch(
        &mut self,
        k: &Kernel,
        params: &[u32],
        buffers: &[&wgpu::Buffer],
        groups: (u32, u32, u32),
    ) -> Result<()> {
        // A pending gated unit reads `gu` and writes its output: it is
        // written first when this dispatch binds either.
        if let Some(p) = &self.pending_glu {
            if buffers.iter().any(|&b| *b == p.out || *b == self.gu.buf) {
                self.flush_glu()?;
            }
        }
        // Likewise a pending merge of attention's key splits.
        if let Some(p) = &self.pending_combine {
            if buffers.iter().any(|&b| *b == p.out || *b == self.parts.buf) {
                self.flush_combine()?;
            }
        }
        let offset = self.params_host.len() as u64;
        if offset / PARAM_STRIDE >= MAX_DISPATCHES {
            return Err(WgpuError::Unsupported(format!("a step of more than {MAX_DISPATCHES} kernel launches")));
        }
        let pass = self.pass.as_mut().ok_or_else(|| bad("an operation outside of Backend::run".into()))?;
        // Every kernel's parameters fit 16 words (64 bytes), bound whole.
        let mut block = words(params);
        debug_assert!(block.len() <= PARAM_BYTES as usize);
        block.resize(PARAM_STRIDE as usize, 0);
        self.params_host.extend_from_slice(&block);
        let (device, params_buf) = (&self.gpu.device, &self.params);
        let group = self.groups.get_or_make(k.id, buffers, MAX_BIND_GROUPS, || {
            let size = std::num::NonZeroU64::new(PARAM_BYTES);
            let mut entries = vec![wgpu::BindGroupEntry {
                binding: 0,
                resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding { buffer: params_buf, offset: 0, size }),
            }];
            for (&binding, b) in k.bindings.iter().zip(buffers) {
                entries.push(wgpu::BindGroupEntry { binding, resource: b.as_entire_binding() });
            }
            device.create_bind_group(&wgpu::BindGroupDescriptor { label: None, layout: &k.layout, entries: &entries })
        });
        if let Some(p) = self.profile.as_mut() {
            p.before(pass, &k.name);
        }
        pass.set_pipeline(&k.pipe);
        pass.set_bind_group(0, group, &[offset as u32]);
        pass.dispatch_workgroups(groups.0, groups.1, groups.2);
        let recorded = offset / PARAM_STRIDE + 1;
        if self.first_submit > 0 && recorded >= self.next_submit {
            self.submit(true);
            self.part = (self.part * 2).min(self.submit_max);
            self.next_submit = recorded + self.part;
        }
        Ok(())
    }

    /// Ends the step's pass and submits what it recorded so far (writing
    /// its kernels' parameters first); `reopen`: a new encoder and pass
    /// take the step's next dispatches.
    fn submit(&mut self, reopen: bool) {
        // The pass ends before its encoder is finished.
        self.pass = None;
        if let Some(enc) = self.encoder.take() {
            if self.params_host.len() > self.params_sent {
                let at = self.params_sent as u64;
                self.gpu.queue.write_buffer(&self.params, at, &self.params_host[self.params_sent..]);
                self.params_sent = self.params_host.len();
            }
            self.gpu.queue.submit([enc.finish()]);
        }
        if reopen {
            self.open_pass();
        }
    }

    /// A new encoder and compute pass for the step's next dispatches.
    fn open_pass(&mut self) {
        let mut enc = self.gpu.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("step") });
        let desc = wgpu::ComputePassDescriptor { label: Some("step"), timestamp_writes: None };
        self.pass = Some(enc.begin_compute_pass(&desc).forget_lifetime());
        self.encoder = Some(enc);
    }

    /// `y[t][y_off..] (+)= x'[t]·Wᵀ + bias` for `n` rows of `x`, where `x'`
    /// is what `input` says: `x`, its rows RMS-normed (`x·g / rms(x)`), or
    /// a gated unit of its `[gate | up]` rows, computed by the product on
    /// the way in.
    #[allow(clippy::too_many_arguments)]
    fn product(
        &mut self,
        w: &WgpuMatrix,
        x: &wgpu::Buffer,
        n: usize,
        y: &wgpu::Buffer,
        y_stride: usize,
        accumulate: bool,
        input: In<'_>,
    ) -> Result<()> {
        let (mode, gelu) = match input {
            In::Plain | In::Wide => (0, false),
            In::Normed(..) => (1, false),
            In::Gated { gelu, .. } => (2, gelu),
            In::Combined { .. } => (shaders::STAGED_COMBINED, false),
        };
        let flags = u32::from(w.bias.is_some()) | if accumulate { 2 } else { 0 } | if gelu { 16 } else { 0 };
        let x_stride = if matches!(input, In::Gated { .. }) { 2 * w.cols } else { w.cols };
        let ks = Arc::clone(&self.k);
        let bias = w.bias.as_ref().unwrap_or(&self.dummy).clone();
        let (g, eps) = match input {
            In::Normed(g, eps) => (g.buf.clone(), eps),
            _ => (self.dummy.clone(), 0.0),
        };
        // A decode step over a large K-quant matrix: its input row
        // quantized once for every chunk's integer-dot product.
        let dot = self.takes_dot(w, n);
        if dot {
            Self::reserve(
                &self.gpu,
                &mut self.groups,
                &mut self.xq,
                4 * shaders::xq_vec4s(w.cols),
                "quantized inputs",
            )?;
            let params = [0, w.cols as u32, 1, 0, x_stride as u32, 0, 0, flags, 0, eps.to_bits()];
            let blocks = (w.cols as u32).div_ceil(1024);
            let xq = self.xq.buf.clone();
            self.dispatch(&ks.quant_x[mode as usize], &params, &[&xq, x, &g], (blocks, 1, 1))?;
        }
        let (xq, dummy) = (self.xq.buf.clone(), self.dummy.clone());
        for c in &w.chunks {
            let rows = c.rows as u32;
            if let Some(k) = ks.dot(c.format).filter(|_| dot) {
                let params = [rows, w.cols as u32, 1, c.row_bytes as u32, 0, y_stride as u32, c.row0 as u32, flags];
                let wgs = rows.div_ceil(shaders::DOT_ROWS);
                self.dispatch(k, &params, &[&c.buf, &dummy, y, &bias, &xq], (wgs.min(65535), wgs.div_ceil(65535), 1))?;
                continue;
            }
            let tiled_from = match self.tiled_from {
                Some(t) => t,
                None if self.gpu.summary.coop_used => shaders::coop_tiled_from(c.format),
                None => shaders::TILED_FROM,
            };
            let tile = shaders::product_tile(n, c.rows, tiled_from, self.tile128_from, self.tile128_groups);
            // A gated unit's output enters f16 tiles only by cooperative
            // matrices, scaled by 2⁻⁸ (f16's range then reaches 1.7e7).
            let wide = matches!(input, In::Wide);
            let f16 = !wide || self.gpu.summary.coop_used;
            let staged = mode == 1 && tile == (1, 16) && self.stage_x && w.cols <= shaders::STAGE_COLS;
            let staged_gated = matches!(input, In::Gated { staged: true, .. }) && tile == (1, 16);
            let form = match (staged, staged_gated) {
                (true, _) => shaders::STAGED,
                (_, true) => shaders::STAGED_GATED,
                _ => mode,
            };
            let (heads, head_dim, nsplit) = match input {
                In::Combined { heads, head_dim, nsplit } => (heads as u32, head_dim as u32, nsplit as u32),
                _ => (0, 0, 0),
            };
            let k = ks.product(c.format, tile, form, f16).ok_or_else(|| {
                WgpuError::Unsupported(format!(
                    "a {} product of {n} rows in form {form} (not compiled)",
                    c.format.name()
                ))
            })?;
            let params = [
                rows,
                w.cols as u32,
                n as u32,
                c.row_bytes as u32,
                x_stride as u32,
                y_stride as u32,
                c.row0 as u32,
                flags,
                0,
                eps.to_bits(),
                if wide || staged_gated { WIDE_X_SCALE } else { 1.0f32 }.to_bits(),
                heads,
                head_dim,
                nsplit,
            ];
            let wgs = rows.div_ceil(tile.1);
            let groups = (wgs.min(65535), wgs.div_ceil(65535), (n as u32).div_ceil(tile.0));
            self.dispatch(k, &params, &[&c.buf, x, y, &bias, &g], groups)?;
        }
        Ok(())
    }

    /// Whether a decode product of `n` input rows over `w` that gates its
    /// input stages the unit in workgroup memory
    /// ([`shaders::STAGED_GATED`]): one row, a unit of at most
    /// [`shaders::STAGE_GATED_COLS`], formats read in units, room in the
    /// adapter's workgroup memory, and [`WgpuOptions::stage_glu`].
    fn stages_gated(&self, w: &WgpuMatrix, n: usize) -> bool {
        n == 1
            && self.stage_glu
            && w.cols <= shaders::STAGE_GATED_COLS
            && self.gpu.limits.max_compute_workgroup_storage_size >= shaders::STAGE_GATED_BYTES
            && w.chunks.iter().all(|c| shaders::stages(c.format, self.gpu.summary.subgroups_used))
    }

    /// Whether a product of `n` input rows over `w` takes the integer-dot
    /// path (see [`DOT_FROM`]).
    fn takes_dot(&self, w: &WgpuMatrix, n: usize) -> bool {
        n == 1 && w.bytes() as u64 >= self.dot_from && w.chunks.iter().any(|c| self.k.dot(c.format).is_some())
    }

    /// `out[i] (+)= rmsnorm(x[src_i]) ⊙ g` for `rows` rows (`gather`: the
    /// step's logit rows).
    #[allow(clippy::too_many_arguments)]
    fn norm(
        &mut self,
        x: &wgpu::Buffer,
        g: &WgpuVector,
        eps: f32,
        rows: usize,
        out: &wgpu::Buffer,
        gather: bool,
        accumulate: bool,
    ) -> Result<()> {
        let flags = u32::from(gather) | if accumulate { 2 } else { 0 };
        let params = [g.len as u32, eps.to_bits(), flags, self.meta_layout.logit_rows];
        let ks = Arc::clone(&self.k);
        let meta = self.meta.clone();
        self.dispatch(&ks.norm, &params, &[x, &g.buf, &meta, out], (rows as u32, 1, 1))
    }

    /// Writes the pending gated unit's output rows (`dispatch` calls it
    /// before a kernel that binds the unit's input or output, the fused
    /// down product having taken it; `run` at the end of a step).
    fn flush_glu(&mut self) -> Result<()> {
        let Some(p) = self.pending_glu.take() else { return Ok(()) };
        self.glu_out = Some(p.out.clone());
        let total = (p.n * p.ff) as u32;
        let groups = total.div_ceil(256);
        let params = [p.ff as u32, total, u32::from(p.gelu), 0];
        let ks = Arc::clone(&self.k);
        let gu = self.gu.buf.clone();
        self.dispatch(&ks.glu, &params, &[&gu, &p.out], (groups.min(65535), groups.div_ceil(65535), 1))
    }

    /// Merges the pending attention output's key splits into its buffer
    /// (`dispatch` calls it before a kernel that binds either; `run` at
    /// the end of a step).
    fn flush_combine(&mut self) -> Result<()> {
        let Some(p) = self.pending_combine.take() else { return Ok(()) };
        let params = [p.heads as u32, p.head_dim as u32, p.nsplit as u32, 0];
        let ks = Arc::clone(&self.k);
        let parts = self.parts.buf.clone();
        self.dispatch(&ks.attn_combine, &params, &[&parts, &p.out], (p.heads as u32, p.n as u32, 1))
    }

    /// Whether the decode product over `w` reading `a`, the pending
    /// attention output (one row: `attention` leaves no other pending),
    /// merges its key splits itself: every chunk in a format read in units
    /// (not by integer dots), a row of at most [`shaders::STAGE_COLS`].
    fn takes_combine(&self, a: &wgpu::Buffer, w: &WgpuMatrix, n: usize) -> bool {
        self.pending_combine.as_ref().is_some_and(|p| p.out == *a && p.n == n)
            && w.cols <= shaders::STAGE_COLS
            && !self.takes_dot(w, n)
            && w.chunks.iter().all(|c| shaders::stages(c.format, self.gpu.summary.subgroups_used))
    }

    /// Checks that `x`, its norm weight and the product `w` share a width.
    fn normed_input(&mut self, x: &WgpuBuffer, norm: &WgpuVector, w: &WgpuMatrix, what: &str) -> Result<()> {
        kiln_backend::check_width(x.cols, norm.len, what)?;
        kiln_backend::check_width(norm.len, w.cols, what)?;
        Ok(())
    }
}

impl Backend for WgpuBackend {
    type Matrix = WgpuMatrix;
    type Vector = WgpuVector;
    type Rope = WgpuRope;
    type Buffer = WgpuBuffer;
    type Kv = WgpuKv;
    type Step = WgpuStep;

    fn name(&self) -> String {
        format!("wgpu:{} ({}, {})", self.gpu.summary.index, self.gpu.summary.name, self.gpu.summary.backend)
    }
    fn samples_on_device(&self) -> bool {
        self.device_sampling
    }
    fn supports(&self, f: Feature) -> bool {
        crate::supports_feature(f)
    }

    fn matrix(&mut self, desc: MatrixDesc) -> BResult<WgpuMatrix> {
        let m = WgpuMatrix::new(&self.gpu, desc)?;
        for f in m.formats() {
            self.k.load_format(&self.gpu, f)?;
        }
        let t = self.max_rows;
        Self::reserve(&self.gpu, &mut self.groups, &mut self.h, t * m.cols, "normed rows")?;
        // Product rows kept apart: gate/up's (for the gated unit) and a
        // projection's before its post-norm. Not the head's (its rows go
        // to the logits, capped by the binding): a 262k vocabulary's 512
        // rows would be 512 MiB.
        if matches!(m.usage, kiln_backend::MatrixUse::Linear | kiln_backend::MatrixUse::GateUp) {
            Self::reserve(&self.gpu, &mut self.groups, &mut self.gu, t * m.rows, "product rows")?;
        }
        Ok(m)
    }
    fn matrix_bytes(&self, m: &WgpuMatrix) -> usize {
        m.bytes()
    }
    fn vector(&mut self, v: &[f32]) -> BResult<WgpuVector> {
        Ok(WgpuVector { buf: self.gpu.upload(&f32_bytes(v), "norm weights")?, len: v.len() })
    }
    fn rope(&mut self, d: &RopeDesc) -> BResult<WgpuRope> {
        if d.rot_dim == 0 || d.rot_dim % 2 == 1 || d.rot_dim > MAX_HEAD_DIM {
            return Err(WgpuError::Unsupported(format!("RoPE over {} dims", d.rot_dim)).into());
        }
        let table = kiln_kernels::ops::Rope::from_desc(d);
        let (cos, sin) = table.tables();
        Ok(WgpuRope {
            cos: self.gpu.upload(&f32_bytes(cos), "RoPE cos")?,
            sin: self.gpu.upload(&f32_bytes(sin), "RoPE sin")?,
            rot_dim: d.rot_dim,
            max_pos: table.max_pos(),
            neox: d.style == RopeStyle::Neox,
        })
    }
    fn buffer(&mut self, kind: BufferKind, cols: usize) -> BResult<WgpuBuffer> {
        let mut rows = self.max_rows;
        if kind == BufferKind::Logits {
            // As many logit rows as one binding holds, up to the step's rows.
            rows = rows.min((self.gpu.max_binding() / (4 * cols.max(1) as u64)) as usize);
            if rows == 0 {
                return Err(WgpuError::OutOfMemory(format!("a logits row of {cols} values exceeds one binding")).into());
            }
            self.logit_rows = self.logit_rows.min(rows);
        }
        let what = format!("{kind:?} activations");
        Ok(WgpuBuffer { buf: self.gpu.storage(4 * (rows * cols) as u64, &what)?, cols })
    }
    fn kv(&mut self, spec: &KvSpec) -> BResult<WgpuKv> {
        Ok(WgpuKv::new(&self.gpu, spec)?)
    }

    fn begin(&mut self, batch: &ForwardBatch, kv: &WgpuKv, draws: &[Option<Draw>]) -> BResult<WgpuStep> {
        if !self.device_sampling && draws.iter().any(Option::is_some) {
            return Err(bad("a device-sampled row: this backend samples on the host (KILN_WGPU_HOST_SAMPLING)".into()));
        }
        let n = batch.len();
        if n == 0 || n > self.max_rows {
            return Err(bad(format!("a step of {n} rows (this device was opened for 1 to {})", self.max_rows)));
        }
        if batch.positions.len() != n || batch.slots.len() != n {
            return Err(bad("positions or slots do not match the tokens".into()));
        }
        let m = batch.logit_rows().count();
        if m > self.logit_rows {
            return Err(bad(format!("{m} logit rows in one step (at most {})", self.logit_rows)));
        }
        if !draws.is_empty() && draws.len() != m {
            return Err(bad(format!("{} draws for {m} logit rows", draws.len())));
        }
        let cap = kv.num_blocks * kv.block_size;
        if let Some(&s) = batch.slots.iter().find(|&&s| s as usize >= cap) {
            return Err(bad(format!("KV slot {s} is outside the KV cache ({cap} slots)")));
        }
        let mut row_seq = vec![0u32; n];
        let (mut seq_table, mut tables) = (Vec::new(), Vec::new());
        for (i, s) in batch.seqs.iter().enumerate() {
            if s.start + s.len > n || s.block_table.len() * kv.block_size < s.pos0 + s.len {
                return Err(bad(format!("sequence {i}'s rows or block table do not fit the batch")));
            }
            if let Some(&b) = s.block_table.iter().find(|&&b| b as usize >= kv.num_blocks) {
                return Err(bad(format!("block {b} is outside the KV cache ({} blocks)", kv.num_blocks)));
            }
            if s.lora.is_some() {
                return Err(WgpuError::Unsupported("LoRA adapters".into()).into());
            }
            row_seq[s.start..s.start + s.len].iter_mut().for_each(|r| *r = i as u32);
            seq_table.push(tables.len() as u32);
            tables.extend_from_slice(&s.block_table);
        }
        // The window pool's tables follow the block tables (each block
        // checked against the pool's).
        kiln_backend::check_window_batch(batch, kv.window)?;
        let wseq_table: Vec<u32> = match kv.window {
            Some(_) => batch
                .seqs
                .iter()
                .map(|s| {
                    let at = tables.len() as u32;
                    tables.extend_from_slice(&s.window_table);
                    at
                })
                .collect(),
            None => seq_table.clone(),
        };
        let lay = self.meta_layout;
        let mut meta = vec![0u32; lay.tables as usize];
        let put = |meta: &mut Vec<u32>, at: u32, v: &[u32]| meta[at as usize..at as usize + v.len()].copy_from_slice(v);
        put(&mut meta, lay.tokens, &batch.tokens);
        put(&mut meta, lay.positions, &batch.positions);
        put(&mut meta, lay.slots, &batch.slots);
        put(&mut meta, lay.row_seq, &row_seq);
        let logit_rows: Vec<u32> = batch.logit_rows().map(|r| r as u32).collect();
        put(&mut meta, lay.logit_rows, &logit_rows);
        put(&mut meta, lay.seq_table, &seq_table);
        put(&mut meta, lay.wslots, &batch.window_slots);
        put(&mut meta, lay.wseq_table, &wseq_table);
        meta.extend_from_slice(&tables);
        // The draws follow (8 words a logit row), when any row has one.
        let mut draws_at = None;
        if draws.iter().any(Option::is_some) {
            draws_at = Some(meta.len() as u32);
            for d in draws {
                meta.extend(Draw::words(d.as_ref()));
            }
        }
        let bytes = 4 * meta.len() as u64;
        if bytes > self.meta.size() {
            self.meta = self.gpu.storage(bytes.next_power_of_two(), "step metadata")?;
            self.groups.clear();
        }
        self.gpu.write(&self.meta, 0, &words(&meta));
        self.batch.clone_from(batch);
        self.step_keys = batch.positions.iter().map(|&p| p as usize + 1).max().unwrap_or(0);
        let host_rows = draws.iter().map(Option::is_none).collect();
        Ok(WgpuStep { n, m, draws: draws_at, host_rows })
    }

    fn run(&mut self, _step: &WgpuStep, body: &mut dyn FnMut(&mut Self) -> BResult<()>) -> BResult<()> {
        let start = self.profile.as_ref().map(|_| std::time::Instant::now());
        self.params_host.clear();
        self.params_sent = 0;
        self.part = self.first_submit;
        self.next_submit = self.first_submit;
        self.open_pass();
        let mut r = body(self);
        if r.is_ok() {
            r = self.flush_glu().map_err(Into::into);
        }
        if r.is_ok() {
            r = self.flush_combine().map_err(Into::into);
        }
        self.pending_glu = None;
        self.pending_combine = None;
        if r.is_err() {
            // Nothing more of a failed step runs (parts already submitted
            // wrote only the step's own rows and K/V slots).
            self.pass = None;
            self.encoder = None;
            return r;
        }
        if let (Some(p), Some(pass)) = (self.profile.as_mut(), self.pass.as_mut()) {
            p.end_pass(pass);
        }
        if let (Some(p), Some(enc)) = (&self.profile, self.encoder.as_mut()) {
            self.pass = None;
            p.resolve(enc);
        }
        self.submit(false);
        if let (Some(p), Some(start)) = (self.profile.as_mut(), start) {
            p.host(start.elapsed().as_nanos() as f64, self.params_host.len() as u64 / PARAM_STRIDE);
            p.collect(&self.gpu)?;
        }
        Ok(self.gpu.check()?)
    }

    fn finish(
        &mut self,
        step: &WgpuStep,
        logits_buf: &mut WgpuBuffer,
        tokens: &mut Vec<u32>,
        logits: &mut Vec<f32>,
    ) -> BResult<()> {
        tokens.clear();
        let start = self.profile.as_ref().map(|_| std::time::Instant::now());
        let row_bytes = 4 * logits_buf.cols as u64;
        // What comes back: every logit row, or the sampled tokens and the
        // logit rows the host samples.
        let mut reads = Vec::new();
        if step.draws.is_some() {
            reads.push((&self.picks.buf, 0, 4 * step.m as u64));
        }
        let host: Vec<usize> = (0..step.m).filter(|&r| step.draws.is_none() || step.host_rows[r]).collect();
        reads.extend(host.iter().map(|&r| (&logits_buf.buf, r as u64 * row_bytes, row_bytes)));
        let bytes = reads.iter().map(|r| r.2).sum::<u64>();
        let staging = match &mut self.staging {
            Some(b) if b.size() >= bytes => b,
            kept => kept.insert(self.gpu.read_back_buffer(bytes)),
        };
        let vocab = logits_buf.cols;
        let sampled = step.draws.is_some();
        if host.is_empty() || host.len() == step.m {
            logits.clear();
        } else {
            // Rows sampled on the device have no logits here.
            logits.resize(step.m * vocab, 0.0);
        }
        self.gpu.read_into(&reads, staging, |b| {
            let word = |w: &[u8]| [w[0], w[1], w[2], w[3]];
            let mut at = 0;
            if sampled {
                tokens.extend(b[..4 * step.m].chunks_exact(4).map(|w| u32::from_le_bytes(word(w))));
                at = 4 * step.m;
            }
            if host.len() == step.m {
                logits.extend(b[at..].chunks_exact(4).map(|w| f32::from_le_bytes(word(w))));
                return;
            }
            for (&r, row) in host.iter().zip(b[at..].chunks_exact(4 * vocab)) {
                for (l, w) in logits[r * vocab..(r + 1) * vocab].iter_mut().zip(row.chunks_exact(4)) {
                    *l = f32::from_le_bytes(word(w));
                }
            }
        })?;
        if let (Some(p), Some(start)) = (self.profile.as_mut(), start) {
            p.read_back(start.elapsed().as_nanos() as f64);
        }
        Ok(())
    }

    fn embed(&mut self, step: &WgpuStep, table: &WgpuMatrix, scale: f32, x: &mut WgpuBuffer) -> BResult<()> {
        kiln_backend::check_width(x.cols, table.cols, "an embedding")?;
        if let Some(&t) = self.batch.tokens.iter().find(|&&t| t as usize >= table.rows) {
            return Err(bad(format!("token id {t} is outside the vocabulary ({} tokens)", table.rows)));
        }
        let ks = Arc::clone(&self.k);
        let meta = self.meta.clone();
        for c in &table.chunks {
            let k = ks
                .embed(c.format)
                .ok_or_else(|| bad(format!("{} embeddings before their kernels", c.format.name())))?;
            let params = [
                c.rows as u32,
                table.cols as u32,
                c.row_bytes as u32,
                c.row0 as u32,
                scale.to_bits(),
                self.meta_layout.tokens,
                0,
                0,
            ];
            self.dispatch(k, &params, &[&c.buf, &meta, &x.buf], (step.n as u32, 1, 1))?;
        }
        Ok(())
    }

    fn attn_in(
        &mut self,
        step: &WgpuStep,
        x: &mut WgpuBuffer,
        a: &AttnIn<'_, Self>,
        kv: &mut WgpuKv,
        layer: usize,
        qkv: &mut WgpuBuffer,
    ) -> BResult<()> {
        let s = a.shape;
        let total = s.q_dim() + 2 * s.kv_dim();
        self.normed_input(x, a.norm, a.qkv, "an attention input")?;
        kiln_backend::check_width(a.qkv.rows, total, "the Q/K/V heads")?;
        kiln_backend::check_width(qkv.cols, total, "a Q/K/V buffer")?;
        check_heads(&s, kv)?;
        if a.rope.rot_dim > s.head_dim {
            return Err(bad(format!("RoPE over {} of {} dims", a.rope.rot_dim, s.head_dim)));
        }
        let (kc, vc) = kv.layer(layer)?;
        if step.n <= FUSE_ROWS {
            self.product(a.qkv, &x.buf, step.n, &qkv.buf, total, false, In::Normed(a.norm, a.eps))?;
        } else {
            let h = self.h.buf.clone();
            self.norm(&x.buf, a.norm, a.eps, step.n, &h, false, false)?;
            self.product(a.qkv, &h, step.n, &qkv.buf, total, false, In::Plain)?;
        }
        let (qn, kn) = match a.qk_norm {
            Some((q, k)) => {
                kiln_backend::check_width(q.len, s.head_dim, "a Q norm")?;
                kiln_backend::check_width(k.len, s.head_dim, "a K norm")?;
                (q.buf.clone(), k.buf.clone())
            }
            None => (self.dummy.clone(), self.dummy.clone()),
        };
        let lay = self.meta_layout;
        let params = [
            s.num_heads as u32,
            s.num_kv_heads as u32,
            s.head_dim as u32,
            total as u32,
            kv.block_size as u32,
            a.rope.rot_dim as u32,
            u32::from(a.rope.neox),
            u32::from(a.qk_norm.is_some()),
            a.eps.to_bits(),
            a.rope.max_pos as u32,
            lay.positions,
            if kv.in_window(layer) { lay.wslots } else { lay.slots },
        ];
        let heads = (s.num_heads + 2 * s.num_kv_heads) as u32;
        let ks = Arc::clone(&self.k);
        let meta = self.meta.clone();
        let bufs = [&qkv.buf, &meta, &a.rope.cos, &a.rope.sin, &qn, &kn, &kc, &vc];
        Ok(self.dispatch(&ks.rope_kv, &params, &bufs, (heads, step.n as u32, 1))?)
    }

    fn attention(
        &mut self,
        step: &WgpuStep,
        qkv: &WgpuBuffer,
        kv: &WgpuKv,
        layer: usize,
        s: &AttnShape,
        out: &mut WgpuBuffer,
    ) -> BResult<()> {
        self.attend(step, qkv, kv, layer, s, 0, out)
    }

    fn attention_masked(
        &mut self,
        step: &WgpuStep,
        qkv: &WgpuBuffer,
        kv: &WgpuKv,
        layer: usize,
        s: &AttnShape,
        mask: &AttnMask<'_, Self>,
        out: &mut WgpuBuffer,
    ) -> BResult<()> {
        if mask.sinks.is_some() {
            return Err(WgpuError::Unsupported("attention sinks".into()).into());
        }
        match mask.window {
            Some(0) => Err(bad("a sliding window of 0 positions".into())),
            w => self.attend(step, qkv, kv, layer, s, w.unwrap_or(0), out),
        }
    }

    fn linear_add(
        &mut self,
        step: &WgpuStep,
        a: &WgpuBuffer,
        w: &WgpuMatrix,
        post_norm: Option<(&WgpuVector, f32)>,
        x: &mut WgpuBuffer,
    ) -> BResult<()> {
        kiln_backend::check_width(a.cols, w.cols, "a projection")?;
        kiln_backend::check_width(x.cols, w.rows, "a residual add")?;
        let staged = self.pending_glu.is_some() && self.stages_gated(w, step.n);
        let fused = match &self.pending_glu {
            Some(p) => {
                post_norm.is_none()
                    && p.out == a.buf
                    && p.ff == w.cols
                    && p.n == step.n
                    && (staged || self.takes_dot(w, step.n) || (w.bytes() as u64) < self.glu_apart_from)
            }
            None => false,
        };
        if fused {
            let gelu = self.pending_glu.take().is_some_and(|p| p.gelu);
            let gu = self.gu.buf.clone();
            return Ok(self.product(w, &gu, step.n, &x.buf, w.rows, true, In::Gated { gelu, staged })?);
        }
        // The input: attention's output still in its key splits (read from
        // `parts`, merged on the way in), a gated unit's, or rows as they are.
        let merge = self.takes_combine(&a.buf, w, step.n);
        let (src, input) = match self.pending_combine.take_if(|_| merge) {
            Some(p) => {
                (self.parts.buf.clone(), In::Combined { heads: p.heads, head_dim: p.head_dim, nsplit: p.nsplit })
            }
            None if self.glu_out.as_ref() == Some(&a.buf) => (a.buf.clone(), In::Wide),
            None => (a.buf.clone(), In::Plain),
        };
        match post_norm {
            None => self.product(w, &src, step.n, &x.buf, w.rows, true, input)?,
            Some((g, eps)) => {
                kiln_backend::check_width(g.len, w.rows, "a post-norm")?;
                let gu = self.gu.buf.clone();
                self.product(w, &src, step.n, &gu, w.rows, false, input)?;
                self.norm(&gu, g, eps, step.n, &x.buf, false, true)?;
            }
        }
        Ok(())
    }

    fn norm_glu(
        &mut self,
        step: &WgpuStep,
        x: &mut WgpuBuffer,
        norm: &WgpuVector,
        eps: f32,
        gate_up: &WgpuMatrix,
        act: Glu,
        out: &mut WgpuBuffer,
    ) -> BResult<()> {
        self.normed_input(x, norm, gate_up, "a gated unit")?;
        if gate_up.part_rows.len() != 2 {
            return Err(bad("a gated unit needs a [gate; up] matrix".into()));
        }
        let ff = gate_up.part_rows[0];
        kiln_backend::check_width(out.cols, ff, "a gated unit's output")?;
        let gu = self.gu.buf.clone();
        if step.n > FUSE_ROWS {
            let h = self.h.buf.clone();
            self.norm(&x.buf, norm, eps, step.n, &h, false, false)?;
            self.product(gate_up, &h, step.n, &gu, 2 * ff, false, In::Plain)?;
        } else {
            self.product(gate_up, &x.buf, step.n, &gu, 2 * ff, false, In::Normed(norm, eps))?;
        }
        // The unit itself is left to the down product (`linear_add`) in a
        // step of few rows, else written now.
        self.pending_glu = Some(PendingGlu { out: out.buf.clone(), gelu: act == Glu::GeluTanh, ff, n: step.n });
        if step.n > FUSE_ROWS {
            self.flush_glu()?;
        }
        Ok(())
    }

    fn head(
        &mut self,
        step: &WgpuStep,
        x: &mut WgpuBuffer,
        norm: &WgpuVector,
        eps: f32,
        w: &WgpuMatrix,
        logits: &mut WgpuBuffer,
    ) -> BResult<()> {
        self.normed_input(x, norm, w, "the output head")?;
        kiln_backend::check_width(logits.cols, w.rows, "a logits buffer")?;
        if step.m == 0 {
            return Ok(());
        }
        let h = self.h.buf.clone();
        self.norm(&x.buf, norm, eps, step.m, &h, true, false)?;
        self.product(w, &h, step.m, &logits.buf, w.rows, false, In::Plain)?;
        if let Some(at) = step.draws {
            self.sample(step.m, at, logits)?;
        }
        Ok(())
    }
}

impl WgpuBackend {
    /// Samples the step's `m` logit rows into `picks` by their draws (at
    /// word `draws` of the metadata): argmax candidates of 4096 logits
    /// each (sample_max.wgsl), then one workgroup a row (sample.wgsl).
    fn sample(&mut self, m: usize, draws: u32, logits: &WgpuBuffer) -> Result<()> {
        let vocab = logits.cols;
        let chunks = vocab.div_ceil(shaders::SAMPLE_CHUNK);
        let (v, c) = (u32::try_from(vocab).map_err(|_| bad(format!("a vocabulary of {vocab} tokens")))?, chunks as u32);
        Self::reserve(&self.gpu, &mut self.groups, &mut self.best_of, 2 * m * chunks, "argmax candidates")?;
        Self::reserve(&self.gpu, &mut self.groups, &mut self.picks, m, "sampled tokens")?;
        let ks = Arc::clone(&self.k);
        let (best_of, picks, meta) = (self.best_of.buf.clone(), self.picks.buf.clone(), self.meta.clone());
        self.dispatch(&ks.sample_max, &[v, c, draws, 0], &[&logits.buf, &best_of], (c, m as u32, 1))?;
        self.dispatch(&ks.sample, &[v, c, draws, 0], &[&logits.buf, &best_of, &meta, &picks], (m as u32, 1, 1))
    }

    /// Causal attention of the step's rows over layer `layer`'s cache, the
    /// last `window` positions of it (0: all), reading a window layer's
    /// pool through the step's window tables where the memory has one.
    #[allow(clippy::too_many_arguments)]
    fn attend(
        &mut self,
        step: &WgpuStep,
        qkv: &WgpuBuffer,
        kv: &WgpuKv,
        layer: usize,
        s: &AttnShape,
        window: usize,
        out: &mut WgpuBuffer,
    ) -> BResult<()> {
        check_heads(s, kv)?;
        let total = s.q_dim() + 2 * s.kv_dim();
        kiln_backend::check_width(qkv.cols, total, "a Q/K/V buffer")?;
        kiln_backend::check_width(out.cols, s.q_dim(), "an attention output")?;
        let (kc, vc) = kv.layer(layer)?;
        // Every row attends over its own positions with the same kernel, so
        // rows whose logits are all sampled (speculative verification)
        // compute exactly as the decode steps they stand for.
        let lay = self.meta_layout;
        // Splits of the keys for steps of few rows (decode).
        let keys = if window > 0 { self.step_keys.min(window) } else { self.step_keys };
        let mut nsplit = 1;
        if step.n <= SPLIT_ROWS && step.n * s.num_heads < SPLIT_BELOW_GROUPS {
            nsplit = keys.div_ceil(64).clamp(1, MAX_SPLITS);
        }
        let split = keys.div_ceil(nsplit).div_ceil(64) * 64;
        let nsplit = if nsplit > 1 { keys.div_ceil(split) } else { 1 };
        if nsplit > 1 {
            let floats = SPLIT_ROWS * s.num_heads * MAX_SPLITS * (s.head_dim + 4);
            Self::reserve(&self.gpu, &mut self.groups, &mut self.parts, floats, "attention splits")?;
        }
        let params = [
            s.num_heads as u32,
            s.num_kv_heads as u32,
            s.head_dim as u32,
            total as u32,
            kv.block_size as u32,
            s.scale.to_bits(),
            lay.positions,
            lay.row_seq,
            if kv.in_window(layer) { lay.wseq_table } else { lay.seq_table },
            lay.tables,
            u32::try_from(window).map_err(|_| bad(format!("a sliding window of {window} positions")))?,
            if nsplit > 1 { split as u32 } else { 0 },
            nsplit as u32,
        ];
        let ks = Arc::clone(&self.k);
        let meta = self.meta.clone();
        let parts = self.parts.buf.clone();
        let grid = (s.num_heads as u32, step.n as u32, nsplit as u32);
        self.dispatch(&ks.attention, &params, &[&qkv.buf, &meta, &kc, &vc, &out.buf, &parts], grid)?;
        if nsplit > 1 {
            let pending =
                PendingCombine { out: out.buf.clone(), heads: s.num_heads, head_dim: s.head_dim, nsplit, n: step.n };
            // The output product may merge the splits as it reads them
            // (`linear_add`); any other reader has them merged first.
            self.pending_combine = Some(pending);
            if !(self.fuse_combine && step.n == 1 && s.num_heads * nsplit <= shaders::COMBINE_SPLITS) {
                self.flush_combine()?;
            }
        }
        Ok(())
    }
}

impl Drop for WgpuBackend {
    fn drop(&mut self) {
        if let Some(p) = &self.profile {
            eprint!("{}", p.report());
        }
    }
}

fn check_heads(s: &AttnShape, kv: &WgpuKv) -> Result<()> {
    if s.head_dim != kv.head_dim || s.num_kv_heads != kv.kv_heads {
        return Err(bad(format!(
            "attention of {} KV heads of {} values over a cache of {} heads of {}",
            s.num_kv_heads, s.head_dim, kv.kv_heads, kv.head_dim
        ))
        .into());
    }
    // (Nonzero: the kernels divide by both; see `kernels::runtime_checks`.)
    if s.num_kv_heads == 0 || s.num_heads == 0 || !s.num_heads.is_multiple_of(s.num_kv_heads) {
        return Err(bad(format!("{} query heads over {} KV heads", s.num_heads, s.num_kv_heads)).into());
    }
    Ok(())
}
