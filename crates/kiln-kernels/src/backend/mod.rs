//! kiln's CPU as a [`kiln_backend::Backend`]: the SIMD kernels of this
//! crate on a persistent thread pool, weights read in place from the
//! memory-mapped file (or repacked for the integer kernels), the KV cache in
//! host memory ([`CpuKv`]).
//!
//! Activations are `f32` rows that grow with the step (no row limit). The
//! residual add of a projection ([`Backend::linear_add`]) is kept pending in
//! the residual buffer and fused into the next norm that reads it, as one
//! pass.

mod kv;
mod lora;
mod matrix;
mod moe;
#[cfg(test)]
mod tests;

pub use kv::CpuKv;
pub use matrix::CpuMatrix;

use kiln_backend::{
    Act, AttnIn, AttnShape, Backend, BackendError, BufferKind, Draw, Feature, ForwardBatch, Glu, KvMemory, KvSpec,
    LayerNorm, LogitsWant, LoraFactors, MatrixDesc, Moe, Result, RopeDesc,
};

use crate::ops::{self, AttnSeq, Rope};
use std::sync::Arc;

use crate::ThreadPool;

/// How the CPU backend runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuOptions {
    /// Repack weights for the integer kernels where that helps (default).
    /// Off, every format is computed from the file's bytes: the K-quants
    /// then in f32 instead of with 8-bit inputs (slower; for reference runs).
    pub pack: bool,
}

impl Default for CpuOptions {
    fn default() -> Self {
        Self { pack: true }
    }
}

/// An activation buffer: `f32` rows of `cols` values that grow with the
/// step. The residual stream may hold a pending addend (a projection's
/// output not yet added).
#[derive(Debug)]
pub struct CpuBuffer {
    kind: BufferKind,
    cols: usize,
    data: Vec<f32>,
    pending: Vec<f32>,
    pending_len: usize,
    has_pending: bool,
}

impl CpuBuffer {
    fn new(kind: BufferKind, cols: usize) -> Self {
        Self { kind, cols, data: Vec::new(), pending: Vec::new(), pending_len: 0, has_pending: false }
    }

    /// What it holds.
    pub fn kind(&self) -> BufferKind {
        self.kind
    }
    /// Values per row.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Checks that a product of `cols` inputs may read this buffer.
    fn input_of(&self, cols: usize, what: &str) -> Result<()> {
        kiln_backend::check_width(self.cols, cols, what)
    }

    fn settle(&mut self) {
        if self.has_pending {
            let n = self.pending_len.min(self.data.len());
            ops::add_inplace(&mut self.data[..n], &self.pending[..n]);
            self.has_pending = false;
        }
    }
}

fn grow(v: &mut Vec<f32>, n: usize) -> &mut [f32] {
    if v.len() < n {
        v.resize(n, 0.0);
    }
    &mut v[..n]
}

/// The rows of a step on the CPU.
#[derive(Debug, Clone, Copy)]
pub struct CpuStep {
    n: usize,
    m: usize,
}

/// The CPU backend.
pub struct CpuBackend {
    /// Shared by the backends of one engine (a draft model's runs on its
    /// target's threads: the two never step at once).
    pool: Arc<ThreadPool>,
    opts: CpuOptions,
    /// The step's batch (kept so that the operations see its positions,
    /// slots and block tables; its allocations are reused).
    batch: ForwardBatch,
    h: Vec<f32>,
    up: Vec<f32>,
    last: Vec<f32>,
    moe: moe::MoeScratch,
    /// LoRA adapters of the matrices, and the step's rows per adapter.
    lora: lora::CpuLora,
}

impl CpuBackend {
    /// A backend on `pool`.
    pub fn new(pool: ThreadPool, opts: CpuOptions) -> Self {
        Self::on(Arc::new(pool), opts)
    }
    /// A second backend on this one's threads (a draft model beside its
    /// target: one engine thread steps both, one at a time, so one pool
    /// serves them and no second set of threads spins beside the first).
    pub fn sharing_threads(&self, opts: CpuOptions) -> Self {
        Self::on(Arc::clone(&self.pool), opts)
    }
    fn on(pool: Arc<ThreadPool>, opts: CpuOptions) -> Self {
        Self {
            pool,
            opts,
            batch: ForwardBatch::new(),
            h: Vec::new(),
            up: Vec::new(),
            last: Vec::new(),
            moe: Default::default(),
            lora: lora::CpuLora::default(),
        }
    }
    /// The kernel thread pool.
    pub fn pool(&self) -> &ThreadPool {
        &self.pool
    }

    /// `h = rmsnorm(x) ⊙ w` over the step's rows, adding a pending addend
    /// to `x` in the same pass.
    fn norm_into(pool: &ThreadPool, x: &mut CpuBuffer, w: &[f32], eps: f32, n: usize, h: &mut Vec<f32>) -> usize {
        let d = w.len();
        let h = grow(h, n * d);
        if x.has_pending {
            ops::add_rms_norm(pool, &mut x.data[..n * d], &x.pending[..n * d], w, eps, h);
            x.has_pending = false;
        } else {
            ops::rms_norm(pool, &x.data[..n * d], w, eps, h);
        }
        d
    }
}

fn shape_err(what: String) -> BackendError {
    BackendError::Batch(what)
}

impl Backend for CpuBackend {
    type Matrix = CpuMatrix;
    type Vector = Vec<f32>;
    type Rope = Rope;
    type Buffer = CpuBuffer;
    type Kv = CpuKv;
    type Step = CpuStep;

    fn name(&self) -> String {
        "cpu".into()
    }
    fn samples_on_device(&self) -> bool {
        false
    }
    fn enter_engine_thread(&self) {
        self.pool.pin_caller();
    }
    fn supports(&self, f: Feature) -> bool {
        match f {
            Feature::EmbedScale
            | Feature::PostNorm
            | Feature::GeluTanh
            | Feature::Encoder
            | Feature::Moe
            | Feature::Lora
            | Feature::KvShift
            | Feature::SlidingWindow
            | Feature::AttentionSinks
            | Feature::SwigluOai
            | Feature::ExpertBias => true,
        }
    }

    fn matrix(&mut self, desc: MatrixDesc) -> Result<CpuMatrix> {
        let mut m = CpuMatrix::new(desc, self.opts.pack)?;
        m.lora_key = self.lora.next_key();
        Ok(m)
    }
    fn matrix_bytes(&self, m: &CpuMatrix) -> usize {
        m.n_bytes()
    }
    fn vector(&mut self, v: &[f32]) -> Result<Vec<f32>> {
        Ok(v.to_vec())
    }
    fn rope(&mut self, d: &RopeDesc) -> Result<Rope> {
        if d.rot_dim == 0 || !d.rot_dim.is_multiple_of(2) {
            return Err(BackendError::Unsupported { device: "cpu", what: format!("RoPE over {} dims", d.rot_dim) });
        }
        Ok(Rope::from_desc(d))
    }
    fn buffer(&mut self, kind: BufferKind, cols: usize) -> Result<CpuBuffer> {
        Ok(CpuBuffer::new(kind, cols))
    }
    fn kv(&mut self, spec: &KvSpec) -> Result<CpuKv> {
        CpuKv::new(spec)
    }
    fn kv_shift(&mut self, kv: &mut CpuKv, layer: usize, rope: &Rope, copies: &[kiln_backend::KvShift]) -> Result<()> {
        if kv.in_window(layer) && !copies.is_empty() {
            return Err(shape_err(format!("KV copies in layer {layer}, which keeps only its window")));
        }
        let layout = kv.layout();
        let (kc, vc) = kv.layer_mut(layer).ok_or_else(|| shape_err(format!("the KV cache has no layer {layer}")))?;
        ops::shift_kv(&self.pool, layout, rope, kc, vc, copies).ok_or_else(|| BackendError::Unsupported {
            device: "cpu",
            what: format!(
                "re-rotated KV copies in a {:?} cache, or a slot outside it (segments need a 16-bit K/V cache)",
                layout.format
            ),
        })
    }

    fn begin(&mut self, batch: &ForwardBatch, kv: &CpuKv, _draws: &[Option<Draw>]) -> Result<CpuStep> {
        if let Some(&b) = batch.seqs.iter().flat_map(|s| s.block_table.iter()).find(|&&b| b as usize >= kv.num_blocks())
        {
            return Err(shape_err(format!("block {b} is outside the KV cache ({} blocks)", kv.num_blocks())));
        }
        kiln_backend::check_window_batch(batch, kv.window())?;
        self.lora.begin(batch)?;
        self.batch.clone_from(batch);
        Ok(CpuStep { n: batch.len(), m: batch.logit_rows().count() })
    }
    fn run(&mut self, _step: &CpuStep, body: &mut dyn FnMut(&mut Self) -> Result<()>) -> Result<()> {
        body(self)
    }
    fn finish(
        &mut self,
        _step: &CpuStep,
        logits_buf: &mut CpuBuffer,
        tokens: &mut Vec<u32>,
        logits: &mut Vec<f32>,
    ) -> Result<()> {
        tokens.clear();
        std::mem::swap(logits, &mut logits_buf.data);
        Ok(())
    }

    fn embed(&mut self, step: &CpuStep, table: &CpuMatrix, scale: f32, x: &mut CpuBuffer) -> Result<()> {
        let d = table.lookup_cols();
        x.input_of(d, "an embedding")?;
        let rows = grow(&mut x.data, step.n * d);
        x.has_pending = false;
        for (t, &tok) in self.batch.tokens.iter().enumerate() {
            let row = &mut rows[t * d..(t + 1) * d];
            table.lookup(tok as usize, row)?;
            if scale != 1.0 {
                row.iter_mut().for_each(|v| *v *= scale);
            }
        }
        Ok(())
    }

    fn attn_in(
        &mut self,
        step: &CpuStep,
        x: &mut CpuBuffer,
        a: &AttnIn<'_, Self>,
        kv: &mut CpuKv,
        layer: usize,
        qkv: &mut CpuBuffer,
    ) -> Result<()> {
        let n = step.n;
        let s = a.shape;
        let (q_dim, kv_dim) = (s.q_dim(), s.kv_dim());
        Self::norm_into(&self.pool, x, a.norm, a.eps, n, &mut self.h);
        let d = a.norm.len();
        // Q, K and V as three planes: [n × q_dim][n × kv_dim][n × kv_dim].
        let all = grow(&mut qkv.data, n * (q_dim + 2 * kv_dim));
        let (q, rest) = all.split_at_mut(n * q_dim);
        let (k, v) = rest.split_at_mut(n * kv_dim);
        self.lora.product(&self.pool, a.qkv, &self.h[..n * d], n, &mut [&mut *q, &mut *k, &mut *v])?;
        if let Some((qn, kn)) = a.qk_norm {
            ops::rms_norm_inplace(&self.pool, q, qn, a.eps);
            ops::rms_norm_inplace(&self.pool, k, kn, a.eps);
        }
        a.rope.apply(&self.pool, q, &self.batch.positions, s.num_heads, s.head_dim);
        a.rope.apply(&self.pool, k, &self.batch.positions, s.num_kv_heads, s.head_dim);
        let layout = kv.layout();
        let slots = if kv.in_window(layer) { &self.batch.window_slots } else { &self.batch.slots };
        let (kc, vc) = kv.layer_mut(layer).ok_or_else(|| shape_err(format!("the KV cache has no layer {layer}")))?;
        ops::write_kv(&self.pool, layout, kc, vc, slots, k, v);
        Ok(())
    }

    fn attention(
        &mut self,
        step: &CpuStep,
        qkv: &CpuBuffer,
        kv: &CpuKv,
        layer: usize,
        s: &AttnShape,
        out: &mut CpuBuffer,
    ) -> Result<()> {
        self.attend(step, qkv, kv, layer, s, ops::AttnMask::default(), out)
    }

    fn attention_masked(
        &mut self,
        step: &CpuStep,
        qkv: &CpuBuffer,
        kv: &CpuKv,
        layer: usize,
        s: &AttnShape,
        mask: &kiln_backend::AttnMask<'_, Self>,
        out: &mut CpuBuffer,
    ) -> Result<()> {
        if mask.window == Some(0) {
            return Err(shape_err("a sliding window of 0 positions".into()));
        }
        let m = ops::AttnMask { window: mask.window.unwrap_or(0), sinks: mask.sinks.map(Vec::as_slice) };
        self.attend(step, qkv, kv, layer, s, m, out)
    }

    fn linear_add(
        &mut self,
        step: &CpuStep,
        a: &CpuBuffer,
        w: &CpuMatrix,
        post_norm: Option<(&Vec<f32>, f32)>,
        x: &mut CpuBuffer,
    ) -> Result<()> {
        let n = step.n;
        let rows = w.part_rows(0);
        a.input_of(w.cols(), "a projection")?;
        x.input_of(rows, "a residual add")?;
        x.settle();
        let y = grow(&mut x.pending, n * rows);
        let input = a.data.get(..n * w.cols()).ok_or_else(|| shape_err("a product's input is short".into()))?;
        self.lora.product(&self.pool, w, input, n, &mut [&mut *y])?;
        if let Some((g, eps)) = post_norm {
            ops::rms_norm_inplace(&self.pool, y, g, eps);
        }
        x.pending_len = n * rows;
        x.has_pending = true;
        Ok(())
    }

    fn norm_glu(
        &mut self,
        step: &CpuStep,
        x: &mut CpuBuffer,
        norm: &Vec<f32>,
        eps: f32,
        gate_up: &CpuMatrix,
        act: Glu,
        out: &mut CpuBuffer,
    ) -> Result<()> {
        let n = step.n;
        let d = Self::norm_into(&self.pool, x, norm, eps, n, &mut self.h);
        let ff = gate_up.part_rows(0);
        let gate = grow(&mut out.data, n * ff);
        let up = grow(&mut self.up, n * ff);
        self.lora.product(&self.pool, gate_up, &self.h[..n * d], n, &mut [&mut *gate, &mut *up])?;
        glu(&self.pool, act, gate, up, n);
        Ok(())
    }

    fn head(
        &mut self,
        step: &CpuStep,
        x: &mut CpuBuffer,
        norm: &Vec<f32>,
        eps: f32,
        w: &CpuMatrix,
        logits: &mut CpuBuffer,
    ) -> Result<()> {
        let d = norm.len();
        x.settle();
        let last = grow(&mut self.last, step.m * d);
        for (i, r) in self.batch.logit_rows().enumerate() {
            ops::rms_norm(&self.pool, &x.data[r * d..(r + 1) * d], norm, eps, &mut last[i * d..(i + 1) * d]);
        }
        let vocab = w.part_rows(0);
        logits.data.resize(step.m * vocab, 0.0);
        if step.m > 0 {
            w.forward(&self.pool, last, step.m, &mut [&mut logits.data[..]])?;
        }
        Ok(())
    }

    fn moe(&mut self, step: &CpuStep, x: &mut CpuBuffer, m: &Moe<'_, Self>) -> Result<()> {
        self.moe_block(step, x, m)
    }
    fn lora_attach(&mut self, m: &CpuMatrix, adapter: u32, parts: &[Option<&LoraFactors>]) -> Result<()> {
        self.lora.attach(m.lora_key, &m.part_shapes(), adapter, parts)
    }
    fn lora_detach(&mut self, adapter: u32) -> Result<()> {
        self.lora.detach(adapter);
        Ok(())
    }
    fn lora_bytes(&self, adapter: u32) -> usize {
        self.lora.bytes(adapter)
    }

    fn begin_encoder(&mut self, batch: &ForwardBatch) -> Result<CpuStep> {
        self.lora.begin(batch)?;
        self.batch.clone_from(batch);
        Ok(CpuStep { n: batch.len(), m: 0 })
    }

    fn embed_sum(
        &mut self,
        step: &CpuStep,
        table: &CpuMatrix,
        positions: &CpuMatrix,
        norm: LayerNorm<'_, Vec<f32>>,
        x: &mut CpuBuffer,
    ) -> Result<()> {
        let d = table.lookup_cols();
        x.input_of(d, "an embedding")?;
        kiln_backend::check_width(positions.lookup_cols(), d, "a position table")?;
        let rows = grow(&mut x.data, step.n * d);
        x.has_pending = false;
        let pos_row = grow(&mut self.last, d);
        for (t, (&tok, &p)) in self.batch.tokens.iter().zip(&self.batch.positions).enumerate() {
            let row = &mut rows[t * d..(t + 1) * d];
            table.lookup(tok as usize, row)?;
            positions.lookup(p as usize, pos_row)?;
            ops::add_inplace(row, pos_row);
        }
        ops::add_layer_norm(&self.pool, rows, &[], norm.weight, norm.bias, norm.eps);
        Ok(())
    }

    fn linear(&mut self, step: &CpuStep, a: &CpuBuffer, w: &CpuMatrix, act: Act, out: &mut CpuBuffer) -> Result<()> {
        let n = step.n;
        a.input_of(w.cols(), "a projection")?;
        let input = a.data.get(..n * w.cols()).ok_or_else(|| shape_err("a product's input is short".into()))?;
        if act == Act::Swiglu {
            if w.n_parts() != 2 {
                return Err(shape_err("SwiGLU needs a gate/up matrix".into()));
            }
            let ff = w.part_rows(0);
            let gate = grow(&mut out.data, n * ff);
            let up = grow(&mut self.up, n * ff);
            w.forward(&self.pool, input, n, &mut [&mut *gate, &mut *up])?;
            ops::silu_mul(&self.pool, gate, up, n);
            return Ok(());
        }
        // One plane of `n × rows` per part (Q, K and V for attention).
        let total: usize = (0..w.n_parts()).map(|i| w.part_rows(i)).sum();
        let mut rest = grow(&mut out.data, n * total);
        let mut planes = Vec::with_capacity(w.n_parts());
        for i in 0..w.n_parts() {
            let (p, r) = rest.split_at_mut(n * w.part_rows(i));
            planes.push(p);
            rest = r;
        }
        w.forward(&self.pool, input, n, &mut planes)?;
        let y = &mut out.data[..n * total];
        match act {
            Act::None | Act::Swiglu => {}
            Act::GeluErf => ops::gelu_erf(&self.pool, y, n),
            Act::GeluTanh => ops::gelu_tanh(&self.pool, y, n),
        }
        Ok(())
    }

    fn attention_within(
        &mut self,
        step: &CpuStep,
        qkv: &mut CpuBuffer,
        rope: Option<&Rope>,
        s: &AttnShape,
        out: &mut CpuBuffer,
    ) -> Result<()> {
        let n = step.n;
        let (q_dim, kv_dim) = (s.q_dim(), s.kv_dim());
        let all = qkv
            .data
            .get_mut(..n * (q_dim + 2 * kv_dim))
            .ok_or_else(|| shape_err("attention before its Q/K/V product".into()))?;
        let (q, rest) = all.split_at_mut(n * q_dim);
        let (k, v) = rest.split_at_mut(n * kv_dim);
        if let Some(rope) = rope {
            rope.apply(&self.pool, q, &self.batch.positions, s.num_heads, s.head_dim);
            rope.apply(&self.pool, k, &self.batch.positions, s.num_kv_heads, s.head_dim);
        }
        let seqs: Vec<_> = self.batch.seqs.iter().map(|sp| sp.start..sp.start + sp.len).collect();
        let shape = ops::WithinShape {
            num_heads: s.num_heads,
            num_kv_heads: s.num_kv_heads,
            head_dim: s.head_dim,
            scale: s.scale,
        };
        let o = grow(&mut out.data, n * q_dim);
        ops::attention_within(&self.pool, q, k, v, &seqs, shape, o);
        Ok(())
    }

    fn linear_add_norm(
        &mut self,
        step: &CpuStep,
        a: &CpuBuffer,
        w: &CpuMatrix,
        norm: LayerNorm<'_, Vec<f32>>,
        x: &mut CpuBuffer,
    ) -> Result<()> {
        let n = step.n;
        let rows = w.part_rows(0);
        a.input_of(w.cols(), "a projection")?;
        x.input_of(rows, "a residual add")?;
        x.settle();
        let input = a.data.get(..n * w.cols()).ok_or_else(|| shape_err("a product's input is short".into()))?;
        let y = grow(&mut x.pending, n * rows);
        w.forward(&self.pool, input, n, &mut [&mut *y])?;
        ops::add_layer_norm(&self.pool, &mut x.data[..n * rows], y, norm.weight, norm.bias, norm.eps);
        Ok(())
    }

    fn read_rows(&mut self, step: &CpuStep, x: &mut CpuBuffer, out: &mut Vec<f32>) -> Result<()> {
        x.settle();
        let rows = x.data.get(..step.n * x.cols).ok_or_else(|| shape_err("reading rows not written".into()))?;
        out.clear();
        out.extend_from_slice(rows);
        Ok(())
    }
}

/// The gated unit `act` over `n` rows, in place in `gate`.
fn glu(pool: &crate::ThreadPool, act: Glu, gate: &mut [f32], up: &[f32], n: usize) {
    match act {
        Glu::Swiglu => ops::silu_mul(pool, gate, up, n),
        Glu::GeluTanh => ops::gelu_tanh_mul(pool, gate, up, n),
        Glu::SwigluOai => ops::swiglu_oai_mul(pool, gate, up, n, Glu::OAI_ALPHA, Glu::OAI_LIMIT),
    }
}

impl CpuBackend {
    /// [`Backend::attention`] and [`Backend::attention_masked`].
    #[allow(clippy::too_many_arguments)]
    fn attend(
        &mut self,
        step: &CpuStep,
        qkv: &CpuBuffer,
        kv: &CpuKv,
        layer: usize,
        s: &AttnShape,
        mask: ops::AttnMask<'_>,
        out: &mut CpuBuffer,
    ) -> Result<()> {
        let n = step.n;
        let (layout, path) = (kv.layout(), kv.attention_path());
        let (kc, vc) = kv.layer(layer).ok_or_else(|| shape_err(format!("the KV cache has no layer {layer}")))?;
        let mut seqs: Vec<AttnSeq<'_>> = Vec::with_capacity(self.batch.seqs.len());
        let windowed = kv.in_window(layer);
        for sp in &self.batch.seqs {
            let table = if windowed { &sp.window_table } else { &sp.block_table };
            if sp.logits == LogitsWant::All && sp.len > 1 {
                // Every row is a token to sample (speculative verification):
                // each attends as the decode step it stands for would, alone
                // and in f32 (a prompt-sized run may take the bf16 kernel, and
                // a row among others may split its context differently), so
                // sampling it equals plain decoding bit for bit.
                seqs.extend((0..sp.len).map(|i| AttnSeq {
                    q_start: sp.start + i,
                    n_q: 1,
                    pos0: sp.pos0 + i,
                    block_table: table,
                    solo: true,
                }));
            } else {
                let (start, len, pos0) = (sp.start, sp.len, sp.pos0);
                seqs.push(AttnSeq { q_start: start, n_q: len, pos0, block_table: table, solo: false });
            }
        }
        let q = qkv.data.get(..n * s.q_dim()).ok_or_else(|| shape_err("attention over Q not written".into()))?;
        let o = grow(&mut out.data, n * s.q_dim());
        // The one refusal: sinks that are not one per query head (a weight
        // of the wrong length).
        ops::paged_attention_masked(path, None, &self.pool, layout, kc, vc, &seqs, q, s.num_heads, s.scale, mask, o)
            .map_err(|e| BackendError::Weight(e.to_string()))
    }
}
