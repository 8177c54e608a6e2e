//! [`GgufWriter`]: builds GGUF v3 files (tiny test models, converted checkpoints).

use std::path::Path;

use crate::error::{GgufError, Result};
use crate::file::{align_up, ALIGNMENT_KEY, DEFAULT_ALIGNMENT};
use crate::metadata::Metadata;
use crate::reader::MAX_DIMS;
use crate::types::GgmlType;
use crate::value::{Array, Value};

struct PendingTensor {
    name: String,
    dims: Vec<u64>,
    ty: GgmlType,
    data: Vec<u8>,
}

/// Collects metadata and tensors, then writes a GGUF file.
///
/// Tensors are laid out in insertion order, each at a multiple of the
/// alignment (`general.alignment` if set, else 32).
///
/// ```
/// use kiln_gguf::{GgmlType, GgufFile, GgufWriter};
/// let mut w = GgufWriter::new();
/// w.add_metadata("general.architecture", "llama")?;
/// w.add_f32_tensor("output_norm.weight", &[4], &[1.0, 1.0, 1.0, 1.0])?;
/// let file = GgufFile::from_bytes(w.to_bytes()?)?;
/// assert_eq!(file.tensor("output_norm.weight").map(|t| t.n_bytes()), Some(16));
/// # Ok::<(), kiln_gguf::GgufError>(())
/// ```
pub struct GgufWriter {
    version: u32,
    metadata: Metadata,
    tensors: Vec<PendingTensor>,
}

impl Default for GgufWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl GgufWriter {
    /// An empty GGUF v3 file.
    pub fn new() -> Self {
        Self { version: 3, metadata: Metadata::new(), tensors: Vec::new() }
    }

    /// Writes version 2 instead of 3 (the layouts are identical).
    pub fn set_version(&mut self, version: u32) -> Result<()> {
        if !matches!(version, 2 | 3) {
            return Err(GgufError::writer(format!("can write GGUF versions 2 and 3, not {version}")));
        }
        self.version = version;
        Ok(())
    }

    /// Sets `general.alignment` (a nonzero power of two).
    pub fn set_alignment(&mut self, alignment: u32) -> Result<()> {
        if !alignment.is_power_of_two() {
            return Err(GgufError::writer(format!("alignment {alignment} is not a power of two")));
        }
        self.add_metadata(ALIGNMENT_KEY, alignment)
    }

    /// Adds a metadata entry; fails on a duplicate key.
    pub fn add_metadata(&mut self, key: impl Into<String>, value: impl Into<Value>) -> Result<()> {
        self.metadata.insert(key, value).map_err(|e| GgufError::writer(e.to_string()))
    }

    /// Adds a tensor; `dims` innermost first, `data` its raw bytes in `ty`'s layout.
    pub fn add_tensor(
        &mut self,
        name: impl Into<String>,
        dims: &[u64],
        ty: GgmlType,
        data: impl Into<Vec<u8>>,
    ) -> Result<()> {
        let name = name.into();
        let data = data.into();
        let bad = |m: String| GgufError::writer(format!("tensor '{name}': {m}"));
        if dims.is_empty() || dims.len() > MAX_DIMS || dims.contains(&0) {
            return Err(bad(format!("shape {dims:?} must have 1 to {MAX_DIMS} nonzero dimensions")));
        }
        let n = dims.iter().try_fold(1u64, |a, &d| a.checked_mul(d));
        let inner = usize::try_from(dims.first().copied().unwrap_or(0)).ok();
        let row = inner.and_then(|i| ty.row_bytes(i));
        let want = n.zip(row).and_then(|(n, row)| {
            let rows = n / dims.first().copied().unwrap_or(1);
            usize::try_from(rows).ok()?.checked_mul(row)
        });
        let Some(want) = want else {
            return Err(bad(format!("shape {dims:?} does not fit type {ty} (block size {})", ty.block_size())));
        };
        if data.len() != want {
            return Err(bad(format!("has {} bytes, shape {dims:?} of {ty} needs {want}", data.len())));
        }
        if self.tensors.iter().any(|t| t.name == name) {
            return Err(bad("duplicate name".to_string()));
        }
        self.tensors.push(PendingTensor { name, dims: dims.to_vec(), ty, data });
        Ok(())
    }

    /// Adds an `F32` tensor from values.
    pub fn add_f32_tensor(&mut self, name: impl Into<String>, dims: &[u64], values: &[f32]) -> Result<()> {
        let data: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.add_tensor(name, dims, GgmlType::F32, data)
    }

    fn alignment(&self) -> Result<u32> {
        match self.metadata.opt_u32(ALIGNMENT_KEY) {
            Ok(Some(a)) if a.is_power_of_two() => Ok(a),
            Ok(None) => Ok(DEFAULT_ALIGNMENT),
            _ => Err(GgufError::writer(format!("{ALIGNMENT_KEY} must be a power-of-two u32"))),
        }
    }

    /// Encodes the whole file.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let alignment = self.alignment()?;
        let pad = |out: &mut Vec<u8>| -> Result<()> {
            let end = align_up(out.len(), alignment).ok_or_else(|| GgufError::writer("file size overflows"))?;
            out.resize(end, 0);
            Ok(())
        };
        // Offsets relative to the data section: each tensor aligned.
        let mut offsets = Vec::with_capacity(self.tensors.len());
        let mut next = 0usize;
        for t in &self.tensors {
            offsets.push(next as u64);
            next = align_up(next + t.data.len(), alignment).ok_or_else(|| GgufError::writer("file size overflows"))?;
        }
        let mut out = Vec::new();
        out.extend_from_slice(b"GGUF");
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (key, value) in self.metadata.iter() {
            write_str(&mut out, key);
            out.extend_from_slice(&value.value_type().id().to_le_bytes());
            write_value(&mut out, value);
        }
        for (t, offset) in self.tensors.iter().zip(&offsets) {
            write_str(&mut out, &t.name);
            out.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            t.dims.iter().for_each(|d| out.extend_from_slice(&d.to_le_bytes()));
            out.extend_from_slice(&t.ty.id().to_le_bytes());
            out.extend_from_slice(&offset.to_le_bytes());
        }
        pad(&mut out)?;
        for t in &self.tensors {
            out.extend_from_slice(&t.data);
            pad(&mut out)?;
        }
        Ok(out)
    }

    /// Encodes the file and writes it to `path`.
    pub fn write_to(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let bytes = self.to_bytes()?;
        std::fs::write(path, bytes).map_err(|source| GgufError::Io { path: path.to_path_buf(), source })
    }
}

fn write_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn write_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U8(x) => out.push(*x),
        Value::I8(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::Bool(x) => out.push(u8::from(*x)),
        Value::String(s) => write_str(out, s),
        Value::Array(a) => write_array(out, a),
        Value::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
    }
}

fn write_array(out: &mut Vec<u8>, a: &Array) {
    out.extend_from_slice(&a.elem_type().id().to_le_bytes());
    out.extend_from_slice(&(a.len() as u64).to_le_bytes());
    macro_rules! le {
        ($v:expr) => {
            $v.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes()))
        };
    }
    match a {
        Array::U8(v) => out.extend_from_slice(v),
        Array::I8(v) => le!(v),
        Array::U16(v) => le!(v),
        Array::I16(v) => le!(v),
        Array::U32(v) => le!(v),
        Array::I32(v) => le!(v),
        Array::F32(v) => le!(v),
        Array::Bool(v) => v.iter().for_each(|&b| out.push(u8::from(b))),
        Array::String(v) => v.iter().for_each(|s| write_str(out, s)),
        Array::Array(v) => v.iter().for_each(|inner| write_array(out, inner)),
        Array::U64(v) => le!(v),
        Array::I64(v) => le!(v),
        Array::F64(v) => le!(v),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::GgufFile;

    #[test]
    fn round_trip_every_value_type() {
        let mut w = GgufWriter::new();
        let values: Vec<(&str, Value)> = vec![
            ("u8", 7u8.into()),
            ("i8", (-7i8).into()),
            ("u16", 700u16.into()),
            ("i16", (-700i16).into()),
            ("u32", 70_000u32.into()),
            ("i32", (-70_000i32).into()),
            ("f32", 1.5f32.into()),
            ("bool", true.into()),
            ("str", "héllo".into()),
            ("u64", (1u64 << 40).into()),
            ("i64", (-1i64 << 40).into()),
            ("f64", 2.25f64.into()),
            ("arr.str", vec!["a", "", "ü"].into()),
            ("arr.bool", vec![true, false].into()),
            ("arr.f64", vec![1.0f64].into()),
            ("arr.i16", Vec::<i16>::new().into()),
            ("arr.nested", Array::Array(vec![Array::U32(vec![1, 2]), Array::String(vec!["x".into()])]).into()),
        ];
        for (k, v) in &values {
            w.add_metadata(*k, v.clone()).unwrap();
        }
        w.add_tensor("q", &[64, 3], GgmlType::Q4_1, vec![9u8; 3 * 2 * 20]).unwrap();
        w.add_f32_tensor("f", &[3], &[1.0, 2.0, 3.0]).unwrap();
        let f = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
        let got: Vec<(&str, &Value)> = f.metadata().iter().collect();
        assert_eq!(got.len(), values.len());
        for ((k, v), (gk, gv)) in values.iter().zip(got) {
            assert_eq!((*k, v), (gk, gv));
        }
        let q = f.tensor("q").unwrap();
        assert_eq!((q.n_elements(), q.n_bytes(), q.offset), (192, 120, 0));
        assert_eq!(f.tensor_data(q), &[9u8; 120][..]);
        let t = f.tensor("f").unwrap();
        assert_eq!(t.offset, 128);
        assert_eq!(f.tensor_data(t), &[0, 0, 128, 63, 0, 0, 0, 64, 0, 0, 64, 64][..]);
        assert_eq!(f.data_offset() % 32, 0);
    }

    #[test]
    fn custom_alignment_and_version() {
        let mut w = GgufWriter::new();
        w.set_alignment(64).unwrap();
        w.set_version(2).unwrap();
        w.add_f32_tensor("a", &[1], &[1.0]).unwrap();
        w.add_f32_tensor("b", &[1], &[2.0]).unwrap();
        let f = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
        assert_eq!((f.version(), f.alignment()), (2, 64));
        assert_eq!(f.tensor("b").unwrap().offset, 64);
        assert!(w.set_alignment(3).is_err());
        assert!(w.set_version(1).is_err());
    }

    #[test]
    fn rejects_inconsistent_tensors() {
        let mut w = GgufWriter::new();
        let e = |r: Result<()>| r.unwrap_err().to_string();
        assert!(e(w.add_f32_tensor("a", &[2], &[1.0])).contains("has 4 bytes, shape [2] of F32 needs 8"));
        assert!(e(w.add_tensor("q", &[33], GgmlType::Q4_1, vec![0; 20])).contains("does not fit type Q4_1"));
        assert!(e(w.add_f32_tensor("z", &[0], &[])).contains("nonzero"));
        assert!(e(w.add_f32_tensor("z", &[1, 1, 1, 1, 1], &[1.0])).contains("1 to 4"));
        w.add_f32_tensor("a", &[1], &[1.0]).unwrap();
        assert!(e(w.add_f32_tensor("a", &[1], &[1.0])).contains("duplicate"));
        assert!(e(w.add_metadata("k", 1u8).and_then(|_| w.add_metadata("k", 1u8))).contains("duplicate"));
    }
}
