//! Hugging Face directories: `config.json` + `*.safetensors` (sharded or not).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use kiln_kernels::GgmlType;
use memmap2::Mmap;

use super::{hf_encoder_names, hf_name, TensorSource};
use crate::config::Arch;
use crate::error::{ModelError, Result};
use crate::weights::{RawTensor, SharedBytes};

struct MmapBytes(Mmap);
impl AsRef<[u8]> for MmapBytes {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

struct Entry {
    file: usize,
    ty: GgmlType,
    dims: Vec<usize>,
    start: usize,
    len: usize,
}

/// All tensors of the `*.safetensors` files of a directory.
pub struct SafetensorsSource {
    dir: PathBuf,
    arch: Arch,
    files: Vec<Arc<MmapBytes>>,
    entries: HashMap<String, Entry>,
    /// Tensors of element types kiln does not read, with their type.
    skipped: HashMap<String, String>,
}

impl SafetensorsSource {
    /// Opens every `*.safetensors` file in `dir` (headers validated by the
    /// `safetensors` crate; offsets checked against each file's size), a
    /// checkpoint of `arch` (its tensor names and quirks).
    pub fn open(dir: &Path, arch: Arch) -> Result<Self> {
        let io = |e| ModelError::Io { path: dir.to_path_buf(), source: e };
        let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(io)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
            .collect();
        paths.sort();
        if paths.is_empty() {
            return Err(ModelError::Format { path: dir.to_path_buf(), msg: "no *.safetensors files".into() });
        }
        let mut files = Vec::new();
        let mut entries = HashMap::new();
        let mut skipped = HashMap::new();
        for p in paths {
            let f = std::fs::File::open(&p).map_err(|e| ModelError::Io { path: p.clone(), source: e })?;
            // SAFETY: the file is mapped read-only; kiln never writes it and
            // documents that model files must not change while loaded.
            let map = unsafe { Mmap::map(&f) }.map_err(|e| ModelError::Io { path: p.clone(), source: e })?;
            let bad = |msg: String| ModelError::Format { path: p.clone(), msg };
            let (header_len, meta) = ::safetensors::SafeTensors::read_metadata(&map).map_err(|e| bad(e.to_string()))?;
            let base = 8 + header_len;
            for (name, info) in meta.tensors() {
                let ty = match info.dtype {
                    ::safetensors::Dtype::F32 => GgmlType::F32,
                    ::safetensors::Dtype::F16 => GgmlType::F16,
                    ::safetensors::Dtype::BF16 => GgmlType::BF16,
                    // Integer buffers (BERT's `position_ids`) are not
                    // weights; a model that asks for one gets this error.
                    other => {
                        skipped.insert(name.clone(), format!("{other:?}"));
                        continue;
                    }
                };
                let (s, e) = info.data_offsets;
                let start = base.checked_add(s).ok_or_else(|| bad(format!("tensor '{name}': offset overflow")))?;
                let len = e.checked_sub(s).ok_or_else(|| bad(format!("tensor '{name}': negative length")))?;
                if start.checked_add(len).is_none_or(|end| end > map.len()) {
                    return Err(bad(format!("tensor '{name}': data past the end of the file")));
                }
                let dims: Vec<usize> = info.shape.iter().rev().copied().collect();
                if entries.insert(name.clone(), Entry { file: files.len(), ty, dims, start, len }).is_some() {
                    return Err(bad(format!("tensor '{name}' appears in more than one file")));
                }
            }
            files.push(Arc::new(MmapBytes(map)));
        }
        Ok(Self { dir: dir.to_path_buf(), arch, files, entries, skipped })
    }
}

impl TensorSource for SafetensorsSource {
    fn get(&self, name: &str) -> Result<Option<RawTensor>> {
        let names = if self.arch.is_encoder() {
            hf_encoder_names(name)
        } else {
            hf_name(name, self.arch).into_iter().collect()
        };
        let Some((hf, e)) = names.iter().find_map(|n| self.entries.get(n).map(|e| (n.clone(), e))) else {
            if let Some((n, ty)) = names.iter().find_map(|n| self.skipped.get(n).map(|t| (n, t))) {
                return Err(ModelError::Format {
                    path: self.dir.clone(),
                    msg: format!("tensor '{n}': dtype {ty} is not supported (F32, F16, BF16 are)"),
                });
            }
            return Ok(None);
        };
        let owner: Arc<dyn AsRef<[u8]> + Send + Sync> = self.files[e.file].clone();
        let bytes = SharedBytes::new(owner, e.start, e.len)
            .ok_or_else(|| ModelError::Format { path: self.dir.clone(), msg: format!("tensor '{hf}' out of range") })?
            .with_mapped(true);
        let t = RawTensor { ty: e.ty, dims: e.dims.clone(), bytes };
        if self.arch == Arch::Gemma3 && name.ends_with("norm.weight") {
            // Gemma's checkpoints store w of the norms' (1 + w); GGUF
            // converters add the one, and so does this, once, here.
            let n = t.dims.iter().product();
            let plus_one: Vec<u8> =
                crate::weights::vector_f32(name, &t, n)?.into_iter().flat_map(|v| (v + 1.0).to_le_bytes()).collect();
            return Ok(Some(RawTensor { ty: GgmlType::F32, dims: t.dims, bytes: SharedBytes::from_vec(plus_one) }));
        }
        Ok(Some(t))
    }
    fn path(&self) -> &Path {
        &self.dir
    }
}
