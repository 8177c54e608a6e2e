//! LoRA adapters (Hu et al., 2021, arXiv:2106.09685): low-rank deltas
//! `ΔW = scale·B·A` of a model's projections, read from a PEFT directory
//! (`adapter_config.json` + `adapter_model.safetensors`, [`peft`]) or a
//! llama.cpp GGUF LoRA file ([`gguf`]), checked against the model's
//! shapes, and handed to a backend unmerged ([`attach_block`]) or merged
//! into the weights at load ([`merge::MergedSource`]).
//!
//! The adapter's own scale (`alpha/r`, or `alpha/√r` with rsLoRA) is
//! folded into `B`, so a backend only sees a request's scale on top.
//!
//! A file's factors stay in its mapped bytes until they are attached
//! ([`LoraTarget::File`]) and are converted to `f32` one projection at a
//! time: converting a whole adapter at read would fault in its `f32` size
//! in fresh pages, most of a load's time (a rank-16 adapter of SmolLM2-135M
//! is 19.6 MB in `f32`).

pub mod gguf;
pub mod merge;
pub mod peft;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};
use kiln_backend::{Backend, LoraFactors};
use kiln_gguf::GgmlType;
use kiln_kernels::ops::RopeStyle;

use crate::config::ModelConfig;
use crate::error::{ModelError, Result};
use crate::weights::SharedBytes;

/// The projections an adapter may target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Proj {
    /// `q_proj` / `attn_q`.
    Q,
    /// `k_proj` / `attn_k`.
    K,
    /// `v_proj` / `attn_v`.
    V,
    /// `o_proj` / `attn_output`.
    O,
    /// `gate_proj` / `ffn_gate`.
    Gate,
    /// `up_proj` / `ffn_up`.
    Up,
    /// `down_proj` / `ffn_down`.
    Down,
}

impl Proj {
    /// Every projection.
    pub const ALL: [Proj; 7] = [Proj::Q, Proj::K, Proj::V, Proj::O, Proj::Gate, Proj::Up, Proj::Down];

    /// The GGUF tensor stem (`blk.N.<stem>.weight`).
    pub fn gguf_stem(self) -> &'static str {
        match self {
            Proj::Q => "attn_q",
            Proj::K => "attn_k",
            Proj::V => "attn_v",
            Proj::O => "attn_output",
            Proj::Gate => "ffn_gate",
            Proj::Up => "ffn_up",
            Proj::Down => "ffn_down",
        }
    }
    /// The Hugging Face module name (`self_attn.q_proj`, `mlp.up_proj`).
    pub fn hf_module(self) -> &'static str {
        match self {
            Proj::Q => "self_attn.q_proj",
            Proj::K => "self_attn.k_proj",
            Proj::V => "self_attn.v_proj",
            Proj::O => "self_attn.o_proj",
            Proj::Gate => "mlp.gate_proj",
            Proj::Up => "mlp.up_proj",
            Proj::Down => "mlp.down_proj",
        }
    }
    fn from_gguf_stem(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.gguf_stem() == s)
    }
    fn from_hf_leaf(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.hf_module().rsplit('.').next() == Some(s))
    }
    /// (rows, cols) of the projection in a model of `cfg`.
    pub fn shape(self, cfg: &ModelConfig) -> (usize, usize) {
        let (d, ff, q, kv) = (cfg.hidden_size, cfg.intermediate_size, cfg.q_dim(), cfg.kv_dim());
        match self {
            Proj::Q => (q, d),
            Proj::K | Proj::V => (kv, d),
            Proj::O => (d, q),
            Proj::Gate | Proj::Up => (ff, d),
            Proj::Down => (d, ff),
        }
    }
}

/// An adapter read from disk and checked against one model: factors per
/// (layer, projection), with the adapter's scale folded into `B`.
#[derive(Debug, Clone)]
pub struct LoraAdapter {
    /// Where it was read from.
    pub path: PathBuf,
    /// `peft` or `gguf`.
    pub format: &'static str,
    /// The highest rank of its factors.
    pub rank: usize,
    /// The factors.
    pub targets: BTreeMap<(usize, Proj), LoraTarget>,
}

/// One factor as its file holds it: row-major values of `ty` (checked to
/// be whole rows), in the file's mapped bytes.
#[derive(Debug, Clone)]
pub(crate) struct RawFactor {
    pub(crate) ty: GgmlType,
    pub(crate) bytes: SharedBytes,
}

/// One projection's factors.
#[derive(Debug, Clone)]
pub enum LoraTarget {
    /// In `f32` (stacked adapters, tests).
    Ready(LoraFactors),
    /// As a file holds them, checked; converted when asked for.
    File(FileFactors),
}

/// A projection's factors in a file's bytes, with what converting them
/// takes: the scale to fold into `B`, and whether `B`'s Q/K rows change
/// order (to llama.cpp's converter order when `to_pairs`).
#[derive(Debug, Clone)]
pub struct FileFactors {
    rank: usize,
    rows: usize,
    cols: usize,
    a: RawFactor,
    b: RawFactor,
    scale: f32,
    /// `(heads, head_dim, to_pairs)` when `B`'s rows are reordered.
    permute: Option<(usize, usize, bool)>,
    /// The tensors' name, for messages.
    name: String,
}

impl LoraTarget {
    /// The factors' rank.
    pub fn rank(&self) -> usize {
        match self {
            Self::Ready(f) => f.rank,
            Self::File(f) => f.rank,
        }
    }

    /// The factors in `f32` (converted now for a file's; `path` names the
    /// file in errors).
    pub fn factors(&self, path: &Path) -> Result<Cow<'_, LoraFactors>> {
        let f = match self {
            Self::Ready(f) => return Ok(Cow::Borrowed(f)),
            Self::File(f) => f,
        };
        let a = to_f32(path, &f.name, f.a.ty, f.a.bytes.as_slice(), f.cols)?;
        let mut b = to_f32(path, &f.name, f.b.ty, f.b.bytes.as_slice(), f.rank)?;
        b.iter_mut().for_each(|v| *v *= f.scale);
        if let Some((heads, head_dim, to_pairs)) = f.permute {
            b = permute_rows(&b, f.rank, heads, head_dim, to_pairs);
        }
        Ok(Cow::Owned(LoraFactors { rank: f.rank, a, b }))
    }
}

/// One pair of factors as a file holds it, before checks: `A` (`r × cols`)
/// and `B` (`rows × r`) with their shapes.
pub(crate) struct FilePair {
    pub(crate) a: Option<(Vec<usize>, RawFactor)>,
    pub(crate) b: Option<(Vec<usize>, RawFactor)>,
    /// Tensor names, for messages.
    pub(crate) name: String,
}

impl LoraAdapter {
    /// Reads a PEFT directory or a GGUF LoRA file and checks it against a
    /// model of `cfg`.
    pub fn load(path: &Path, cfg: &ModelConfig) -> Result<Self> {
        if path.is_dir() {
            peft::read(path, cfg)
        } else if path.is_file() {
            gguf::read(path, cfg)
        } else {
            Err(lora_err(path, "no such file or directory (a PEFT directory or a GGUF LoRA file)"))
        }
    }

    /// The factors of `proj` in `layer`, in `f32`.
    pub fn get(&self, layer: usize, proj: Proj) -> Result<Option<Cow<'_, LoraFactors>>> {
        self.targets.get(&(layer, proj)).map(|t| t.factors(&self.path)).transpose()
    }

    /// Bytes of its factors in `f32`.
    pub fn bytes(&self) -> usize {
        let n = |t: &LoraTarget| match t {
            LoraTarget::Ready(f) => f.a.len() + f.b.len(),
            LoraTarget::File(f) => f.rank * (f.cols + f.rows),
        };
        self.targets.values().map(|t| 4 * n(t)).sum()
    }

    /// Several adapters applied together, each at its scale: their ranks
    /// concatenated (`A = [A₁; A₂]`, `B = [s₁B₁ | s₂B₂]`), which equals the
    /// sum of their deltas.
    pub fn stack(list: &[(&LoraAdapter, f32)]) -> Result<Self> {
        let Some(first) = list.first() else {
            return Err(ModelError::Config("no adapters to stack".into()));
        };
        if let [(one, s)] = list {
            if *s == 1.0 {
                return Ok((*one).clone());
            }
        }
        let mut keys: Vec<(usize, Proj)> = list.iter().flat_map(|(a, _)| a.targets.keys().copied()).collect();
        keys.sort();
        keys.dedup();
        let mut targets = BTreeMap::new();
        for key in keys {
            let mut parts: Vec<(Cow<'_, LoraFactors>, f32)> = Vec::new();
            for (ad, s) in list {
                if let Some(f) = ad.get(key.0, key.1)? {
                    parts.push((f, *s));
                }
            }
            let rank: usize = parts.iter().map(|p| p.0.rank).sum();
            let (rows, cols) = (parts[0].0.rows(), parts[0].0.cols());
            let mut a = Vec::with_capacity(rank * cols);
            let mut b = vec![0f32; rows * rank];
            let mut at = 0;
            for (f, s) in &parts {
                let s = *s;
                a.extend_from_slice(&f.a);
                for o in 0..rows {
                    for r in 0..f.rank {
                        b[o * rank + at + r] = s * f.b[o * f.rank + r];
                    }
                }
                at += f.rank;
            }
            targets.insert(key, LoraTarget::Ready(LoraFactors { rank, a, b }));
        }
        let rank = targets.values().map(LoraTarget::rank).max().unwrap_or(0);
        Ok(Self { path: first.0.path.clone(), format: first.0.format, rank, targets })
    }

    /// Builds an adapter from file pairs keyed by (layer, projection):
    /// checks both factors are there with shapes that fit `cfg`, folds
    /// `scale(rank)` into `B`, and permutes `B`'s Q/K rows when the file's
    /// row order (`permuted`: llama.cpp's converter order for llama GGUFs)
    /// differs from the model's.
    pub(crate) fn from_pairs(
        path: &Path,
        format: &'static str,
        cfg: &ModelConfig,
        pairs: BTreeMap<(usize, Proj), FilePair>,
        scale: &dyn Fn(usize) -> f32,
        permuted: bool,
    ) -> Result<Self> {
        if pairs.is_empty() {
            return Err(lora_err(path, "no LoRA tensors found"));
        }
        let model_permuted = cfg.rope_style == RopeStyle::Normal;
        let mut targets = BTreeMap::new();
        for ((layer, proj), p) in pairs {
            let name = &p.name;
            if layer >= cfg.num_layers {
                return Err(lora_err(path, &format!("{name}: layer {layer}, but the model has {}", cfg.num_layers)));
            }
            let (Some((ad, a)), Some((bd, b))) = (p.a, p.b) else {
                return Err(lora_err(path, &format!("{name}: only one of the two factors (A, B) is present")));
            };
            let (rows, cols) = proj.shape(cfg);
            let rank = ad.first().copied().unwrap_or(0);
            if ad.len() != 2 || ad[1] != cols || rank == 0 {
                return Err(lora_err(
                    path,
                    &format!("{name}: A has shape {ad:?}, the model's {proj:?} projection needs [rank, {cols}]"),
                ));
            }
            if bd != [rows, rank] {
                return Err(lora_err(
                    path,
                    &format!("{name}: B has shape {bd:?}, the model's {proj:?} projection needs [{rows}, {rank}] (rank {rank} from A)"),
                ));
            }
            check_rows(path, name, &a, (rank, cols))?;
            check_rows(path, name, &b, (rows, rank))?;
            let permute = (permuted != model_permuted && matches!(proj, Proj::Q | Proj::K)).then(|| {
                let heads = if proj == Proj::Q { cfg.num_heads } else { cfg.num_kv_heads };
                (heads, cfg.head_dim, model_permuted)
            });
            let f = FileFactors { rank, rows, cols, a, b, scale: scale(rank), permute, name: name.clone() };
            targets.insert((layer, proj), LoraTarget::File(f));
        }
        let rank = targets.values().map(LoraTarget::rank).max().unwrap_or(0);
        Ok(Self { path: path.to_path_buf(), format, rank, targets })
    }
}

/// Reorders the rows (`width` values each) of a Q or K matrix between
/// Hugging Face's order (rotary halves) and llama.cpp's converter order
/// (rotary pairs): `to_pairs` maps HF row `h·d + s·d/2 + i` to
/// `h·d + 2i + s`, and back otherwise.
pub fn permute_rows(m: &[f32], width: usize, heads: usize, head_dim: usize, to_pairs: bool) -> Vec<f32> {
    let mut out = m.to_vec();
    let half = head_dim / 2;
    for h in 0..heads {
        for s in 0..2 {
            for i in 0..half {
                let hf = h * head_dim + s * half + i;
                let pairs = h * head_dim + 2 * i + s;
                let (from, to) = if to_pairs { (hf, pairs) } else { (pairs, hf) };
                out[to * width..(to + 1) * width].copy_from_slice(&m[from * width..(from + 1) * width]);
            }
        }
    }
    out
}

/// Attaches adapter `id`'s factors of `layer` to the layer's matrices:
/// `[qkv, o, gate_up, down]`, whose parts are (Q, K, V), (O), (gate, up),
/// (down).
pub fn attach_block<B: Backend>(
    be: &mut B,
    id: u32,
    ad: &LoraAdapter,
    layer: usize,
    mats: [Option<&B::Matrix>; 4],
) -> Result<()> {
    const PARTS: [&[Proj]; 4] = [&[Proj::Q, Proj::K, Proj::V], &[Proj::O], &[Proj::Gate, Proj::Up], &[Proj::Down]];
    for (m, projs) in mats.into_iter().zip(PARTS) {
        // Converted one matrix at a time: its f32 copies are freed (and
        // their pages reused) before the next.
        let owned: Vec<Option<Cow<'_, LoraFactors>>> =
            projs.iter().map(|&p| ad.get(layer, p)).collect::<Result<_>>()?;
        let parts: Vec<Option<&LoraFactors>> = owned.iter().map(Option::as_deref).collect();
        if parts.iter().any(Option::is_some) {
            let Some(m) = m else {
                // A mixture-of-experts block has no single gate/up/down.
                return Err(ModelError::Config(format!(
                    "layer {layer}: LoRA factors for the feed-forward projections of a mixture-of-experts block are not supported (attention projections are)"
                )));
            };
            be.lora_attach(m, id, &parts)?;
        }
    }
    Ok(())
}

pub(crate) fn lora_err(path: &Path, msg: &str) -> ModelError {
    ModelError::Lora { path: path.to_path_buf(), msg: msg.to_string() }
}

/// Checks that `f`'s bytes are `rows` rows of `cols` values of its type.
fn check_rows(path: &Path, name: &str, f: &RawFactor, (rows, cols): (usize, usize)) -> Result<()> {
    let bad = |m: String| lora_err(path, &format!("{name}: {m}"));
    let rb = f.ty.row_bytes(cols).ok_or_else(|| bad(format!("{cols} columns do not fit {} blocks", f.ty)))?;
    if rows.checked_mul(rb) != Some(f.bytes.as_slice().len()) {
        return Err(bad(format!("{} bytes are not {rows} rows of {cols} {}", f.bytes.as_slice().len(), f.ty)));
    }
    Ok(())
}

/// `n / 2` little-endian 16-bit floats of `bytes` as f32, by `convert`
/// (half's slice conversion, F16C where the CPU has it) over their bits:
/// the bytes read in place when aligned (little-endian hosts), else copied.
fn halves_to_f32(bytes: &[u8], convert: impl Fn(&[u16], &mut [f32])) -> Vec<f32> {
    // SAFETY: any bit pattern is a u16; align_to only returns a middle part
    // that is aligned for it.
    let (head, mid, tail) = unsafe { bytes.align_to::<u16>() };
    let copied: Vec<u16>;
    let bits = if cfg!(target_endian = "little") && head.is_empty() && tail.is_empty() {
        mid
    } else {
        copied = bytes.chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]])).collect();
        &copied
    };
    let mut out = vec![0f32; bits.len()];
    convert(bits, &mut out);
    out
}

/// Element values of a tensor of GGUF type `ty` as `f32` (`cols` per row).
pub(crate) fn to_f32(path: &Path, name: &str, ty: kiln_gguf::GgmlType, bytes: &[u8], cols: usize) -> Result<Vec<f32>> {
    let bad = |m: String| lora_err(path, &format!("{name}: {m}"));
    let rb = ty.row_bytes(cols).ok_or_else(|| bad(format!("{cols} columns do not fit {ty} blocks")))?;
    if rb == 0 || !bytes.len().is_multiple_of(rb) {
        return Err(bad(format!("{} bytes are not whole rows of {cols} {ty}", bytes.len())));
    }
    // Float factors convert in one pass (per-row dequantization calls a
    // function per element), 16-bit ones with half's slice conversion (F16C
    // where the CPU has it) when the bytes are aligned.
    match ty {
        kiln_gguf::GgmlType::F32 => {
            return Ok(bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect())
        }
        kiln_gguf::GgmlType::F16 => {
            return Ok(halves_to_f32(bytes, |b, o| b.reinterpret_cast::<half::f16>().convert_to_f32_slice(o)))
        }
        kiln_gguf::GgmlType::BF16 => {
            return Ok(halves_to_f32(bytes, |b, o| b.reinterpret_cast::<half::bf16>().convert_to_f32_slice(o)))
        }
        _ => {}
    }
    let rows = bytes.len() / rb;
    let mut out = vec![0f32; rows * cols];
    for (r, o) in out.chunks_exact_mut(cols).enumerate() {
        kiln_kernels::quant::dequantize_row(ty, &bytes[r * rb..(r + 1) * rb], o).map_err(|e| bad(e.to_string()))?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// F16 and BF16 factors read in place (aligned bytes) and copied
    /// (unaligned) agree with `half`'s own conversion of each value.
    #[test]
    fn halves_convert_aligned_or_not() {
        let path = Path::new("t.gguf");
        let vals: Vec<f32> = (0..37).map(|i| (i as f32 - 18.0) * 0.37).collect();
        let f16s: Vec<u8> = vals.iter().flat_map(|&v| half::f16::from_f32(v).to_le_bytes()).collect();
        let bf16s: Vec<u8> = vals.iter().flat_map(|&v| half::bf16::from_f32(v).to_le_bytes()).collect();
        let want16: Vec<f32> = vals.iter().map(|&v| half::f16::from_f32(v).to_f32()).collect();
        let wantb: Vec<f32> = vals.iter().map(|&v| half::bf16::from_f32(v).to_f32()).collect();
        for shift in [0, 1] {
            let mut buf = vec![0u8; shift];
            buf.extend_from_slice(&f16s);
            let got16 = to_f32(path, "t", GgmlType::F16, &buf[shift..], vals.len()).unwrap();
            assert_eq!(got16, want16, "f16, shift {shift}");
            let mut buf = vec![0u8; shift];
            buf.extend_from_slice(&bf16s);
            let gotb = to_f32(path, "t", GgmlType::BF16, &buf[shift..], vals.len()).unwrap();
            assert_eq!(gotb, wantb, "bf16, shift {shift}");
        }
    }
}
