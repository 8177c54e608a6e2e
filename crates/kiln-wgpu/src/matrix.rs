//! Weight matrices on the device. F32, F16, Q8_0, Q4_0 and Q4_1 keep the
//! file's bytes (the kernels read them in place); other formats, and a
//! fused matrix whose parts differ in format (Q4_K_M's V beside its Q and
//! K), are dequantized to F16 at load. A matrix larger than one binding is
//! split by rows into several buffers.

use half::f16;
use kiln_backend::{BackendError, HostWeight, MatrixDesc, MatrixUse};
use kiln_gguf::GgmlType;

use crate::gpu::Gpu;
use crate::shaders::WeightFormat;
use crate::{Result, WgpuError};

/// Rows `row0..row0 + rows` of a matrix, in one buffer.
pub(crate) struct Chunk {
    pub(crate) buf: wgpu::Buffer,
    pub(crate) row0: usize,
    pub(crate) rows: usize,
}

/// A weight matrix (its parts stacked by rows) on a wgpu device.
pub struct WgpuMatrix {
    pub(crate) format: WeightFormat,
    pub(crate) cols: usize,
    pub(crate) rows: usize,
    pub(crate) part_rows: Vec<usize>,
    pub(crate) row_bytes: usize,
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

impl WgpuMatrix {
    pub(crate) fn new(gpu: &Gpu, desc: MatrixDesc) -> Result<Self> {
        desc.validate()?;
        if let MatrixUse::Experts { .. } = desc.usage {
            return Err(WgpuError::Unsupported("mixture-of-experts weights".into()));
        }
        let cols = desc.cols();
        let first = desc.parts[0].ty();
        let format = match in_place(first) {
            Some(f) if desc.parts.iter().all(|p| p.ty() == first) => f,
            _ => WeightFormat::F16,
        };
        if cols == 0 || !cols.is_multiple_of(format.block_values()) {
            return Err(WgpuError::Unsupported(format!(
                "a {} matrix of {cols} columns (a multiple of {} is needed)",
                format.name(),
                format.block_values()
            )));
        }
        let row_bytes = match format {
            WeightFormat::F16 => cols * 2,
            _ => first.row_bytes(cols).ok_or_else(|| BackendError::Weight(format!("{cols} columns of {first}")))?,
        };
        let rows = desc.rows();
        let per_chunk = (gpu.max_binding() as usize / row_bytes).min(rows);
        if per_chunk == 0 {
            return Err(WgpuError::OutOfMemory(format!(
                "a weight row of {row_bytes} bytes is larger than one binding ({} bytes)",
                gpu.max_binding()
            )));
        }
        // The parts' rows in order, as (part, row).
        let all: Vec<(usize, usize)> =
            desc.parts.iter().enumerate().flat_map(|(p, w)| (0..w.rows()).map(move |r| (p, r))).collect();
        let (mut chunks, mut bytes, mut tmp) = (Vec::new(), Vec::new(), Vec::new());
        for (i, rows_of) in all.chunks(per_chunk).enumerate() {
            bytes.clear();
            for &(p, r) in rows_of {
                row_bytes_of(&desc.parts[p], r, format, &mut bytes, &mut tmp)?;
            }
            let buf = gpu.upload(&bytes, &format!("weights ({} rows)", rows_of.len()))?;
            chunks.push(Chunk { buf, row0: i * per_chunk, rows: rows_of.len() });
        }
        let bias = match &desc.bias {
            Some(b) => Some(gpu.upload(&f32_bytes(b), "bias")?),
            None => None,
        };
        let part_rows = desc.parts.iter().map(HostWeight::rows).collect();
        Ok(Self { format, cols, rows, part_rows, row_bytes, chunks, bias, usage: desc.usage })
    }

    /// Bytes on the device.
    pub(crate) fn bytes(&self) -> usize {
        self.rows * self.row_bytes
    }
}

/// `v` as little-endian bytes.
pub(crate) fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
