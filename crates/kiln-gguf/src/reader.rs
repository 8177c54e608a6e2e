//! Bounds-checked decoding of the GGUF header: magic, version, counts,
//! metadata and raw tensor infos. Nothing here trusts a count: every length
//! is compared with the bytes that remain before anything is allocated.

use crate::error::{GgufError, Result};
use crate::metadata::Metadata;
use crate::value::{Array, Value, ValueType};

/// GGML's limit on tensor rank.
pub const MAX_DIMS: usize = 4;
/// Nesting limit for arrays of arrays (real files use at most 1).
pub const MAX_ARRAY_DEPTH: usize = 8;
/// Smallest encoding of one metadata entry: key length, type, a 1-byte value.
const MIN_KV_BYTES: u64 = 8 + 4 + 1;
/// Smallest encoding of one tensor info: name length, rank, one dim, type, offset.
const MIN_TENSOR_INFO_BYTES: u64 = 8 + 4 + 8 + 4 + 8;

/// A tensor info exactly as stored, before validation.
#[derive(Debug)]
pub(crate) struct RawTensorInfo {
    pub(crate) name: String,
    pub(crate) dims: Vec<u64>,
    pub(crate) type_id: u32,
    pub(crate) offset: u64,
}

/// Everything before the data section.
#[derive(Debug)]
pub(crate) struct Header {
    pub(crate) version: u32,
    pub(crate) metadata: Metadata,
    pub(crate) tensors: Vec<RawTensorInfo>,
    /// Byte offset just past the last tensor info.
    pub(crate) end: usize,
}

/// A read position over a byte slice; every read is bounds-checked.
pub(crate) struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    fn take(&mut self, n: u64) -> Result<&'a [u8]> {
        let end = usize::try_from(n).ok().and_then(|n| self.pos.checked_add(n)).filter(|&end| end <= self.buf.len());
        let slice = end.and_then(|end| self.buf.get(self.pos..end));
        match (slice, end) {
            (Some(s), Some(end)) => {
                self.pos = end;
                Ok(s)
            }
            _ => Err(GgufError::malformed(format!(
                "unexpected end of file at byte {}: needed {n} bytes, {} left",
                self.pos,
                self.remaining()
            ))),
        }
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        let mut out = [0u8; N];
        out.iter_mut().zip(self.take(N as u64)?).for_each(|(d, s)| *d = *s);
        Ok(out)
    }

    pub(crate) fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    pub(crate) fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// A `u64`-length-prefixed UTF-8 string.
    pub(crate) fn string(&mut self) -> Result<String> {
        let at = self.pos;
        let len = self.u64()?;
        if len > self.remaining() as u64 {
            return Err(GgufError::malformed(format!(
                "string at byte {at} claims {len} bytes but only {} remain",
                self.remaining()
            )));
        }
        let bytes = self.take(len)?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s.to_string()),
            Err(e) => Err(GgufError::malformed(format!("string at byte {at} is not valid UTF-8 ({e})"))),
        }
    }

    /// Fails unless `count` elements of at least `min_size` bytes each fit in what remains.
    fn check_count(&self, count: u64, min_size: u64, what: &str) -> Result<usize> {
        let need = count.checked_mul(min_size);
        match need {
            Some(need) if need <= self.remaining() as u64 => Ok(count as usize),
            _ => Err(GgufError::malformed(format!(
                "{what} count {count} at byte {} cannot fit in the {} bytes left",
                self.pos,
                self.remaining()
            ))),
        }
    }
}

/// Decodes the header; `buf` is the whole file.
pub(crate) fn read_header(buf: &[u8]) -> Result<Header> {
    let mut c = Cursor::new(buf);
    let version = read_magic_and_version(&mut c)?;
    let n_tensors = c.u64()?;
    let n_kv = c.u64()?;
    let min_bytes = n_kv
        .checked_mul(MIN_KV_BYTES)
        .zip(n_tensors.checked_mul(MIN_TENSOR_INFO_BYTES))
        .and_then(|(a, b)| a.checked_add(b));
    if min_bytes.is_none_or(|m| m > c.remaining() as u64) {
        return Err(GgufError::malformed(format!(
            "header claims {n_tensors} tensors and {n_kv} metadata entries, \
             which cannot fit in a {}-byte file",
            buf.len()
        )));
    }
    let mut metadata = Metadata::new();
    for i in 0..n_kv {
        let (key, value) = read_kv(&mut c).map_err(|e| context(e, &format!("metadata entry #{i}")))?;
        metadata.insert(key, value)?;
    }
    let mut tensors = Vec::with_capacity(n_tensors as usize);
    for i in 0..n_tensors {
        tensors.push(read_tensor_info(&mut c).map_err(|e| context(e, &format!("tensor info #{i}")))?);
    }
    Ok(Header { version, metadata, tensors, end: c.pos() })
}

fn read_magic_and_version(c: &mut Cursor<'_>) -> Result<u32> {
    let magic: [u8; 4] =
        c.array().map_err(|_| GgufError::malformed("not a GGUF file: shorter than the 4-byte magic"))?;
    if &magic != b"GGUF" {
        return Err(GgufError::malformed(format!("not a GGUF file: starts with {magic:02x?}, expected \"GGUF\"")));
    }
    let version = c.u32()?;
    match version {
        2 | 3 => Ok(version),
        1 => Err(GgufError::unsupported(
            "GGUF version 1 is not supported (re-convert the model with a current converter)",
        )),
        v if matches!(v.swap_bytes(), 2 | 3) => Err(GgufError::unsupported("big-endian GGUF files are not supported")),
        v => Err(GgufError::unsupported(format!("GGUF version {v} is not supported (2 and 3 are)"))),
    }
}

/// Prefixes a malformed-file message with where it happened.
fn context(e: GgufError, what: &str) -> GgufError {
    match e {
        GgufError::Malformed { path, message } => GgufError::Malformed { path, message: format!("{what}: {message}") },
        other => other,
    }
}

fn read_kv(c: &mut Cursor<'_>) -> Result<(String, Value)> {
    let key = c.string()?;
    let ty = read_value_type(c).map_err(|e| context(e, &format!("key '{key}'")))?;
    let value = read_value(c, ty, 0).map_err(|e| context(e, &format!("key '{key}'")))?;
    Ok((key, value))
}

fn read_value_type(c: &mut Cursor<'_>) -> Result<ValueType> {
    let at = c.pos();
    let id = c.u32()?;
    ValueType::from_id(id).ok_or_else(|| GgufError::malformed(format!("unknown value type id {id} at byte {at}")))
}

fn read_value(c: &mut Cursor<'_>, ty: ValueType, depth: usize) -> Result<Value> {
    Ok(match ty {
        ValueType::U8 => Value::U8(u8::from_le_bytes(c.array()?)),
        ValueType::I8 => Value::I8(i8::from_le_bytes(c.array()?)),
        ValueType::U16 => Value::U16(u16::from_le_bytes(c.array()?)),
        ValueType::I16 => Value::I16(i16::from_le_bytes(c.array()?)),
        ValueType::U32 => Value::U32(c.u32()?),
        ValueType::I32 => Value::I32(i32::from_le_bytes(c.array()?)),
        ValueType::F32 => Value::F32(f32::from_le_bytes(c.array()?)),
        ValueType::Bool => Value::Bool(c.array::<1>()? != [0]),
        ValueType::String => Value::String(c.string()?),
        ValueType::Array => Value::Array(read_array(c, depth + 1)?),
        ValueType::U64 => Value::U64(c.u64()?),
        ValueType::I64 => Value::I64(i64::from_le_bytes(c.array()?)),
        ValueType::F64 => Value::F64(f64::from_le_bytes(c.array()?)),
    })
}

/// Decodes `count` fixed-size little-endian elements in one bounds check.
fn fixed<T, const N: usize>(c: &mut Cursor<'_>, count: usize, f: fn([u8; N]) -> T) -> Result<Vec<T>> {
    let bytes = c.take((count as u64).saturating_mul(N as u64))?;
    Ok(bytes
        .chunks_exact(N)
        .map(|chunk| {
            let mut a = [0u8; N];
            a.iter_mut().zip(chunk).for_each(|(d, s)| *d = *s);
            f(a)
        })
        .collect())
}

fn read_array(c: &mut Cursor<'_>, depth: usize) -> Result<Array> {
    if depth > MAX_ARRAY_DEPTH {
        return Err(GgufError::malformed(format!(
            "arrays nested deeper than {MAX_ARRAY_DEPTH} levels at byte {}",
            c.pos()
        )));
    }
    let elem = read_value_type(c)?;
    let count = c.u64()?;
    let n = c.check_count(count, elem.min_encoded_size() as u64, "array")?;
    Ok(match elem {
        ValueType::U8 => Array::U8(fixed(c, n, u8::from_le_bytes)?),
        ValueType::I8 => Array::I8(fixed(c, n, i8::from_le_bytes)?),
        ValueType::U16 => Array::U16(fixed(c, n, u16::from_le_bytes)?),
        ValueType::I16 => Array::I16(fixed(c, n, i16::from_le_bytes)?),
        ValueType::U32 => Array::U32(fixed(c, n, u32::from_le_bytes)?),
        ValueType::I32 => Array::I32(fixed(c, n, i32::from_le_bytes)?),
        ValueType::F32 => Array::F32(fixed(c, n, f32::from_le_bytes)?),
        ValueType::Bool => Array::Bool(fixed(c, n, |[b]: [u8; 1]| b != 0)?),
        ValueType::U64 => Array::U64(fixed(c, n, u64::from_le_bytes)?),
        ValueType::I64 => Array::I64(fixed(c, n, i64::from_le_bytes)?),
        ValueType::F64 => Array::F64(fixed(c, n, f64::from_le_bytes)?),
        ValueType::String => {
            let mut v = Vec::with_capacity(n);
            for i in 0..n {
                v.push(c.string().map_err(|e| context(e, &format!("array element {i}")))?);
            }
            Array::String(v)
        }
        ValueType::Array => {
            let mut v = Vec::with_capacity(n);
            for _ in 0..n {
                v.push(read_array(c, depth + 1)?);
            }
            Array::Array(v)
        }
    })
}

fn read_tensor_info(c: &mut Cursor<'_>) -> Result<RawTensorInfo> {
    let name = c.string()?;
    let in_tensor = |e| context(e, &format!("tensor '{name}'"));
    let n_dims = c.u32().map_err(in_tensor)?;
    if n_dims == 0 || n_dims as usize > MAX_DIMS {
        return Err(in_tensor(GgufError::malformed(format!("has {n_dims} dimensions (must be 1 to {MAX_DIMS})"))));
    }
    let mut dims = Vec::with_capacity(n_dims as usize);
    for _ in 0..n_dims {
        dims.push(c.u64().map_err(in_tensor)?);
    }
    let type_id = c.u32().map_err(in_tensor)?;
    let offset = c.u64().map_err(in_tensor)?;
    Ok(RawTensorInfo { name, dims, type_id, offset })
}
