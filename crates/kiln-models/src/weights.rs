//! Weights as views into memory-mapped model files, and the one linear layer
//! type that hides the weight format (STYLE.md habit 5).

use std::sync::Arc;

use kiln_kernels::matmul::{PackedRows, SimdPath};
use kiln_kernels::{quant, GgmlType, ThreadPool, WeightView};

use crate::error::{ModelError, Result};

/// Bytes owned by something shared (a memory map), sliced without copying.
#[derive(Clone)]
pub struct SharedBytes {
    owner: Arc<dyn AsRef<[u8]> + Send + Sync>,
    start: usize,
    len: usize,
    /// The owner is a read-only file mapping.
    mapped: bool,
}

impl std::fmt::Debug for SharedBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SharedBytes({}..{})", self.start, self.start + self.len)
    }
}

impl SharedBytes {
    /// A view of `owner[start..start + len]`; `None` if out of range.
    pub fn new(owner: Arc<dyn AsRef<[u8]> + Send + Sync>, start: usize, len: usize) -> Option<Self> {
        let end = start.checked_add(len)?;
        ((*owner).as_ref().len() >= end).then_some(Self { owner, start, len, mapped: false })
    }
    /// Marks the owner as a read-only file mapping (see [`Self::release_pages`]).
    pub fn with_mapped(mut self, mapped: bool) -> Self {
        self.mapped = mapped;
        self
    }
    /// Owns a plain buffer.
    pub fn from_vec(v: Vec<u8>) -> Self {
        let len = v.len();
        Self { owner: Arc::new(v), start: 0, len, mapped: false }
    }
    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        &(*self.owner).as_ref()[self.start..self.start + self.len]
    }

    /// Tells the OS that the pages fully inside these bytes are not needed
    /// now, so they leave this process's resident memory. For a read-only
    /// file mapping (model files) the data stays valid: a later read pages
    /// it back in from the file. Owned buffers are left alone.
    pub fn release_pages(&self) {
        #[cfg(unix)]
        if self.mapped {
            let page = 4096usize;
            let start = self.as_slice().as_ptr() as usize;
            let (lo, hi) = (start.div_ceil(page) * page, (start + self.len) / page * page);
            if hi > lo {
                // SAFETY: the range lies inside a live read-only file mapping
                // (`mapped`), for which MADV_DONTNEED only drops resident
                // pages; their contents are re-read from the file on access.
                unsafe { libc::madvise(lo as *mut libc::c_void, hi - lo, libc::MADV_DONTNEED) };
            }
        }
    }
}

/// A raw tensor from a model file: element type, dims (innermost first, as
/// in GGUF) and bytes.
#[derive(Debug, Clone)]
pub struct RawTensor {
    /// Element type.
    pub ty: GgmlType,
    /// Dimensions, innermost (contiguous) first.
    pub dims: Vec<usize>,
    /// The data.
    pub bytes: SharedBytes,
}

/// A 2-D weight: `rows` output features of `cols` inputs, in any supported format.
///
/// The bytes stay in the memory-mapped file; a weight that a linear layer
/// multiplies with may also hold a repacked copy for the integer kernels
/// ([`Weight::pack`]), which the kernels then read instead.
#[derive(Debug, Clone)]
pub struct Weight {
    ty: GgmlType,
    rows: usize,
    cols: usize,
    bytes: SharedBytes,
    packed: Option<Arc<PackedRows>>,
}

impl Weight {
    /// Wraps a raw tensor checked to be `rows × cols`.
    pub fn new(name: &str, t: RawTensor, rows: usize, cols: usize) -> Result<Self> {
        let bad = |msg: String| ModelError::Config(format!("tensor '{name}': {msg}"));
        if t.dims.len() != 2 || t.dims[0] != cols || t.dims[1] != rows {
            return Err(bad(format!(
                "expected shape [{rows}, {cols}], found {:?} (innermost last)",
                t.dims.iter().rev().collect::<Vec<_>>()
            )));
        }
        let row_bytes =
            t.ty.row_bytes(cols).ok_or_else(|| bad(format!("{cols} columns do not fit {} blocks", t.ty)))?;
        if row_bytes.checked_mul(rows) != Some(t.bytes.as_slice().len()) {
            return Err(bad(format!("{} bytes do not match {rows}x{cols} {}", t.bytes.as_slice().len(), t.ty)));
        }
        Ok(Self { ty: t.ty, rows, cols, bytes: t.bytes, packed: None })
    }
    /// Kernel view.
    pub fn view(&self) -> WeightView<'_> {
        WeightView {
            ty: self.ty,
            rows: self.rows,
            cols: self.cols,
            data: self.bytes.as_slice(),
            packed: self.packed.as_deref(),
        }
    }
    /// Repacks the weight for the integer kernels when this CPU has them and
    /// the format allows it (`Q4_0`, `Q4_1`, `Q5_0`, `Q5_1`, `Q8_0`, and
    /// `Q4_K` / `Q5_K` / `Q6_K` in the form of `Q4_1` / `Q5_1` / signed bytes (see
    /// `PackedRows::pack`), with rows a multiple of 16); otherwise leaves it
    /// as it is. The file's pages that were read to
    /// pack are handed back to the OS, so resident memory holds one copy.
    pub fn pack(mut self) -> Self {
        if self.packed.is_none() && SimdPath::detect() == SimdPath::Avx512 {
            if let Some(p) = PackedRows::pack(WeightView::new(self.ty, self.rows, self.cols, self.bytes.as_slice())) {
                self.packed = Some(Arc::new(p));
                self.bytes.release_pages();
            }
        }
        self
    }
    /// Element type.
    pub fn ty(&self) -> GgmlType {
        self.ty
    }
    /// Output features.
    pub fn rows(&self) -> usize {
        self.rows
    }
    /// Input features.
    pub fn cols(&self) -> usize {
        self.cols
    }
    /// Dequantizes row `r` into `out` (`cols` floats): embedding lookups.
    pub fn row_f32(&self, r: usize, out: &mut [f32]) -> Result<()> {
        if let Some(p) = &self.packed {
            return p.dequantize_row(r, out).map_err(|e| ModelError::Batch(e.to_string()));
        }
        let rb = self.ty.row_bytes(self.cols).unwrap_or(0);
        let data = self
            .bytes
            .as_slice()
            .get(r * rb..(r + 1) * rb)
            .ok_or_else(|| ModelError::Batch(format!("row {r} out of range {}", self.rows)))?;
        quant::dequantize_row(self.ty, data, out).map_err(|e| ModelError::Batch(e.to_string()))
    }
    /// Bytes read per full matmul (for bandwidth accounting).
    pub fn n_bytes(&self) -> usize {
        self.packed.as_ref().map_or(self.bytes.as_slice().len(), |p| p.n_bytes())
    }
}

/// A linear layer `y = x·Wᵀ (+ b)`, whatever the weight format.
#[derive(Debug, Clone)]
pub struct Linear {
    w: Weight,
    bias: Option<Vec<f32>>,
}

impl Linear {
    /// A layer from a weight (with `pack`, repacked for the kernels where
    /// that helps, see [`Weight::pack`]) and an optional bias of `rows` floats.
    pub fn new(w: Weight, bias: Option<Vec<f32>>, pack: bool) -> Result<Self> {
        let w = if pack { w.pack() } else { w };
        if let Some(b) = &bias {
            if b.len() != w.rows {
                return Err(ModelError::Config(format!("bias of {} for {} outputs", b.len(), w.rows)));
            }
        }
        Ok(Self { w, bias })
    }
    /// The weight.
    pub fn weight(&self) -> &Weight {
        &self.w
    }
    /// Output features.
    pub fn out_dim(&self) -> usize {
        self.w.rows
    }
    /// Adds the bias (if any) to `n` rows of output.
    pub fn add_bias(&self, y: &mut [f32]) {
        if let Some(b) = &self.bias {
            for row in y.chunks_exact_mut(b.len()) {
                kiln_kernels::ops::add_inplace(row, b);
            }
        }
    }
    /// `y = x·Wᵀ + b` for `n` rows.
    pub fn forward(&self, pool: &ThreadPool, x: &[f32], n: usize, y: &mut [f32]) -> Result<()> {
        kiln_kernels::matmul(pool, self.w.view(), x, n, y).map_err(|e| ModelError::Batch(e.to_string()))?;
        self.add_bias(&mut y[..n * self.w.rows]);
        Ok(())
    }
}

/// Runs several linears that share one input (the input is prepared once).
pub fn forward_multi(pool: &ThreadPool, layers: &[&Linear], x: &[f32], n: usize, ys: &mut [&mut [f32]]) -> Result<()> {
    let views: Vec<WeightView<'_>> = layers.iter().map(|l| l.w.view()).collect();
    kiln_kernels::matmul_multi(pool, &views, x, n, ys).map_err(|e| ModelError::Batch(e.to_string()))?;
    for (l, y) in layers.iter().zip(ys.iter_mut()) {
        l.add_bias(&mut y[..n * l.w.rows]);
    }
    Ok(())
}

/// Reads a 1-D tensor (norm weights, biases) as `f32`.
pub fn vector_f32(name: &str, t: &RawTensor, len: usize) -> Result<Vec<f32>> {
    let n: usize = t.dims.iter().product();
    if n != len || t.dims.len() != 1 {
        return Err(ModelError::Config(format!("tensor '{name}': expected [{len}], found {:?}", t.dims)));
    }
    let mut out = vec![0.0; len];
    quant::dequantize_row(t.ty, t.bytes.as_slice(), &mut out)
        .map_err(|e| ModelError::Config(format!("tensor '{name}': {e}")))?;
    Ok(out)
}
