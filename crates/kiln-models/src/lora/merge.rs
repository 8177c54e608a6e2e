//! `--lora-merge`: an adapter added into the weights at load,
//! `W' = W + B·A` (the scales already in `B`), so a single-adapter
//! deployment runs at the base model's speed with no per-step deltas.
//! A merged matrix is dequantized and kept in `f32`.

use std::path::Path;

use kiln_gguf::GgmlType;

use super::{LoraAdapter, Proj};
use crate::error::Result;
use crate::loader::TensorSource;
use crate::weights::{RawTensor, SharedBytes};

/// A tensor source whose targeted projections come out merged.
pub struct MergedSource {
    inner: Box<dyn TensorSource>,
    adapter: LoraAdapter,
}

impl MergedSource {
    /// `inner`'s tensors with `adapter` (already stacked and scaled) merged.
    pub fn new(inner: Box<dyn TensorSource>, adapter: LoraAdapter) -> Self {
        Self { inner, adapter }
    }
}

fn target(name: &str) -> Option<(usize, Proj)> {
    let (layer, stem) = name.strip_prefix("blk.")?.strip_suffix(".weight")?.split_once('.')?;
    Some((layer.parse().ok()?, Proj::ALL.into_iter().find(|p| p.gguf_stem() == stem)?))
}

impl TensorSource for MergedSource {
    fn get(&self, name: &str) -> Result<Option<RawTensor>> {
        let Some(t) = self.inner.get(name)? else { return Ok(None) };
        let f = match target(name) {
            Some((l, p)) => self.adapter.get(l, p)?,
            None => None,
        };
        let Some(f) = f else { return Ok(Some(t)) };
        let (cols, rows) = (t.dims.first().copied().unwrap_or(0), t.dims.get(1).copied().unwrap_or(0));
        if t.dims.len() != 2 || f.rows() != rows || f.cols() != cols {
            return Err(super::lora_err(&self.adapter.path, &format!("{name}: the factors do not fit {:?}", t.dims)));
        }
        let mut w = super::to_f32(self.inner.path(), name, t.ty, t.bytes.as_slice(), cols)?;
        for (o, row) in w.chunks_exact_mut(cols).enumerate() {
            for r in 0..f.rank {
                let b = f.b[o * f.rank + r];
                for (v, a) in row.iter_mut().zip(&f.a[r * cols..(r + 1) * cols]) {
                    *v += b * a;
                }
            }
        }
        let bytes: Vec<u8> = w.iter().flat_map(|v| v.to_le_bytes()).collect();
        Ok(Some(RawTensor { ty: GgmlType::F32, dims: t.dims, bytes: SharedBytes::from_vec(bytes) }))
    }
    fn path(&self) -> &Path {
        self.inner.path()
    }
}
