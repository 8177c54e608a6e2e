//! What a model hands a backend at load time: host weights, how a matrix
//! is used, and the rotary table's parameters. Nothing here names a tensor
//! or a model family.

use kiln_gguf::GgmlType;

use crate::bytes::SharedBytes;
use crate::{BackendError, Result};

/// A 2-D weight in host memory: `rows` output features of `cols` inputs in
/// any GGUF element type, its bytes checked to match the shape.
#[derive(Debug, Clone)]
pub struct HostWeight {
    ty: GgmlType,
    rows: usize,
    cols: usize,
    bytes: SharedBytes,
}

impl HostWeight {
    /// Wraps `bytes` as a `rows × cols` matrix of `ty`; `name` is only for
    /// the error message.
    pub fn new(name: &str, ty: GgmlType, rows: usize, cols: usize, bytes: SharedBytes) -> Result<Self> {
        let bad = |msg: String| BackendError::Weight(format!("tensor '{name}': {msg}"));
        let row_bytes = ty.row_bytes(cols).ok_or_else(|| bad(format!("{cols} columns do not fit {ty} blocks")))?;
        if row_bytes.checked_mul(rows) != Some(bytes.as_slice().len()) {
            return Err(bad(format!("{} bytes do not match {rows}x{cols} {ty}", bytes.as_slice().len())));
        }
        Ok(Self { ty, rows, cols, bytes })
    }
    /// Element type.
    pub fn ty(&self) -> GgmlType {
        self.ty
    }
    /// Output features.
    pub fn rows(&self) -> usize {
        self.rows
    }
    /// Input features.
    pub fn cols(&self) -> usize {
        self.cols
    }
    /// The bytes, row-major.
    pub fn bytes(&self) -> &SharedBytes {
        &self.bytes
    }
    /// Bytes of one row.
    pub fn row_bytes(&self) -> usize {
        self.ty.row_bytes(self.cols).unwrap_or(0)
    }
    /// The `count` matrices stacked in this one by rows (a 3-D GGUF expert
    /// tensor: expert `e` owns rows `e·rows/count..(e+1)·rows/count`), as
    /// views of the same bytes.
    pub fn split_rows(&self, count: usize) -> Result<Vec<HostWeight>> {
        if count == 0 || !self.rows.is_multiple_of(count) {
            return Err(BackendError::Weight(format!("{} rows do not split into {count} experts", self.rows)));
        }
        let rows = self.rows / count;
        let len = rows * self.row_bytes();
        (0..count)
            .map(|e| {
                let bytes = self.bytes.slice(e * len, len).ok_or_else(|| {
                    BackendError::Weight(format!(
                        "expert {e} lies outside its tensor's {} bytes",
                        self.bytes.as_slice().len()
                    ))
                })?;
                Ok(HostWeight { ty: self.ty, rows, cols: self.cols, bytes })
            })
            .collect()
    }
}

/// How the operations read a matrix, which decides how a backend may store
/// it (a GPU keeps the parts of a fused product in one buffer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatrixUse {
    /// One product (`y = W·x`): an output projection, a down projection.
    Linear,
    /// Q, K and V stacked (`parts` = [q, k, v]): one product whose output
    /// the attention input splits by head ([`crate::Backend::attn_in`]).
    Qkv,
    /// Gate and up stacked (`parts` = [gate, up], equal rows): the gated
    /// unit of [`crate::Backend::norm_glu`].
    GateUp,
    /// Rows looked up by token id; with `tied_head` also the output head
    /// (one matrix for both, as the file has it).
    Embedding {
        /// The same matrix is the output head.
        tied_head: bool,
    },
    /// The output head: logits of the sampled rows.
    Head,
    /// The experts of a mixture-of-experts block ([`crate::Backend::moe`]):
    /// each part stacks `count` experts' matrices by rows (as a 3-D GGUF
    /// tensor does), expert `e` owning rows `e·rows/count..(e+1)·rows/count`;
    /// parts [gate, up] for the gated unit, or one part (down). A bias
    /// (gpt-oss) covers the stacked rows as well: part by part, expert by
    /// expert, each expert's rows getting its own ([`crate::Feature::ExpertBias`]).
    Experts {
        /// Experts stacked in each part.
        count: usize,
    },
}

/// A matrix to place on the device: its parts stacked by rows (all of
/// `cols` inputs), with an optional bias over all the stacked rows.
#[derive(Debug, Clone)]
pub struct MatrixDesc {
    /// The parts, in order.
    pub parts: Vec<HostWeight>,
    /// `f32` bias, one per stacked row.
    pub bias: Option<Vec<f32>>,
    /// How the operations read it.
    pub usage: MatrixUse,
}

impl MatrixDesc {
    /// A one-part matrix.
    pub fn single(w: HostWeight, usage: MatrixUse) -> Self {
        Self { parts: vec![w], bias: None, usage }
    }
    /// Stacked rows.
    pub fn rows(&self) -> usize {
        self.parts.iter().map(HostWeight::rows).sum()
    }
    /// Inputs (shared by every part).
    pub fn cols(&self) -> usize {
        self.parts.first().map_or(0, HostWeight::cols)
    }
    /// Checks that the parts share their inputs, that the bias covers every
    /// row, and that the parts fit the use.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(BackendError::Weight(m));
        let cols = self.cols();
        if self.parts.is_empty() || self.parts.iter().any(|p| p.cols() != cols) {
            return bad(format!("a {:?} matrix of parts with different inputs", self.usage));
        }
        if let Some(b) = &self.bias {
            if b.len() != self.rows() {
                return bad(format!("a bias of {} for {} outputs", b.len(), self.rows()));
            }
        }
        let want = match self.usage {
            MatrixUse::Qkv => 3,
            MatrixUse::GateUp => 2,
            MatrixUse::Experts { count } => {
                if count == 0 || self.parts.iter().any(|p| !p.rows().is_multiple_of(count)) {
                    return bad(format!("expert parts whose rows do not split into {count} experts"));
                }
                if self.parts.len() > 2 {
                    return bad("experts take one or two parts".into());
                }
                self.parts.len()
            }
            _ => 1,
        };
        if self.parts.len() != want {
            return bad(format!("a {:?} matrix needs {want} parts, got {}", self.usage, self.parts.len()));
        }
        let gated = matches!(self.usage, MatrixUse::GateUp | MatrixUse::Experts { .. }) && self.parts.len() == 2;
        if gated && self.parts[0].rows() != self.parts[1].rows() {
            return bad("gate and up of different widths".into());
        }
        Ok(())
    }
}

/// Which dimensions of a head RoPE rotates together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeStyle {
    /// Adjacent pairs `(2i, 2i+1)`: GGUF llama-architecture files, whose
    /// Q/K weights were permuted by the converter.
    Normal,
    /// Halves `(i, i + d/2)`: Hugging Face checkpoints and GGUF Qwen2/Qwen3.
    Neox,
}

/// The rotary embedding of a model: which pairs, how many dimensions, the
/// frequencies, and the positions it must cover.
#[derive(Debug, Clone, PartialEq)]
pub struct RopeDesc {
    /// Pairing of dimensions.
    pub style: RopeStyle,
    /// Rotated dimensions (the head dimension for every family so far).
    pub rot_dim: usize,
    /// Base frequency.
    pub theta: f32,
    /// Positions `0..max_pos` are covered.
    pub max_pos: usize,
    /// Llama 3.1 frequency factors, one per pair (they divide the frequencies).
    pub freq_factors: Option<Vec<f32>>,
    /// Linear position scaling (1 = none).
    pub scale: f32,
    /// `cos` and `sin` are multiplied by this (YaRN's attention factor; 1 = none).
    pub attn_factor: f32,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32_weight(rows: usize, cols: usize) -> HostWeight {
        let bytes: Vec<u8> = (0..rows * cols).flat_map(|i| (i as f32).to_le_bytes()).collect();
        HostWeight::new("w", GgmlType::F32, rows, cols, SharedBytes::from_vec(bytes)).unwrap()
    }

    #[test]
    fn experts_split_into_views_of_their_rows() {
        let w = f32_weight(6, 4);
        let parts = w.split_rows(3).unwrap();
        assert_eq!(parts.len(), 3);
        for (e, p) in parts.iter().enumerate() {
            assert_eq!((p.rows(), p.cols()), (2, 4));
            let first = f32::from_le_bytes(p.bytes().as_slice()[..4].try_into().unwrap());
            assert_eq!(first, (e * 8) as f32);
        }
        assert!(w.split_rows(4).is_err());
        assert!(w.split_rows(0).is_err());
    }

    #[test]
    fn experts_matrices_are_validated() {
        let e = |parts: Vec<HostWeight>, count| MatrixDesc { parts, bias: None, usage: MatrixUse::Experts { count } };
        assert!(e(vec![f32_weight(6, 4), f32_weight(6, 4)], 3).validate().is_ok());
        assert!(e(vec![f32_weight(6, 4)], 2).validate().is_ok());
        assert!(e(vec![f32_weight(6, 4)], 4).validate().is_err(), "rows that do not split");
        assert!(e(vec![f32_weight(6, 4), f32_weight(3, 4)], 3).validate().is_err(), "gate and up differ");
        assert!(e(vec![f32_weight(6, 4); 3], 3).validate().is_err(), "three parts");
        let mut biased = e(vec![f32_weight(6, 4)], 3);
        biased.bias = Some(vec![0.0; 6]);
        assert!(biased.validate().is_ok(), "a bias per stacked row (each expert's own)");
        biased.bias = Some(vec![0.0; 2]);
        assert!(biased.validate().is_err(), "a bias of one expert's rows");
    }
}
