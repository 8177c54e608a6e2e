//! The GPU as a [`kiln_backend::Backend`]. Two forms of each operation: decode-sized
//! steps (at most [`GEMV_MAX_ROWS`] rows) run the fused GEMV kernels
//! (RMSNorm, bias, SwiGLU and the residual add inside the products, RoPE
//! and the KV write inside the QKV product where it is one 16-bit matrix:
//! six kernels per layer) and are replayed from CUDA graphs; larger steps
//! run cuBLAS with separate norm and SwiGLU kernels, the residual add as
//! the GEMM's `beta = 1`; quantized matrices are multiplied in place on
//! the tensor cores up to a per-format limit of rows (kernels/mmq.cu; off:
//! 8 rows per pass of the decode products up to another limit), beyond it
//! dequantized for cuBLAS. The residual stream and the products'
//! outputs are f32, GEMM inputs and the KV cache 16-bit. The logit rows
//! are sampled on the device unless a row needs the host.

use std::collections::HashMap;
use std::sync::Arc;

use cudarc::driver::{CudaGraph, CudaSlice};
use kiln_backend::{ModelHints, Result as BResult};

use crate::convert::{DType, QFormat};
use crate::gpu::{drv_err, AttnMode, GemvKind, Gpu, QAct, WRef, GEMV_MAX_ROWS};
pub use crate::matrix::CudaMatrix;
use crate::{plan, sample, CudaError, CudaOptions, Result};
use lora::LoraIn;

mod encoder;
mod lora;
mod moe;
mod ops;

/// Logit rows computed per head product (bounds the logits buffer).
const HEAD_ROWS: usize = 256;

/// An activation buffer in device memory, sized for the backend's most
/// rows per step (logits: 256 rows, the head's chunk).
pub struct CudaBuffer {
    data: Data,
    cols: usize,
}

enum Data {
    F32(CudaSlice<f32>),
    /// The model's 16-bit type.
    Half(CudaSlice<u16>),
}

/// A rotary table in device memory.
pub struct CudaRope {
    cos: CudaSlice<f32>,
    sin: CudaSlice<f32>,
    neox: bool,
    /// `1 / attn_factor`: the tables carry the attention factor, a shift
    /// of cached keys is the rotation alone ([`kiln_backend::Backend::kv_shift`]).
    unscale: f32,
}

/// One step on the GPU: its packed metadata's layout and its form.
pub struct CudaStep {
    l: plan::StepLayout,
    /// Decode form (fused GEMV kernels).
    fused: bool,
    /// Replayed from (or recorded into) a CUDA graph.
    graph: bool,
    /// Rows sampled on the device (draws were given).
    on_device: bool,
    /// Per logit row: the host samples it (its logits are copied back).
    host_rows: Vec<bool>,
    /// Rows with LoRA adapters (their deltas' launches join the graph).
    lora: bool,
}

/// A captured decode step: rows, attention splits, keys per split, and
/// whether it has adapter rows.
pub(crate) type GraphKey = (usize, usize, usize, bool);

/// The split-K attention's grid, set when the model's attention buffer
/// is made (it depends on the heads).
#[derive(Clone, Copy)]
struct AttnGrid {
    mode: AttnMode,
    /// Attention blocks per split-K row and split (the grid's y).
    heads: usize,
    /// Query heads: the per-head kernel's blocks per row and split (a
    /// quantized cache's decode rows take it whatever `mode` says).
    query_heads: usize,
    /// Multiprocessors the grid is sized for.
    sms: usize,
    /// Steps of more keys leave the clustered attention for the grouped
    /// kernel ([`crate::gpu::Gpu::cluster_max_keys`]).
    cluster_max_keys: usize,
}

/// Decode rows quantized for the quantized-weight products.
struct QActBufs {
    xq: CudaSlice<i8>,
    xl: CudaSlice<i8>,
    dx: CudaSlice<f32>,
    sx: CudaSlice<f32>,
}

/// A captured decode step.
struct Graph(CudaGraph);

// SAFETY: CUDA graph objects must not be used from two threads at once; a
// `Graph` is only reached through `&mut CudaBackend` (one thread at a
// time), and moving it to another thread is allowed by the CUDA driver.
unsafe impl Send for Graph {}

/// One NVIDIA GPU (see the module documentation).
pub struct CudaBackend {
    gpu: Arc<Gpu>,
    opts: CudaOptions,
    /// Rows one step may hold.
    max_tokens: usize,
    /// Decode-sized steps run the fused GEMV kernels.
    fuse: bool,
    use_graphs: bool,
    /// Keep quantized matrices quantized.
    quant: bool,
    attn: Option<AttnGrid>,
    /// The longest context (graph buckets), from the KV memory.
    max_ctx: usize,
    /// Normed 16-bit rows of the residual (`max_tokens` × width).
    h: Option<CudaSlice<u16>>,
    /// The model is an encoder (no paged attention).
    encoder: bool,
    /// Gate and up outputs of the GEMM form (`max_tokens` × 2·ff).
    gu: Option<CudaSlice<f32>>,
    part_o: Option<CudaSlice<f32>>,
    part_ml: Option<CudaSlice<f32>>,
    /// Attention split counters (zero between launches).
    counters: Option<CudaSlice<u32>>,
    /// The device sampler's picks, one per logit row.
    picks: CudaSlice<u32>,
    meta: CudaSlice<u32>,
    /// Where quantized matrices are dequantized for prompt-sized steps.
    scratch: Option<CudaSlice<u16>>,
    qact: Option<QActBufs>,
    /// Captured decode steps by (rows, attention splits, keys per split).
    graphs: HashMap<GraphKey, Graph>,
    host_meta: Vec<u32>,
    /// Logits of steps with more than [`HEAD_ROWS`] logit rows, copied
    /// chunk by chunk.
    host_logits: Vec<f32>,
    /// Mixture-of-experts blocks' buffers.
    moe: moe::MoeBufs,
    /// LoRA adapters and the step's rows per adapter.
    lora: lora::CudaLora,
}

impl Drop for CudaBackend {
    fn drop(&mut self) {
        let _ = self.gpu.sync();
    }
}

fn too_small(what: &str) -> CudaError {
    CudaError::Driver(format!("{what}: a buffer of another backend or of the wrong kind"))
}

impl CudaBuffer {
    /// Values per row.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Checks that a product of `cols` inputs may read this buffer.
    fn input_of(&self, cols: usize, what: &str) -> Result<()> {
        Ok(kiln_backend::check_width(self.cols, cols, what)?)
    }

    fn addr(&self, g: &Gpu) -> u64 {
        match &self.data {
            Data::F32(b) => g.addr(b),
            Data::Half(b) => g.addr(b),
        }
    }
}

impl CudaBackend {
    /// Opens GPU `opts.ordinal` for a model with `hints` (its head
    /// dimension and 16-bit type pick the kernels).
    pub fn open(opts: &CudaOptions, hints: &ModelHints) -> BResult<Self> {
        Ok(Self::open_inner(opts, hints)?)
    }

    fn open_inner(opts: &CudaOptions, hints: &ModelHints) -> Result<Self> {
        let dtype = if hints.bf16_weights { DType::Bf16 } else { DType::F16 };
        // An encoder runs its own attention (`attn_within`): the paged
        // attention kernels are loaded for a head size they have, unused.
        let head_dim = if hints.encoder { 64 } else { hints.head_dim };
        let gpu = Arc::new(Gpu::open(opts, dtype, head_dim)?);
        plan::set_split_limits(opts.min_split_keys, opts.max_splits);
        let t = opts.max_batch_tokens.max(1);
        let quant = gpu.has_quant() && opts.quantized;
        tracing::info!(device = %gpu.name(), ?dtype, quant, "opened the GPU");
        Ok(Self {
            fuse: gpu.gemv_enabled(),
            use_graphs: gpu.gemv_enabled() && opts.graphs,
            quant,
            attn: None,
            max_ctx: 0,
            h: None,
            encoder: hints.encoder,
            gu: None,
            part_o: None,
            part_ml: None,
            counters: None,
            picks: gpu.alloc(t.max(HEAD_ROWS))?,
            meta: gpu.alloc(t * 8)?,
            scratch: None,
            qact: None,
            graphs: HashMap::new(),
            host_meta: Vec::new(),
            host_logits: Vec::new(),
            moe: Default::default(),
            lora: lora::CudaLora::default(),
            max_tokens: t,
            opts: opts.clone(),
            gpu,
        })
    }

    /// The device's name.
    pub fn device_name(&self) -> String {
        self.gpu.name()
    }

    fn qa(&self) -> Option<QAct> {
        let g = &self.gpu;
        self.qact.as_ref().map(|b| QAct { xq: g.addr(&b.xq), xl: g.addr(&b.xl), dx: g.addr(&b.dx), sx: g.addr(&b.sx) })
    }

    fn h(&self) -> Result<u64> {
        self.h.as_ref().map(|h| self.gpu.addr(h)).ok_or_else(|| too_small("no residual buffer yet"))
    }

    /// Grows an optional internal buffer to `len` elements (load time only:
    /// captured graphs address the old one, so they are dropped).
    fn reserve<T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits>(
        gpu: &Gpu,
        slot: &mut Option<CudaSlice<T>>,
        len: usize,
        graphs: &mut HashMap<GraphKey, Graph>,
    ) -> Result<()> {
        if slot.as_ref().is_none_or(|b| b.len() < len) {
            graphs.clear();
            let mut b = gpu.alloc::<T>(len.max(1))?;
            gpu.stream.memset_zeros(&mut b).map_err(drv_err)?;
            *slot = Some(b);
        }
        Ok(())
    }

    /// Whether the step's split-K rows take the clustered attention (its
    /// keys per block if so).
    fn cluster_step(&self, grid: AttnGrid, l: &plan::StepLayout) -> Option<usize> {
        let fits =
            l.n_split_rows <= GEMV_MAX_ROWS && plan::clustered(l.n_split_rows, grid.heads, l.max_keys, self.gpu.sms);
        let fits = fits && l.max_keys <= grid.cluster_max_keys;
        (grid.mode == AttnMode::Cluster && fits).then(|| self.gpu.cluster_keys()).flatten()
    }

    /// Whether `m` is read in place in passes of the decode products for
    /// this (not fused) step.
    fn passes(&self, step: &CudaStep, m: &CudaMatrix) -> bool {
        let limit = self
            .opts
            .quant_rows
            .unwrap_or_else(|| m.segs.iter().filter_map(|s| s.fmt()).map(QFormat::pass_rows).min().unwrap_or(0));
        self.fuse && !step.fused && m.all_quant() && step.l.n <= limit
    }

    /// Whether `m` takes the tensor-core quantized products (kernels/mmq.cu)
    /// in this (not fused) step: every segment quantized, and no more rows
    /// than the options or its formats allow.
    fn mmq_fits(&self, step: &CudaStep, m: &CudaMatrix) -> bool {
        let limit = self
            .opts
            .mmq_rows
            .unwrap_or_else(|| m.segs.iter().filter_map(|s| s.fmt()).map(QFormat::mmq_rows).min().unwrap_or(0));
        !step.fused && self.gpu.has_quant() && m.all_quant() && step.l.n <= limit
    }

    /// `y (+)= a · mᵀ` on the tensor-core quantized products when
    /// [`Self::mmq_fits`] says so (else false: the caller takes another
    /// path), segment by segment: 16-bit inputs `a`, f32 outputs of
    /// `ystride` per row, `accumulate` to add to them.
    fn mmq(&self, step: &CudaStep, m: &CudaMatrix, a: u64, y: u64, ystride: usize, accumulate: bool) -> Result<bool> {
        if !self.mmq_fits(step, m) {
            return Ok(false);
        }
        let g = &self.gpu;
        for sg in &m.segs {
            g.mmq(m.wref(g, sg), a, y + 4 * sg.row as u64, sg.rows, m.cols, step.l.n, ystride, accumulate)?;
        }
        Ok(true)
    }

    /// Matrix `m` in passes of the decode products when [`Self::passes`]
    /// says so (else false: the caller dequantizes it for cuBLAS): 16-bit
    /// inputs `a` of `cols`, quantized 8 rows at a time; each part
    /// (weights, bias, first output feature, features; SwiGLU's are its
    /// outputs) writes its features of every row, rows `ystride` elements
    /// of `ysize` bytes apart.
    #[allow(clippy::too_many_arguments)]
    fn pass(
        &self,
        step: &CudaStep,
        m: &CudaMatrix,
        kind: GemvKind,
        parts: &[(WRef, u64, usize, usize)],
        a: u64,
        y: u64,
        ystride: usize,
        ysize: usize,
    ) -> Result<bool> {
        let (Some(qa), true) = (self.qa(), self.passes(step, m)) else { return Ok(false) };
        if self.mmq_fits(step, m) {
            return Ok(false);
        }
        let (g, n, cols) = (&self.gpu, step.l.n, m.cols);
        for c in (0..n).step_by(GEMV_MAX_ROWS) {
            let k = GEMV_MAX_ROWS.min(n - c);
            g.quant_act(a + 2 * (c * cols) as u64, None, k, cols, &qa)?;
            for &(w, bias, row, rows) in parts {
                g.gemvq(kind, w, &qa, bias, y + (ysize * (c * ystride + row)) as u64, rows, cols, ystride, k)?;
            }
        }
        Ok(true)
    }

    /// A fused (decode) step's `y = rmsnorm(x) · mᵀ` (plus `bias`, 0 for
    /// none) into f32 rows of `ystride`, one product per segment (format)
    /// of `m`; the quantized ones read the normed rows quantized once. With
    /// LoRA deltas on `m` it also runs their shrink (in the quantizer's
    /// launch where there is one); the caller's expand adds them.
    #[allow(clippy::too_many_arguments)]
    fn store_normed(
        &self,
        step: &CudaStep,
        m: &CudaMatrix,
        x: u64,
        norm: u64,
        eps: f32,
        bias: u64,
        y: u64,
        ystride: usize,
    ) -> Result<()> {
        let (g, n, d) = (&self.gpu, step.l.n, m.cols);
        let qa = self.qa();
        // The deltas' shrink rides in the quantizer's launch, or else in the
        // first 16-bit product's.
        let mut lo = self.lora.shrink_blocks(g, m.lora_key, n);
        if let (true, Some(qa)) = (m.has_quant(), &qa) {
            g.quant_act_lora(x, Some((norm, 0, eps)), n, d, qa, lo.take().unwrap_or_default())?;
        }
        for sg in &m.segs {
            let (yo, w) = (y + 4 * sg.row as u64, m.wref(g, sg));
            let b = if bias == 0 { 0 } else { bias + 4 * sg.row as u64 };
            match (w.fmt, &qa) {
                (Some(_), Some(qa)) => g.gemvq(GemvKind::Store, w, qa, b, yo, sg.rows, d, ystride, n)?,
                _ => {
                    let (h, here) = (self.h()?, lo.take());
                    let shape = (sg.rows, d);
                    let carried = g.gemv_norm_lora(
                        x,
                        norm,
                        0,
                        w.addr,
                        shape,
                        b,
                        (yo, ystride),
                        n,
                        eps,
                        h,
                        here.unwrap_or_default(),
                    )?;
                    if !carried {
                        lo = lo.or(here);
                    }
                }
            }
        }
        if lo.is_some() {
            // No launch carried it (tensor-core steps): its own; it norms the
            // residual itself, since no normed copy exists.
            self.lora.shrink(g, m.lora_key, LoraIn::Normed { x, norm, eps }, d, n)?;
        }
        Ok(())
    }

    /// The final norm and the head for logit rows `c..c + mc` into the
    /// logits buffer (from its row 0).
    #[allow(clippy::too_many_arguments)]
    fn head_rows(
        &self,
        step: &CudaStep,
        x: u64,
        norm: u64,
        eps: f32,
        head: &CudaMatrix,
        logits: u64,
        c: usize,
        mc: usize,
    ) -> Result<()> {
        let g = &self.gpu;
        let (d, vocab) = (head.cols, head.rows);
        let rows = g.addr(&self.meta) + 4 * (step.l.logit_rows + c) as u64;
        let h = self.h()?;
        if !step.fused && mc > GEMV_MAX_ROWS && self.mmq_fits(step, head) {
            g.rms_norm(x, 0, norm, h, rows, mc, d, eps)?;
            for sg in &head.segs {
                let y = logits + 4 * sg.row as u64;
                g.mmq(head.wref(g, sg), h, y, sg.rows, d, mc, vocab, false)?;
            }
            return Ok(());
        }
        if step.fused || !head.is_dense() {
            // A quantized head is never dequantized (it is the largest
            // matrix): prompt-sized steps take it 8 logit rows at a time.
            let w = head.whole(g);
            let qa = self.qa();
            for c in (0..mc).step_by(GEMV_MAX_ROWS) {
                let k = GEMV_MAX_ROWS.min(mc - c);
                let (r, y) = (rows + 4 * c as u64, logits + 4 * (c * vocab) as u64);
                match (w.fmt, &qa) {
                    (Some(_), Some(qa)) => {
                        g.quant_act(x, Some((norm, r, eps)), k, d, qa)?;
                        g.gemvq(GemvKind::Store, w, qa, 0, y, vocab, d, vocab, k)?;
                    }
                    _ => g.gemv_norm(x, norm, r, w.addr, vocab, d, 0, y, vocab, k, eps, self.h()?)?,
                }
            }
            return Ok(());
        }
        g.rms_norm(x, 0, norm, h, rows, mc, d, eps)?;
        g.gemm(h, head.whole(g).addr, vocab, d, logits, mc, false)
    }

    /// The device sampler over logit rows `c..c + mc` (in the logits
    /// buffer from row 0) into `picks[c..]`.
    fn sample_rows(&self, step: &CudaStep, logits: u64, vocab: usize, c: usize, mc: usize) -> Result<()> {
        let g = &self.gpu;
        let params = g.addr(&self.meta) + 4 * (step.l.sample + c * sample::PARAM_WORDS) as u64;
        let picks = g.addr(&self.picks) + 4 * c as u64;
        g.sample(logits, vocab, params, picks, mc)
    }

    /// Copies the logits of rows `c..c + mc` (buffer rows `0..mc`) that the
    /// host samples into `out` (`vocab` per row).
    fn copy_logits(
        &self,
        step: &CudaStep,
        buf: &CudaSlice<f32>,
        vocab: usize,
        c: usize,
        mc: usize,
        out: &mut [f32],
    ) -> Result<()> {
        let g = &self.gpu;
        if !step.on_device {
            let src = buf.slice(..mc * vocab);
            return g.stream.memcpy_dtoh(&src, &mut out[c * vocab..(c + mc) * vocab]).map_err(drv_err);
        }
        for r in (c..c + mc).filter(|&r| step.host_rows.get(r).copied().unwrap_or(false)) {
            let src = buf.slice((r - c) * vocab..(r - c + 1) * vocab);
            g.stream.memcpy_dtoh(&src, &mut out[r * vocab..(r + 1) * vocab]).map_err(drv_err)?;
        }
        Ok(())
    }
}
