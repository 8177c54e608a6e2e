//! [`GgufFile`]: a validated, memory-mapped (or owned) GGUF file, cheap to clone.

use std::collections::HashMap;
use std::fs::File;
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{GgufError, Result};
use crate::metadata::Metadata;
use crate::reader::read_header;
use crate::tensor::{validate_tensors, DataLayout, TensorInfo};

/// The default data alignment when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u32 = 32;

/// The metadata key that overrides the data alignment.
pub const ALIGNMENT_KEY: &str = "general.alignment";

enum Storage {
    Mapped(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl Storage {
    fn bytes(&self) -> &[u8] {
        match self {
            Storage::Mapped(m) => m,
            Storage::Owned(v) => v,
        }
    }
}

struct Inner {
    storage: Storage,
    path: Option<PathBuf>,
    version: u32,
    metadata: Metadata,
    tensors: Vec<TensorInfo>,
    by_name: HashMap<String, usize>,
    alignment: u32,
    data_start: usize,
}

/// A parsed and fully validated GGUF file.
///
/// Cloning is cheap (an `Arc`): clones share the mapping, which stays alive
/// as long as any clone or [`TensorBytes`] exists.
#[derive(Clone)]
pub struct GgufFile {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("path", &self.inner.path)
            .field("version", &self.inner.version)
            .field("metadata_entries", &self.inner.metadata.len())
            .field("tensors", &self.inner.tensors.len())
            .field("file_size", &self.file_size())
            .finish()
    }
}

/// Parses and validates GGUF bytes (copied into an owned buffer).
///
/// This is the fuzzing entry point: for any input it returns `Ok` or `Err`,
/// never panics, and allocates at most a small multiple of `bytes.len()`.
/// A cargo-fuzz target is one line:
/// `fuzz_target!(|data: &[u8]| { let _ = kiln_gguf::parse(data); });`
pub fn parse(bytes: &[u8]) -> Result<GgufFile> {
    GgufFile::from_bytes(bytes.to_vec())
}

impl GgufFile {
    /// Memory-maps and validates the file at `path`. Errors name the file.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let io = |source| GgufError::Io { path: path.to_path_buf(), source };
        let file = File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        let storage = if len == 0 {
            // Mapping an empty file fails on some platforms; it is malformed anyway.
            Storage::Owned(Vec::new())
        } else {
            // SAFETY: the mapping is read-only and private to this process.
            // As with every mmap of a file, another process truncating or
            // rewriting the file while it is mapped breaks the assumption
            // that the bytes do not change; model files are not edited in
            // place while a server reads them, which is the accepted
            // contract of every mmap-based model loader.
            let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
            Storage::Mapped(map)
        };
        Self::build(storage, Some(path.to_path_buf())).map_err(|e| e.with_path(path))
    }

    /// Validates an in-memory GGUF file (tests, fuzzing, downloads).
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self> {
        Self::build(Storage::Owned(bytes), None)
    }

    fn build(storage: Storage, path: Option<PathBuf>) -> Result<Self> {
        let bytes = storage.bytes();
        let header = read_header(bytes)?;
        let alignment = read_alignment(&header.metadata)?;
        let data_start =
            align_up(header.end, alignment).ok_or_else(|| GgufError::malformed("data section offset overflows"))?;
        let layout = DataLayout { data_start, alignment: alignment.into(), file_len: bytes.len() };
        let tensors = validate_tensors(header.tensors, layout)?;
        let by_name = tensors.iter().enumerate().map(|(i, t)| (t.name.clone(), i)).collect();
        let inner = Inner {
            storage,
            path,
            version: header.version,
            metadata: header.metadata,
            tensors,
            by_name,
            alignment,
            data_start,
        };
        Ok(Self { inner: Arc::new(inner) })
    }

    /// The GGUF version (2 or 3).
    pub fn version(&self) -> u32 {
        self.inner.version
    }

    /// The metadata, in file order.
    pub fn metadata(&self) -> &Metadata {
        &self.inner.metadata
    }

    /// All tensor infos, in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.inner.tensors
    }

    /// The tensor called `name`.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.inner.by_name.get(name).and_then(|&i| self.inner.tensors.get(i))
    }

    /// The raw bytes of a tensor, borrowed from the mapping (no copy).
    ///
    /// `info` must come from this file; for an info of another file the
    /// result is empty when its range does not fit this file.
    pub fn tensor_data(&self, info: &TensorInfo) -> &[u8] {
        self.inner.storage.bytes().get(info.data_range()).unwrap_or(&[])
    }

    /// The raw bytes of a tensor as an owned handle that keeps the file
    /// mapped (for weights that outlive the `GgufFile` value).
    pub fn tensor_bytes_arc(&self, info: &TensorInfo) -> TensorBytes {
        let range = info.data_range();
        let fits = range.end <= self.file_size();
        TensorBytes {
            file: self.clone(),
            start: if fits { range.start } else { 0 },
            len: if fits { range.len() } else { 0 },
        }
    }

    /// The path given to [`GgufFile::open`]; `None` for in-memory files.
    pub fn path(&self) -> Option<&Path> {
        self.inner.path.as_deref()
    }

    /// The data alignment in bytes (`general.alignment`, default 32).
    pub fn alignment(&self) -> u32 {
        self.inner.alignment
    }

    /// Whether the file is memory-mapped (rather than held in a buffer).
    pub fn is_mapped(&self) -> bool {
        matches!(self.inner.storage, Storage::Mapped(_))
    }

    /// Absolute file offset of the data section.
    pub fn data_offset(&self) -> usize {
        self.inner.data_start
    }

    /// Size of the whole file in bytes.
    pub fn file_size(&self) -> usize {
        self.inner.storage.bytes().len()
    }

    /// The whole file.
    pub fn as_bytes(&self) -> &[u8] {
        self.inner.storage.bytes()
    }
}

fn read_alignment(metadata: &Metadata) -> Result<u32> {
    let alignment =
        metadata.opt_u32(ALIGNMENT_KEY).map_err(|e| GgufError::malformed(e.to_string()))?.unwrap_or(DEFAULT_ALIGNMENT);
    if !alignment.is_power_of_two() {
        return Err(GgufError::malformed(format!("{ALIGNMENT_KEY} is {alignment}; it must be a nonzero power of two")));
    }
    Ok(alignment)
}

pub(crate) fn align_up(pos: usize, alignment: u32) -> Option<usize> {
    let a = usize::try_from(alignment).ok().filter(|&a| a > 0)?;
    pos.checked_add(a - 1).map(|p| p / a * a)
}

/// A tensor's bytes that keep their [`GgufFile`] (and its mapping) alive.
#[derive(Clone)]
pub struct TensorBytes {
    file: GgufFile,
    start: usize,
    len: usize,
}

impl TensorBytes {
    /// The file these bytes belong to.
    pub fn file(&self) -> &GgufFile {
        &self.file
    }
}

impl Deref for TensorBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.file.as_bytes().get(self.start..self.start + self.len).unwrap_or(&[])
    }
}

impl AsRef<[u8]> for TensorBytes {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl std::fmt::Debug for TensorBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TensorBytes({}..{})", self.start, self.start + self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn align_up_rounds() {
        assert_eq!(align_up(0, 32), Some(0));
        assert_eq!(align_up(1, 32), Some(32));
        assert_eq!(align_up(64, 32), Some(64));
        assert_eq!(align_up(usize::MAX, 32), None);
    }

    #[test]
    fn handles_are_shareable_across_threads() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<GgufFile>();
        assert_send_sync::<TensorBytes>();
    }

    #[test]
    fn foreign_tensor_info_gives_empty_data() {
        let mut w = crate::GgufWriter::new();
        w.add_f32_tensor("big", &[64], &[0.0; 64]).unwrap();
        let big = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
        let small = parse(&crate::GgufWriter::new().to_bytes().unwrap()).unwrap();
        let info = big.tensor("big").unwrap();
        assert_eq!(big.tensor_data(info).len(), 256);
        assert!(small.tensor_data(info).is_empty());
        assert!(small.tensor_bytes_arc(info).is_empty());
    }

    #[test]
    fn empty_and_garbage_are_errors() {
        assert!(parse(&[]).unwrap_err().to_string().contains("not a GGUF file"));
        assert!(parse(b"GGML\x03\0\0\0").unwrap_err().to_string().contains("not a GGUF file"));
    }
}
