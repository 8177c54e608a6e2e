//! Weight matrices on the device. F32, F16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K
//! and Q6_K keep the file's bytes (the kernels read them in place); other
//! formats are dequantized to F16 at load. A fused matrix whose parts
//! differ in format (Q4_K_M's V in Q6_K beside its Q and K in Q4_K) keeps
//! each run of parts in its own format, in its own buffers; a matrix
//! larger than one binding is split by rows into several buffers.

use half::f16;
use kiln_backend::{BackendError, HostWeight, MatrixDesc, MatrixUse};
use kiln_gguf::GgmlType;

use crate::gpu::Gpu;
use crate::shaders::WeightFormat;
use crate::{Result, WgpuError};

/// Rows `row0..row0 + rows` of a matrix, in one buffer, in one format.
pub(crate) struct Chunk {
    pub(crate) buf: wgpu::Buffer,
    pub(crate) row0: usize,
    pub(crate) rows: usize,
    pub(crate) format: WeightFormat,
    pub(crate) row_bytes: usize,
}

/// A weight matrix (its parts stacked by rows) on a wgpu device.
pub struct WgpuMatrix {
    pub(crate) cols: usize,
    pub(crate) rows: usize,
    pub(crate) part_rows: Vec<usize>,
    pub(crate) chunks: Vec<Chunk>,
    pub(crate) bias: Option<wgpu::Buffer>,
    pub(crate) usage: MatrixUse,
}

fn in_place(ty: GgmlType) -> Option<WeightFormat> {
    match ty {
        GgmlType::F32 => Some(WeightFormat::F32),
        GgmlType::F16 => Some(WeightFormat::F16),
        GgmlType::Q8_0 => Some(WeightFormat::Q8_0),
        GgmlType::Q4_0 => Some(WeightFormat::Q4_0),
        GgmlType::Q4_1 => Some(WeightFormat::Q4_1),
        GgmlType::Q4_K => Some(WeightFormat::Q4_K),
        GgmlType::Q5_K => Some(WeightFormat::Q5_K),
        GgmlType::Q6_K => Some(WeightFormat::Q6_K),
        _ => None,
    }
}

/// Row `r` of `w` in `format` (the file's bytes, or F16 values).
fn row_bytes_of(w: &HostWeight, r: usize, format: WeightFormat, out: &mut Vec<u8>, tmp: &mut Vec<f32>) -> Result<()> {
    let rb = w.row_bytes();
    let src = &w.bytes().as_slice()[r * rb..(r + 1) * rb];
    if in_place(w.ty()) == Some(format) {
        out.extend_from_slice(src);
        return Ok(());
    }
    tmp.resize(w.cols(), 0.0);
    kiln_kernels::quant::dequantize_row(w.ty(), src, tmp)
        .map_err(|e| WgpuError::Unsupported(format!("{} weights: {e}", w.ty())))?;
    out.extend(tmp.iter().flat_map(|&v| f16::from_f32(v).to_le_bytes()));
    Ok(())
}

/// Bytes of a row of `cols` values of `w` kept as `format`.
fn format_row_bytes(w: &HostWeight, format: WeightFormat, cols: usize) -> Result<usize> {
    if cols == 0 || !cols.is_multiple_of(format.block_values()) {
        return Err(WgpuError::Unsupported(format!(
            "a {} matrix of {cols} columns (a multiple of {} is needed)",
            format.name(),
            format.block_values()
        )));
    }
    Ok(match format {
        WeightFormat::F16 => cols * 2,
        _ => w.ty().row_bytes(cols).ok_or_else(|| BackendError::Weight(format!("{cols} columns of {}", w.ty())))?,
    })
}

impl WgpuMatrix {
    pub(crate) fn new(gpu: &Gpu, desc: MatrixDesc) -> Result<Self> {
        desc.validate()?;
        if let MatrixUse::Experts { .. } = desc.usage {
            return Err(WgpuError::Unsupported("mixture-of-experts weights".into()));
        }
        let cols = desc.cols();
        let (mut chunks, mut bytes, mut tmp) = (Vec::new(), Vec::new(), Vec::new());
        let mut row0 = 0;
        // Runs of consecutive parts of one format.
        let mut p = 0;
        while p < desc.parts.len() {
            let format = in_place(desc.parts[p].ty()).unwrap_or(WeightFormat::F16);
            let end = (p..desc.parts.len())
                .find(|&q| in_place(desc.parts[q].ty()).unwrap_or(WeightFormat::F16) != format)
                .unwrap_or(desc.parts.len());
            let row_bytes = format_row_bytes(&desc.parts[p], format, cols)?;
            let per_chunk = gpu.max_binding() as usize / row_bytes;
            if per_chunk == 0 {
                return Err(WgpuError::OutOfMemory(format!(
                    "a weight row of {row_bytes} bytes is larger than one binding ({} bytes)",
                    gpu.max_binding()
                )));
            }
            // The run's rows in order, as (part, row).
            let all: Vec<(usize, usize)> =
                (p..end).flat_map(|q| (0..desc.parts[q].rows()).map(move |r| (q, r))).collect();
            for rows_of in all.chunks(per_chunk) {
                bytes.clear();
                for &(q, r) in rows_of {
                    row_bytes_of(&desc.parts[q], r, format, &mut bytes, &mut tmp)?;
                }
                let buf = gpu.upload(&bytes, &format!("weights ({} rows)", rows_of.len()))?;
                chunks.push(Chunk { buf, row0, rows: rows_of.len(), format, row_bytes });
                row0 += rows_of.len();
            }
            p = end;
        }
        let bias = match &desc.bias {
            Some(b) => Some(gpu.upload(&f32_bytes(b), "bias")?),
            None => None,
        };
        let part_rows = desc.parts.iter().map(HostWeight::rows).collect();
        Ok(Self { cols, rows: desc.rows(), part_rows, chunks, bias, usage: desc.usage })
    }

    /// Bytes on the device.
    pub(crate) fn bytes(&self) -> usize {
        self.chunks.iter().map(|c| c.rows * c.row_bytes).sum()
    }

    /// The formats its chunks are kept in.
    pub(crate) fn formats(&self) -> impl Iterator<Item = WeightFormat> + '_ {
        self.chunks.iter().map(|c| c.format)
    }
}

/// `v` as little-endian bytes.
pub(crate) fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
