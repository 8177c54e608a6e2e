//! Matrix multiplication `y = x · Wᵀ` for a weight in any supported GGUF type.
//!
//! - `Q4_0`, `Q4_1`, `Q5_0`, `Q5_1`, `Q8_0`, `MXFP4` weights: each activation row is
//!   quantized once to 8 bits per 32-block (see `act`), then each block's
//!   dot product is exact integer arithmetic (AVX-512 VNNI `vpdpbusd` when
//!   available) scaled in `f32`. The min/offset term of the weight format
//!   uses the activation block sum, so no weight value is ever widened to float.
//!   `MXFP4` blocks (gpt-oss experts) are always read in place: their codes
//!   become signed bytes by a table lookup (`vpshufb`) in the kernel.
//! - `Q4_K`, `Q5_K` and `Q6_K` weights that a model packs
//!   ([`PackedRows::pack`]): `Q4_K` and `Q6_K` keep their super-blocks
//!   (`PackKind::Q4K`, `PackKind::Q6K`, 4.625 and 6.5625 bits per weight),
//!   `Q5_K` takes the form of `Q5_1` ([`KForm`] names the older forms of
//!   `Q4_1` and of signed bytes with two scales per 32 values,
//!   `PackKind::S8x2`); all on 8-bit activations.
//! - `F32`, `F16`, `BF16` and the other K-quants: each weight row is
//!   converted to `f32` once (in a per-thread buffer) and dotted with every
//!   token in `f32` (packed float weights run their own kernels).
//!
//! Work is split over output rows across the pool's threads; each weight row
//! is reused for 4 tokens at a time, so prefill reads the weights `n / 4`
//! times from cache rather than `n` times.
//!
//! **Scratch**: the quantized activations live in a thread-local buffer of
//! the calling thread and per-row `f32` buffers in thread-locals of the pool
//! threads. They only grow, so after the first call at a given size no call
//! allocates.

mod act;
#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx2_fp4;
#[cfg(target_arch = "x86_64")]
mod avx2_packed;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "x86_64")]
mod avx512_packed;
mod grouped;
mod packed;
mod packed_k;
mod scalar;

pub(crate) use act::quantize_block;
pub use grouped::{matmul_grouped, Group};
pub use packed::{KForm, PackKind, PackedRows, PACK_ROWS};

pub use crate::isa::CpuIsa;
use crate::pool::{split_range, ThreadPool};
use crate::quant::{check_len, row_bytes, KernelError};
use crate::GgmlType;
use act::{ActQ8, ActRows};
use std::cell::RefCell;
use std::ops::Range;

/// A weight matrix of `rows` output features by `cols` input features, stored
/// row-major in GGUF block format `ty` (each row is `ty.row_bytes(cols)` bytes),
/// or repacked ([`PackedRows`]), or both.
#[derive(Debug, Clone, Copy)]
pub struct WeightView<'a> {
    /// Element type.
    pub ty: GgmlType,
    /// Output features.
    pub rows: usize,
    /// Input features.
    pub cols: usize,
    /// `rows * ty.row_bytes(cols)` bytes, or empty when only `packed` is kept.
    pub data: &'a [u8],
    /// The same matrix repacked for the integer kernels; used when present.
    pub packed: Option<&'a PackedRows>,
}

impl<'a> WeightView<'a> {
    /// A view of row-major GGUF block data.
    pub fn new(ty: GgmlType, rows: usize, cols: usize, data: &'a [u8]) -> Self {
        Self { ty, rows, cols, data, packed: None }
    }

    /// A view of a packed matrix.
    pub fn packed(p: &'a PackedRows) -> Self {
        Self { ty: p.ty(), rows: p.rows(), cols: p.cols(), data: &[], packed: Some(p) }
    }

    /// Output rows per unit of work (a packed group is split as a whole).
    fn unit(&self) -> usize {
        if self.packed.is_some() {
            PACK_ROWS
        } else {
            1
        }
    }
}

/// Whether `ty` weights use the 8-bit activation kernels when not packed.
fn uses_q8(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q5_0 | GgmlType::Q5_1 | GgmlType::Q8_0 | GgmlType::MXFP4)
}

/// Whether a product with `w` takes the activations quantized to 8 bits:
/// every packed kind does, whatever file type it came from.
fn q8_inputs(w: &WeightView<'_>) -> bool {
    w.packed.is_some() || uses_q8(w.ty)
}

/// Whether a product with `w` needs the activations' sums per 16 values.
fn half_sums(w: &WeightView<'_>) -> bool {
    w.packed.is_some_and(|p| p.kind().needs_half_sums())
}

/// `y[t][r] = Σ_c W[r][c] · x[t][c]` for `t < n`; `x` is `n × cols`, `y` is `n × rows`, row-major.
///
/// # Errors
/// [`KernelError`] when the buffer lengths do not match the shapes.
pub fn matmul(pool: &ThreadPool, w: WeightView<'_>, x: &[f32], n: usize, y: &mut [f32]) -> Result<(), KernelError> {
    matmul_multi_with(CpuIsa::current(), pool, &[w], x, n, &mut [y])
}

/// Several weights sharing one input (Q/K/V, gate/up): the input is prepared
/// (e.g. quantized) once and the rows of all weights are split over the
/// threads in one dispatch. `ys[i]` is `n × ws[i].rows`.
///
/// # Errors
/// [`KernelError`] when the weights' `cols` differ or lengths do not match.
pub fn matmul_multi(
    pool: &ThreadPool,
    ws: &[WeightView<'_>],
    x: &[f32],
    n: usize,
    ys: &mut [&mut [f32]],
) -> Result<(), KernelError> {
    matmul_multi_with(CpuIsa::current(), pool, ws, x, n, ys)
}

/// [`matmul_multi`] on an explicit [`CpuIsa`] level (tests, benchmarks).
///
/// A level this CPU does not support falls back to [`CpuIsa::Scalar`].
///
/// # Errors
/// As [`matmul_multi`].
pub fn matmul_multi_with(
    path: CpuIsa,
    pool: &ThreadPool,
    ws: &[WeightView<'_>],
    x: &[f32],
    n: usize,
    ys: &mut [&mut [f32]],
) -> Result<(), KernelError> {
    let path = if path.is_supported() { path } else { CpuIsa::Scalar };
    check_len("matmul outputs", ws.len(), ys.len())?;
    let Some(first) = ws.first() else {
        return Ok(());
    };
    let cols = first.cols;
    check_len("matmul input", n.saturating_mul(cols), x.len())?;
    for (w, y) in ws.iter().zip(ys.iter()) {
        check_len("matmul weight cols", cols, w.cols)?;
        let rb = row_bytes(w.ty, w.cols)?;
        match w.packed {
            Some(p) => {
                check_len("packed weight rows", w.rows, p.rows())?;
                check_len("packed weight cols", w.cols, p.cols())?;
            }
            None => check_len("matmul weight bytes", w.rows.saturating_mul(rb), w.data.len())?,
        }
        check_len("matmul output", n.saturating_mul(w.rows), y.len())?;
    }
    if n == 0 {
        return Ok(());
    }
    thread_local! {
        static ACT: RefCell<ActQ8> = RefCell::new(ActQ8::default());
    }
    ACT.with(|cell| match cell.try_borrow_mut() {
        Ok(mut act) => run_all(path, pool, ws, x, n, ys, &mut act),
        // Re-entered from inside a kernel (not done by kiln): use a fresh buffer.
        Err(_) => run_all(path, pool, ws, x, n, ys, &mut ActQ8::default()),
    });
    Ok(())
}

/// Output pointer shared by the pool threads; each writes only its own rows.
#[derive(Clone, Copy)]
struct OutPtr {
    ptr: *mut f32,
    len: usize,
}
// SAFETY: the threads write disjoint elements (distinct rows) and the
// pointee outlives the `pool.run` that uses it.
unsafe impl Sync for OutPtr {}
unsafe impl Send for OutPtr {}

/// One weight's work: everything a kernel needs for a range of its rows.
pub(crate) struct Job<'a> {
    pub(crate) w: WeightView<'a>,
    pub(crate) rb: usize,
    pub(crate) x: &'a [f32],
    pub(crate) act: ActRows<'a>,
    pub(crate) n: usize,
    y: OutPtr,
}

impl Job<'_> {
    /// Bytes of weight row `r`.
    #[inline(always)]
    pub(crate) fn row(&self, r: usize) -> &[u8] {
        &self.w.data[r * self.rb..(r + 1) * self.rb]
    }

    /// Writes `y[t][r]` for `t in t0..t0 + vals.len()`.
    #[inline(always)]
    pub(crate) fn store(&self, r: usize, t0: usize, vals: &[f32]) {
        for (k, &v) in vals.iter().enumerate() {
            let i = (t0 + k) * self.w.rows + r;
            assert!(i < self.y.len);
            // SAFETY: in bounds (checked above); rows are partitioned across
            // threads, so no other thread writes element `i`.
            unsafe { *self.y.ptr.add(i) = v };
        }
    }

    /// Writes `y[t][r0..r0 + vals.len()]`.
    #[inline(always)]
    pub(crate) fn store_rows(&self, t: usize, r0: usize, vals: &[f32]) {
        let i = t * self.w.rows + r0;
        assert!(r0 + vals.len() <= self.w.rows && i + vals.len() <= self.y.len);
        // SAFETY: in bounds (checked above); rows are partitioned across
        // threads, so no other thread writes these elements.
        unsafe { std::ptr::copy_nonoverlapping(vals.as_ptr(), self.y.ptr.add(i), vals.len()) };
    }
}

/// Most weights per dispatch (Q/K/V is 3, gate/up 2); more are done in groups.
const MAX_MULTI: usize = 8;

fn run_all(
    path: CpuIsa,
    pool: &ThreadPool,
    ws: &[WeightView<'_>],
    x: &[f32],
    n: usize,
    ys: &mut [&mut [f32]],
    act: &mut ActQ8,
) {
    if ws.iter().any(q8_inputs) {
        act.quantize(pool, path, x, n, ws.first().map_or(0, |w| w.cols), ws.iter().any(half_sums));
    }
    let act = act.rows(0..n);
    for (ws, ys) in ws.chunks(MAX_MULTI).zip(ys.chunks_mut(MAX_MULTI)) {
        let mut jobs: [Option<Job<'_>>; MAX_MULTI] = Default::default();
        for ((slot, w), y) in jobs.iter_mut().zip(ws).zip(ys.iter_mut()) {
            let rb = w.ty.row_bytes(w.cols).unwrap_or(0);
            *slot = Some(Job { w: *w, rb, x, act, n, y: OutPtr { ptr: y.as_mut_ptr(), len: y.len() } });
        }
        // Work is split in units: single rows, or whole packed groups.
        let total: usize = ws.iter().map(|w| w.rows / w.unit()).sum();
        pool.run(&|ith, nth| {
            let mine = split_range(total, ith, nth);
            let mut off = 0;
            for job in jobs.iter().flatten() {
                let units = job.w.rows / job.w.unit();
                let r = mine.start.max(off)..mine.end.min(off + units);
                if r.start < r.end {
                    run_units(path, job, r.start - off..r.end - off);
                }
                off += units;
            }
        });
    }
}

/// Computes units `units` (rows, or packed row groups) of one job for every token.
fn run_units(path: CpuIsa, job: &Job<'_>, units: Range<usize>) {
    if let Some(p) = job.w.packed {
        // SAFETY: `path` is only used when `is_supported()` said so.
        #[cfg(target_arch = "x86_64")]
        match path {
            CpuIsa::Avx512 => return unsafe { avx512_packed::rows(job, p, units) },
            CpuIsa::Avx2Vnni => return unsafe { avx2_packed::vnni::rows(job, p, units) },
            CpuIsa::Avx2 => return unsafe { avx2_packed::plain::rows(job, p, units) },
            CpuIsa::Scalar => {}
        }
        return packed::rows_portable(job, p, units);
    }
    let rows = units;
    if uses_q8(job.w.ty) {
        // SAFETY: `path` is only used when `is_supported()` said so.
        #[cfg(target_arch = "x86_64")]
        match path {
            CpuIsa::Avx512 => return unsafe { avx512::rows_q8(job, rows) },
            CpuIsa::Avx2 | CpuIsa::Avx2Vnni if job.w.ty == GgmlType::MXFP4 => {
                return unsafe { avx2_fp4::rows_mxfp4(job, rows) }
            }
            _ => {}
        }
        return scalar::rows_q8(job, rows);
    }
    thread_local! {
        static ROW: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    }
    ROW.with(|cell| match cell.try_borrow_mut() {
        Ok(mut buf) => rows_float(path, job, rows, &mut buf),
        Err(_) => rows_float(path, job, rows, &mut Vec::new()),
    });
}

/// Float path: convert each weight row to `f32`, dot it with every token.
fn rows_float(path: CpuIsa, job: &Job<'_>, rows: Range<usize>, buf: &mut Vec<f32>) {
    let cols = job.w.cols;
    if buf.len() < cols {
        buf.resize(cols, 0.0);
    }
    let buf = &mut buf[..cols];
    for r in rows {
        let row = job.row(r);
        let wrow: &[f32] = if job.w.ty == GgmlType::F32 && (row.as_ptr() as usize).is_multiple_of(4) {
            // SAFETY: aligned, `cols * 4` bytes, every bit pattern is a valid f32.
            unsafe { std::slice::from_raw_parts(row.as_ptr().cast::<f32>(), cols) }
        } else {
            to_f32(path, job.w.ty, row, buf);
            buf
        };
        let mut t = 0;
        while t < job.n {
            let nt = (job.n - t).min(4);
            let mut out = [0f32; 4];
            dot_tokens(path, wrow, &job.x[t * cols..(t + nt) * cols], nt, &mut out);
            job.store(r, t, &out[..nt]);
            t += nt;
        }
    }
}

fn to_f32(path: CpuIsa, ty: GgmlType, row: &[u8], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if matches!(ty, GgmlType::F16 | GgmlType::BF16) {
        let bf16 = ty == GgmlType::BF16;
        // SAFETY: path support checked by the caller.
        match path {
            CpuIsa::Avx512 => return unsafe { avx512::half_to_f32(bf16, row, out) },
            CpuIsa::Avx2 | CpuIsa::Avx2Vnni => return unsafe { avx2::half_to_f32(bf16, row, out) },
            CpuIsa::Scalar => {}
        }
    }
    let _ = path;
    // Lengths were validated before dispatch, so this cannot fail.
    if crate::quant::dequantize_row(ty, row, out).is_err() {
        out.fill(f32::NAN);
    }
}

/// `out[k] = w · x[k]` for the `nt` rows of `x` (each `w.len()` long).
fn dot_tokens(path: CpuIsa, w: &[f32], x: &[f32], nt: usize, out: &mut [f32; 4]) {
    // SAFETY: path support checked by the caller.
    #[cfg(target_arch = "x86_64")]
    match path {
        CpuIsa::Avx512 => return unsafe { avx512::dot_tokens(w, x, nt, out) },
        CpuIsa::Avx2 | CpuIsa::Avx2Vnni => return unsafe { avx2::dot_tokens(w, x, nt, out) },
        CpuIsa::Scalar => {}
    }
    let _ = path;
    for (k, o) in out.iter_mut().enumerate().take(nt) {
        *o = scalar::dot(w, &x[k * w.len()..(k + 1) * w.len()]);
    }
}
