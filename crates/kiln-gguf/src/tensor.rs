//! Tensor infos and the validation of the data layout (shapes, types,
//! alignment, bounds, overlap).

use std::collections::HashSet;
use std::ops::Range;

use crate::error::{GgufError, Result};
use crate::reader::RawTensorInfo;
use crate::types::GgmlType;

/// One tensor of a GGUF file, validated against the file.
///
/// The fields are the values stored in the file; the derived sizes were
/// computed (with overflow checks) when the file was opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    /// Tensor name, e.g. `blk.0.attn_q.weight`.
    pub name: String,
    /// Shape, innermost (contiguous) dimension first: a `[rows, cols]`
    /// matrix in row-major terms is stored as `dims = [cols, rows]`.
    pub dims: Vec<u64>,
    /// Element type.
    pub ty: GgmlType,
    /// Offset as stored in the file: relative to the start of the data
    /// section. See [`TensorInfo::data_range`] for absolute file offsets.
    pub offset: u64,
    n_elements: u64,
    start: usize,
    n_bytes: usize,
}

impl TensorInfo {
    /// Total number of elements (product of `dims`).
    pub fn n_elements(&self) -> u64 {
        self.n_elements
    }

    /// Size of the tensor's data in bytes.
    pub fn n_bytes(&self) -> usize {
        self.n_bytes
    }

    /// Absolute byte range of the tensor's data within the file.
    pub fn data_range(&self) -> Range<usize> {
        self.start..self.start + self.n_bytes
    }

    /// Shape in row-major order (outermost first), e.g. `[rows, cols]`.
    pub fn shape_row_major(&self) -> Vec<u64> {
        self.dims.iter().rev().copied().collect()
    }
}

/// Where the data section lies and how it is aligned.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DataLayout {
    pub(crate) data_start: usize,
    pub(crate) alignment: u64,
    pub(crate) file_len: usize,
}

/// Validates every raw tensor info and returns the checked infos, in file order.
pub(crate) fn validate_tensors(raw: Vec<RawTensorInfo>, layout: DataLayout) -> Result<Vec<TensorInfo>> {
    let mut names = HashSet::with_capacity(raw.len());
    let mut out = Vec::with_capacity(raw.len());
    for r in raw {
        if !names.insert(r.name.clone()) {
            return Err(GgufError::malformed(format!("duplicate tensor name '{}'", r.name)));
        }
        out.push(validate_one(r, layout)?);
    }
    check_no_overlap(&out)?;
    Ok(out)
}

fn validate_one(r: RawTensorInfo, layout: DataLayout) -> Result<TensorInfo> {
    let bad = |msg: String| GgufError::malformed(format!("tensor '{}': {msg}", r.name));
    let ty = GgmlType::from_id(r.type_id)
        .ok_or_else(|| bad(format!("unknown or unsupported GGML type id {}", r.type_id)))?;
    let n_elements = checked_elements(&r.dims).map_err(bad)?;
    let inner = r.dims.first().copied().unwrap_or(0);
    let block = ty.block_size() as u64;
    if !inner.is_multiple_of(block) {
        return Err(bad(format!("innermost dimension {inner} is not a multiple of the {ty} block size {block}")));
    }
    let n_bytes = (n_elements / block)
        .checked_mul(ty.type_size() as u64)
        .and_then(|b| usize::try_from(b).ok())
        .ok_or_else(|| bad(format!("shape {:?} of type {ty} is too large", r.dims)))?;
    if !r.offset.is_multiple_of(layout.alignment) {
        return Err(bad(format!("offset {} is not a multiple of the alignment {}", r.offset, layout.alignment)));
    }
    let start = (layout.data_start as u64).checked_add(r.offset);
    let end = start.and_then(|s| s.checked_add(n_bytes as u64));
    match (start, end) {
        (Some(s), Some(e)) if e <= layout.file_len as u64 => {
            Ok(TensorInfo { start: s as usize, n_bytes, n_elements, ty, offset: r.offset, dims: r.dims, name: r.name })
        }
        _ => Err(bad(format!(
            "data range {}..{} is past the end of the file ({} bytes)",
            start.map_or("overflow".to_string(), |s| s.to_string()),
            end.map_or("overflow".to_string(), |e| e.to_string()),
            layout.file_len
        ))),
    }
}

fn checked_elements(dims: &[u64]) -> std::result::Result<u64, String> {
    let mut n: u64 = 1;
    for (i, &d) in dims.iter().enumerate() {
        if d == 0 {
            return Err(format!("dimension {i} of shape {dims:?} is zero"));
        }
        n = n.checked_mul(d).ok_or_else(|| format!("shape {dims:?} has more than 2^64 elements"))?;
    }
    Ok(n)
}

fn check_no_overlap(tensors: &[TensorInfo]) -> Result<()> {
    let mut order: Vec<&TensorInfo> = tensors.iter().collect();
    order.sort_by_key(|t| t.start);
    for pair in order.windows(2) {
        if let [a, b] = pair {
            if b.start < a.start + a.n_bytes {
                return Err(GgufError::malformed(format!(
                    "tensors '{}' (bytes {:?}) and '{}' (bytes {:?}) overlap",
                    a.name,
                    a.data_range(),
                    b.name,
                    b.data_range()
                )));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(name: &str, dims: &[u64], type_id: u32, offset: u64) -> RawTensorInfo {
        RawTensorInfo { name: name.into(), dims: dims.to_vec(), type_id, offset }
    }

    const LAYOUT: DataLayout = DataLayout { data_start: 64, alignment: 32, file_len: 64 + 256 };

    #[test]
    fn sizes_are_derived() {
        let t = validate_tensors(vec![raw("a", &[64, 2], 3, 0)], LAYOUT).unwrap();
        assert_eq!(t[0].n_elements(), 128);
        assert_eq!(t[0].n_bytes(), 4 * 20);
        assert_eq!(t[0].data_range(), 64..144);
        assert_eq!(t[0].shape_row_major(), vec![2, 64]);
    }

    #[test]
    fn each_defect_is_named() {
        let cases: Vec<(RawTensorInfo, &str)> = vec![
            (raw("t", &[4], 99, 0), "unknown or unsupported GGML type id 99"),
            (raw("t", &[4, 0], 0, 0), "dimension 1 of shape [4, 0] is zero"),
            (raw("t", &[u64::MAX, 2], 0, 0), "more than 2^64 elements"),
            (raw("t", &[33], 3, 0), "not a multiple of the Q4_1 block size 32"),
            (raw("t", &[4], 0, 16), "offset 16 is not a multiple of the alignment 32"),
            (raw("t", &[128], 0, 0), "data range 64..576 is past the end of the file (320 bytes)"),
            (raw("t", &[4], 0, u64::MAX - 31), "data range overflow..overflow"),
            (raw("t", &[1 << 60, 4], 0, 0), "is too large"),
        ];
        for (r, want) in cases {
            let e = validate_tensors(vec![r], LAYOUT).unwrap_err().to_string();
            assert!(e.contains("tensor 't'") && e.contains(want), "{e} lacks {want}");
        }
    }

    #[test]
    fn overlap_and_duplicates() {
        let e = validate_tensors(vec![raw("a", &[16], 0, 0), raw("b", &[4], 0, 32)], LAYOUT);
        assert!(e.unwrap_err().to_string().contains("'a' (bytes 64..128) and 'b' (bytes 96..112) overlap"));
        let e = validate_tensors(vec![raw("a", &[4], 0, 0), raw("a", &[4], 0, 32)], LAYOUT);
        assert!(e.unwrap_err().to_string().contains("duplicate tensor name 'a'"));
        assert!(validate_tensors(vec![raw("a", &[8], 0, 0), raw("b", &[4], 0, 32)], LAYOUT).is_ok());
    }
}
