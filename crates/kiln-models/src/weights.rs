//! Tensors as the loaders find them, and their conversion into what a
//! backend takes ([`kiln_backend::HostWeight`], `f32` vectors). Bytes stay
//! in the memory-mapped file until a backend reads or uploads them.

use kiln_backend::HostWeight;
pub use kiln_backend::SharedBytes;
use kiln_kernels::{quant, GgmlType};

use crate::error::{ModelError, Result};

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

/// A 2-D tensor checked to be `rows × cols` (`rows` output features of
/// `cols` inputs).
pub fn host_weight(name: &str, t: RawTensor, rows: usize, cols: usize) -> Result<HostWeight> {
    if t.dims.len() != 2 || t.dims[0] != cols || t.dims[1] != rows {
        return Err(ModelError::Config(format!(
            "tensor '{name}': expected shape [{rows}, {cols}], found {:?} (innermost last)",
            t.dims.iter().rev().collect::<Vec<_>>()
        )));
    }
    Ok(HostWeight::new(name, t.ty, rows, cols, t.bytes)?)
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

/// A 3-D expert tensor checked to be `experts × rows × cols` (GGUF dims
/// `[cols, rows, experts]`), as one matrix of `experts · rows` rows
/// (expert `e` owns rows `e·rows..(e+1)·rows`).
pub fn expert_weight(name: &str, t: RawTensor, experts: usize, rows: usize, cols: usize) -> Result<HostWeight> {
    if t.dims.len() != 3 || t.dims[0] != cols || t.dims[1] != rows || t.dims[2] != experts {
        return Err(ModelError::Config(format!(
            "tensor '{name}': expected shape [{experts}, {rows}, {cols}], found {:?} (innermost last)",
            t.dims.iter().rev().collect::<Vec<_>>()
        )));
    }
    Ok(HostWeight::new(name, t.ty, experts * rows, cols, t.bytes)?)
}

/// Reads a 2-D tensor of `rows × cols` (GGUF dims `[cols, rows]`) as `f32`
/// rows, e.g. one bias per expert (`[experts, width]`).
pub fn rows_f32(name: &str, t: &RawTensor, rows: usize, cols: usize) -> Result<Vec<f32>> {
    if t.dims.len() != 2 || t.dims[0] != cols || t.dims[1] != rows {
        return Err(ModelError::Config(format!(
            "tensor '{name}': expected shape [{rows}, {cols}], found {:?} (innermost last)",
            t.dims.iter().rev().collect::<Vec<_>>()
        )));
    }
    let rb =
        t.ty.row_bytes(cols)
            .ok_or_else(|| ModelError::Config(format!("tensor '{name}': rows of {cols} do not fit {:?}", t.ty)))?;
    let bytes = t.bytes.as_slice();
    if bytes.len() < rb * rows {
        return Err(ModelError::Config(format!("tensor '{name}' is shorter than its shape")));
    }
    let mut out = vec![0.0; rows * cols];
    for (r, o) in out.chunks_exact_mut(cols.max(1)).enumerate() {
        quant::dequantize_row(t.ty, &bytes[r * rb..(r + 1) * rb], o)
            .map_err(|e| ModelError::Config(format!("tensor '{name}': {e}")))?;
    }
    Ok(out)
}
