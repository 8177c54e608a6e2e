//! Weights on the CPU: the file's bytes read in place (memory-mapped), or
//! repacked for the integer kernels where this CPU has them; one type for
//! every GGUF format.

use std::sync::Arc;

use kiln_backend::{BackendError, HostWeight, MatrixDesc, MatrixUse, Result};

use crate::matmul::{CpuIsa, PackedRows};
use crate::{quant, ThreadPool, WeightView};

pub(crate) fn kernel_err(e: crate::KernelError) -> BackendError {
    BackendError::Device { device: "cpu", what: e.to_string() }
}

/// One weight: the host bytes, and a repacked copy that the kernels read
/// instead when present.
#[derive(Debug, Clone)]
pub(crate) struct Weight {
    host: HostWeight,
    packed: Option<Arc<PackedRows>>,
}

impl Weight {
    /// Repacks the weight for the integer kernels when `pack` asks, this
    /// CPU has them and the format allows it (`Q4_0`, `Q4_1`, `Q5_0`,
    /// `Q5_1`, `Q8_0`, and the K-quants `Q4_K` / `Q5_K` / `Q6_K`, see
    /// `PackedRows::pack`), with rows a multiple of 16);
    /// otherwise reads the file's bytes. The pages read to pack are
    /// handed back to the OS, so resident memory holds one copy.
    fn new(host: HostWeight, pack: bool) -> Self {
        let mut packed = None;
        if pack && CpuIsa::current() >= CpuIsa::Avx2 {
            let view = WeightView::new(host.ty(), host.rows(), host.cols(), host.bytes().as_slice());
            if let Some(p) = PackedRows::pack(view) {
                packed = Some(Arc::new(p));
                host.bytes().release_pages();
            }
        }
        Self { host, packed }
    }

    fn view(&self) -> WeightView<'_> {
        WeightView {
            ty: self.host.ty(),
            rows: self.host.rows(),
            cols: self.host.cols(),
            data: self.host.bytes().as_slice(),
            packed: self.packed.as_deref(),
        }
    }

    fn rows(&self) -> usize {
        self.host.rows()
    }

    /// Bytes one product reads.
    fn n_bytes(&self) -> usize {
        self.packed.as_ref().map_or(self.host.bytes().as_slice().len(), |p| p.n_bytes())
    }

    /// Dequantizes row `r` into `out` (`cols` floats).
    fn row_f32(&self, r: usize, out: &mut [f32]) -> Result<()> {
        if let Some(p) = &self.packed {
            return p.dequantize_row(r, out).map_err(kernel_err);
        }
        let rb = self.host.row_bytes();
        let data =
            self.host.bytes().as_slice().get(r * rb..(r + 1) * rb).ok_or_else(|| {
                BackendError::Batch(format!("row {r} is outside a matrix of {} rows", self.host.rows()))
            })?;
        quant::dequantize_row(self.host.ty(), data, out).map_err(kernel_err)
    }
}

/// A matrix on the CPU: its parts (each one product of the shared input,
/// with its part of the bias), and for an embedding the rows as the file
/// has them (lookups stay exact whatever the products' packing).
#[derive(Debug, Clone)]
pub struct CpuMatrix {
    parts: Vec<(Weight, Option<Vec<f32>>)>,
    lookup: Option<Weight>,
    /// Experts stacked in each part ([`MatrixUse::Experts`]; 0 otherwise):
    /// `parts` then holds part `p`'s expert `e` at `p · experts + e`.
    experts: usize,
    /// Names the matrix in the backend's LoRA tables (0: none yet).
    pub(crate) lora_key: u32,
}

impl CpuMatrix {
    pub(crate) fn new(desc: MatrixDesc, pack: bool) -> Result<Self> {
        desc.validate()?;
        if let MatrixUse::Experts { count } = desc.usage {
            let mut parts = Vec::with_capacity(count * desc.parts.len());
            // The bias runs over the stacked rows: part by part, expert by expert.
            let mut at = 0;
            for p in &desc.parts {
                for w in p.split_rows(count)? {
                    let b = desc.bias.as_ref().map(|b| b[at..at + w.rows()].to_vec());
                    at += w.rows();
                    parts.push((Weight::new(w, pack), b));
                }
            }
            return Ok(Self { parts, lookup: None, experts: count, lora_key: 0 });
        }
        let bias = desc.bias;
        let (lookup, products) = match desc.usage {
            MatrixUse::Embedding { tied_head: false } => (desc.parts.first().cloned(), Vec::new()),
            MatrixUse::Embedding { tied_head: true } => (desc.parts.first().cloned(), desc.parts),
            _ => (None, desc.parts),
        };
        let mut at = 0;
        let parts = products
            .into_iter()
            .map(|w| {
                let b = bias.as_ref().map(|b| b[at..at + w.rows()].to_vec());
                at += w.rows();
                (Weight::new(w, pack), b)
            })
            .collect();
        Ok(Self { parts, lookup: lookup.map(|w| Weight::new(w, false)), experts: 0, lora_key: 0 })
    }

    /// Experts stacked in each part (0: not an experts matrix).
    pub(crate) fn experts(&self) -> usize {
        self.experts
    }

    /// Expert `e` of part `part` of an experts matrix.
    pub(crate) fn expert(&self, part: usize, e: usize) -> Option<WeightView<'_>> {
        (e < self.experts).then(|| self.parts.get(part * self.experts + e).map(|p| p.0.view())).flatten()
    }

    /// The bias of expert `e` of part `part` of an experts matrix, if any.
    pub(crate) fn expert_bias(&self, part: usize, e: usize) -> Option<&[f32]> {
        (e < self.experts).then(|| self.parts.get(part * self.experts + e)?.1.as_deref()).flatten()
    }

    /// Input features.
    pub(crate) fn cols(&self) -> usize {
        self.parts.first().map_or(self.lookup_cols(), |p| p.0.host.cols())
    }

    /// Output features of part `i`.
    pub(crate) fn part_rows(&self, i: usize) -> usize {
        self.parts.get(i).map_or(0, |p| p.0.rows())
    }

    /// Shape (rows, cols) of each part.
    pub(crate) fn part_shapes(&self) -> Vec<(usize, usize)> {
        self.parts.iter().map(|p| (p.0.rows(), p.0.host.cols())).collect()
    }

    /// Number of parts (products of the shared input).
    pub(crate) fn n_parts(&self) -> usize {
        self.parts.len()
    }

    /// Bytes a product reads (every part).
    pub(crate) fn n_bytes(&self) -> usize {
        let parts: usize = self.parts.iter().map(|p| p.0.n_bytes()).sum();
        if parts == 0 {
            self.lookup.as_ref().map_or(0, Weight::n_bytes)
        } else {
            parts
        }
    }

    /// Width of an embedding's rows.
    pub(crate) fn lookup_cols(&self) -> usize {
        self.lookup.as_ref().map_or(0, |w| w.host.cols())
    }

    /// Row `r` of an embedding, as `f32`.
    pub(crate) fn lookup(&self, r: usize, out: &mut [f32]) -> Result<()> {
        match &self.lookup {
            Some(w) => w.row_f32(r, out),
            None => Err(BackendError::Batch("a row lookup in a matrix that is not an embedding".into())),
        }
    }

    /// `ys[i] = x·Wᵢᵀ + bᵢ` for every part `i` over `n` rows of `x`; the
    /// input is prepared once for all parts.
    pub(crate) fn forward(&self, pool: &ThreadPool, x: &[f32], n: usize, ys: &mut [&mut [f32]]) -> Result<()> {
        if ys.len() != self.parts.len() {
            return Err(BackendError::Batch(format!("{} outputs for {} parts", ys.len(), self.parts.len())));
        }
        let views = self.part_views();
        if let [v] = views.as_slice() {
            crate::matmul(pool, *v, x, n, ys[0]).map_err(kernel_err)?;
        } else {
            crate::matmul_multi(pool, &views, x, n, ys).map_err(kernel_err)?;
        }
        self.add_bias(n, ys);
        Ok(())
    }

    /// The weight of each part, as the kernels read it.
    pub(crate) fn part_views(&self) -> Vec<WeightView<'_>> {
        self.parts.iter().map(|p| p.0.view()).collect()
    }

    /// Adds each part's bias (if any) to its `n` output rows in `ys`.
    pub(crate) fn add_bias(&self, n: usize, ys: &mut [&mut [f32]]) {
        for ((w, bias), y) in self.parts.iter().zip(ys.iter_mut()) {
            if let Some(b) = bias {
                for row in y[..n * w.rows()].chunks_exact_mut(b.len()) {
                    crate::ops::add_inplace(row, b);
                }
            }
        }
    }
}
