//! Weight matrices in device memory: 16-bit (the model's dtype), or a
//! quantized format our kernels read in place, in segments of rows that
//! share a format (a fused QKV whose V is Q6_K and Q/K Q4_K has two), with
//! the bias of every row.

use cudarc::driver::{sys as drv, CudaSlice};
use kiln_backend::{HostWeight, MatrixDesc, MatrixUse};

use crate::convert::{fill_16, QFormat, QK_K};

/// Superblocks of each device row of a quantized matrix of `cols` columns
/// (a ragged row's last one padded: `QFormat::pad_rows`).
pub(crate) fn row_superblocks(cols: usize) -> usize {
    cols.div_ceil(QK_K)
}
use crate::gpu::{drv_err, Gpu, WRef};
use crate::{CudaError, Result};

/// Rows converted per host-to-device copy while loading.
const LOAD_ROWS: usize = 1024;

/// A row-major matrix in device memory, in segments of rows that share a
/// format (a fused QKV whose V is Q6_K and Q/K Q4_K has two).
pub struct CudaMatrix {
    pub(crate) segs: Vec<Seg>,
    pub(crate) rows: usize,
    pub(crate) cols: usize,
    /// `f32`, one per row.
    pub(crate) bias: Option<CudaSlice<f32>>,
    /// Rows of each part as the model stacked them (Q, K, V; gate, up).
    pub(crate) part_rows: Vec<usize>,
    /// Names the matrix in the backend's LoRA tables.
    pub(crate) lora_key: u32,
    /// An experts matrix whose experts are all quantized alike: each
    /// expert's base address, for the expert-batched decode products
    /// (`Gpu::gemvq_ids`).
    pub(crate) expert_ptrs: Option<CudaSlice<u64>>,
}

/// Rows `row..row + rows` of a [`CudaMatrix`].
pub(crate) struct Seg {
    pub(crate) store: Store,
    pub(crate) row: usize,
    pub(crate) rows: usize,
}

pub(crate) enum Store {
    /// The model's 16-bit type.
    Dense(CudaSlice<u16>),
    /// Read in place by the quantized kernels (kernels/quant.cu).
    Quant { buf: CudaSlice<u8>, fmt: QFormat },
}

impl Seg {
    /// The segment's quantized format (`None`: 16-bit).
    pub(crate) fn fmt(&self) -> Option<QFormat> {
        match self.store {
            Store::Quant { fmt, .. } => Some(fmt),
            Store::Dense(_) => None,
        }
    }
}

impl CudaMatrix {
    /// Places `desc`'s parts, stacked, in device memory. Parts in a
    /// [`QFormat`] stay quantized when `quant` allows (`ragged`: also the
    /// 32-value formats at widths inside a superblock, [`QFormat::placed`]; consecutive parts of
    /// one format share a segment). The gated unit's [gate; up] must be one
    /// segment (the fused SwiGLU reads gate and up rows alike), and so must
    /// every single-part matrix: parts of mixed formats are then all
    /// converted to 16 bits.
    pub(crate) fn load(gpu: &Gpu, desc: MatrixDesc, quant: bool, ragged: Option<bool>) -> Result<Self> {
        desc.validate()?;
        if let MatrixUse::Experts { count } = desc.usage {
            return Self::load_experts(gpu, desc, count, quant, ragged);
        }
        let cols = desc.cols();
        let single = desc.usage != MatrixUse::Qkv;
        let mut ws: Vec<(HostWeight, Option<QFormat>)> = desc
            .parts
            .into_iter()
            .map(|w| {
                let fmt = if quant { QFormat::placed(w.ty(), cols, ragged) } else { None };
                (w, fmt)
            })
            .collect();
        if single && ws.windows(2).any(|p| p[0].1 != p[1].1) {
            ws.iter_mut().for_each(|w| w.1 = None);
        }
        let part_rows = ws.iter().map(|w| w.0.rows()).collect();
        let mut segs: Vec<Seg> = Vec::new();
        let mut at = 0;
        let mut i = 0;
        while i < ws.len() {
            let fmt = ws[i].1;
            let group: Vec<&HostWeight> = ws[i..].iter().take_while(|w| w.1 == fmt).map(|w| &w.0).collect();
            i += group.len();
            let rows: usize = group.iter().map(|w| w.rows()).sum();
            let store = match fmt {
                None => Store::Dense(Self::load_dense(gpu, &group, rows, cols)?),
                Some(fmt) => {
                    let mut bytes = Vec::with_capacity(fmt.bytes(rows * row_superblocks(cols)));
                    group.iter().for_each(|w| bytes.extend_from_slice(w.bytes().as_slice()));
                    let bytes = fmt.to_device(fmt.pad_rows(bytes, cols)?)?;
                    Store::Quant { buf: gpu.upload(&bytes)?, fmt }
                }
            };
            segs.push(Seg { store, row: at, rows });
            at += rows;
        }
        let bias = match &desc.bias {
            Some(b) => Some(gpu.upload(b)?),
            None => None,
        };
        Ok(Self { segs, rows: at, cols, bias, part_rows, lora_key: 0, expert_ptrs: None })
    }

    /// A mixture of experts' matrices ([`MatrixUse::Experts`]): one segment
    /// per expert, `[gate; up]` of that expert (or its down projection),
    /// segment `e` being expert `e`, quantized when `quant` allows and the
    /// parts share a format.
    fn load_experts(gpu: &Gpu, desc: MatrixDesc, count: usize, quant: bool, ragged: Option<bool>) -> Result<Self> {
        let cols = desc.cols();
        let split: Vec<Vec<HostWeight>> =
            desc.parts.iter().map(|p| p.split_rows(count)).collect::<std::result::Result<_, _>>()?;
        let fmts: Vec<Option<QFormat>> = desc.parts.iter().map(|w| QFormat::placed(w.ty(), cols, ragged)).collect();
        let fmt = if quant && fmts.windows(2).all(|f| f[0] == f[1]) { fmts[0] } else { None };
        let mut segs = Vec::with_capacity(count);
        let mut at = 0;
        for e in 0..count {
            let group: Vec<&HostWeight> = split.iter().map(|p| &p[e]).collect();
            let rows: usize = group.iter().map(|w| w.rows()).sum();
            let store = match fmt {
                None => Store::Dense(Self::load_dense(gpu, &group, rows, cols)?),
                Some(fmt) => {
                    let mut bytes = Vec::with_capacity(fmt.bytes(rows * row_superblocks(cols)));
                    group.iter().for_each(|w| bytes.extend_from_slice(w.bytes().as_slice()));
                    Store::Quant { buf: gpu.upload(&fmt.to_device(fmt.pad_rows(bytes, cols)?)?)?, fmt }
                }
            };
            segs.push(Seg { store, row: at, rows });
            at += rows;
        }
        // The bias comes part by part (each part's experts in turn: gpt-oss's
        // `[gate biases of every expert | up biases of every expert]`);
        // segment `e`'s bias is kept beside its rows, at `segs[e].row`.
        let bias = match &desc.bias {
            Some(b) => {
                let per_part: Vec<usize> = desc.parts.iter().map(|p| p.rows() / count).collect();
                let mut by_expert = Vec::with_capacity(b.len());
                for e in 0..count {
                    let mut part_at = 0;
                    for &r in &per_part {
                        by_expert.extend_from_slice(&b[part_at + e * r..part_at + (e + 1) * r]);
                        part_at += r * count;
                    }
                }
                Some(gpu.upload(&by_expert)?)
            }
            None => None,
        };
        Ok(Self { segs, rows: at, cols, bias, part_rows: vec![at], lora_key: 0, expert_ptrs: None })
    }

    /// The weights converted to 16 bits, stacked.
    fn load_dense(gpu: &Gpu, parts: &[&HostWeight], rows: usize, cols: usize) -> Result<CudaSlice<u16>> {
        let mut buf = gpu.alloc::<u16>(rows * cols)?;
        let mut chunk = vec![0u16; LOAD_ROWS.min(rows) * cols];
        let mut at = 0;
        for w in parts {
            let data = w.bytes().as_slice();
            let r = w.rows();
            let rb = w.row_bytes();
            for r0 in (0..r).step_by(LOAD_ROWS) {
                let nr = LOAD_ROWS.min(r - r0);
                let dst = &mut chunk[..nr * cols];
                fill_16(w.ty(), &data[r0 * rb..(r0 + nr) * rb], cols, gpu.dtype, dst)?;
                let mut d = buf.slice_mut((at + r0) * cols..(at + r0 + nr) * cols);
                gpu.stream.memcpy_htod(&*dst, &mut d).map_err(drv_err)?;
            }
            at += r;
        }
        Ok(buf)
    }

    /// Device bytes (what a decode step reads).
    pub(crate) fn bytes(&self) -> usize {
        self.segs
            .iter()
            .map(|s| match &s.store {
                Store::Dense(_) => s.rows * self.cols * 2,
                Store::Quant { buf, .. } => buf.len(),
            })
            .sum()
    }

    /// Whether the matrix is one 16-bit segment (the GEMMs read it as is).
    pub(crate) fn is_dense(&self) -> bool {
        matches!(self.segs.as_slice(), [Seg { store: Store::Dense(_), .. }])
    }

    /// 16-bit elements of scratch needed to hand this matrix to cuBLAS.
    pub(crate) fn scratch_len(&self) -> usize {
        if self.is_dense() {
            0
        } else {
            self.rows * self.cols
        }
    }

    /// The experts' base addresses if every segment (expert) is quantized
    /// in one format with the same rows: what the expert-batched products
    /// take (expert e's biases, if any, are its rows of [`Self::bias`], at
    /// `e · rows`).
    pub(crate) fn uniform_experts(&self, gpu: &Gpu) -> Option<Vec<u64>> {
        let first = self.segs.first()?;
        // `moe_route` takes at most 2048 experts.
        let same = self.segs.len() <= 2048
            && self.segs.iter().all(|s| s.fmt().is_some() && s.fmt() == first.fmt() && s.rows == first.rows);
        same.then(|| self.segs.iter().map(|s| self.wref(gpu, s).addr).collect())
    }

    /// Whether any segment is quantized.
    pub(crate) fn has_quant(&self) -> bool {
        self.segs.iter().any(|s| matches!(s.store, Store::Quant { .. }))
    }

    /// Whether every segment is quantized (the decode products can take
    /// the whole matrix, segment by segment).
    pub(crate) fn all_quant(&self) -> bool {
        self.segs.iter().all(|s| matches!(s.store, Store::Quant { .. }))
    }

    pub(crate) fn wref(&self, gpu: &Gpu, seg: &Seg) -> WRef {
        match &seg.store {
            Store::Dense(b) => WRef { addr: gpu.addr(b), fmt: None, superblocks: 0 },
            Store::Quant { buf, fmt } => {
                WRef { addr: gpu.addr(buf), fmt: Some(*fmt), superblocks: seg.rows * row_superblocks(self.cols) }
            }
        }
    }

    /// The single segment of a matrix loaded with `single`.
    pub(crate) fn whole(&self, gpu: &Gpu) -> WRef {
        self.wref(gpu, &self.segs[0])
    }

    /// The address of the matrix as 16-bit row-major: its own buffer, or
    /// `scratch` after dequantizing (and copying) its segments into it.
    pub(crate) fn as_dense(&self, gpu: &Gpu, scratch: Option<&CudaSlice<u16>>) -> Result<u64> {
        if let [Seg { store: Store::Dense(b), .. }] = self.segs.as_slice() {
            return Ok(gpu.addr(b));
        }
        let scratch = scratch.ok_or_else(|| CudaError::Driver("no dequantization buffer".into()))?;
        let base = gpu.addr(scratch);
        for s in &self.segs {
            let at = base + 2 * (s.row * self.cols) as u64;
            match &s.store {
                Store::Dense(b) => {
                    // SAFETY: both ranges are rows·cols u16s inside live buffers.
                    unsafe {
                        drv::cuMemcpyDtoDAsync_v2(at, gpu.addr(b), 2 * s.rows * self.cols, gpu.stream.cu_stream())
                    }
                    .result()
                    .map_err(drv_err)?;
                }
                Store::Quant { .. } => {
                    gpu.dequant(self.wref(gpu, s), 0, s.rows * row_superblocks(self.cols), self.cols, at)?
                }
            }
        }
        Ok(base)
    }
}
