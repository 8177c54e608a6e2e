//! Weights repacked for the integer kernels: 16 rows interleaved per block.
//!
//! GGUF stores a matrix row by row, each row a run of 32-element blocks. For
//! the integer kernels kiln repacks `Q4_0`, `Q4_1`, `Q5_0`, `Q5_1` and `Q8_0` weights once,
//! at load time, so that one 64-byte vector holds 4 consecutive weights of
//! each of 16 rows: `vpdpbusd` against the same 4 activation bytes broadcast
//! to every lane then advances 16 row dot products at once, with no
//! horizontal sums and one scale multiply per 16 rows × 32 columns (instead
//! of one per row and block pair). Repacking does not change a single value.
//!
//! Layout: rows are taken in groups of [`PACK_ROWS`]; group `g`, block `b`
//! is one *group-block* of [`PackKind::group_block_bytes`] bytes at
//! `(g · blocks_per_row + b) · group_block_bytes`:
//!
//! | bytes | what |
//! | --- | --- |
//! | 32 | `d`: the 16 rows' block scales, `f16` |
//! | 32 | `m`: the 16 rows' block minimums, `f16` (`Q4_1`, `Q5_1` only) |
//! | 64 | `Q5_1` only: row `r`'s fifth bits at `4r`, bit `j` for element `j` (`u32`) |
//! | 64 | `S8x2` only: row `r`'s `128 · Σ d·v` over the block at `4r` (`f32`) |
//! | 4 × 64 (`Q4_x`, `Q5_1`) or 8 × 64 (`Q8_0`, `S8x2`) | quants, chunk `k` holding row `r`'s bytes `4k..4k+4` at `64k + 4r` |
//!
//! `S8x2` (from `Q6_K`) stores signed values with two scales, `d` for
//! values 0..16 and `m`'s slot for 16..32 (`Q6_K`'s scale groups are 16
//! values), and is multiplied the other way round: the activations, offset
//! to unsigned, are `vpdpbusd`'s unsigned operand.
//!
//! `Q4_x` and `Q5_1` chunks keep GGUF's nibble order (low nibble = element `j`, high =
//! `j + 16`, for byte `j`), so chunk `k` holds elements `4k..4k+4` in its low
//! nibbles and `16+4k..16+4k+4` in its high ones (`Q5_1`'s fifth bits apart). `Q8_0` values are stored
//! as `q + 128` (unsigned, as `vpdpbusd` wants its first operand).
//!
//! Every kind then computes `w = d · u + m` with `u` unsigned: `m` is stored
//! (`Q4_1`, `Q5_1`), or `-8 d` (`Q4_0`), or `-128 d` (`Q8_0`), so a row's dot product
//! with an activation block (`x ≈ dx · q`, block sum `s = dx · Σq`) is
//! `d · dx · Σ u·q + m · s`.
//!
//! `Q4_K` and `Q6_K` keep their super-blocks of 256 (kinds `Q4K` and
//! `Q6K`, 4.625 and 6.5625 bits per weight; layout in `packed_k`); the
//! forms of `Q4_1` and `S8x2` they took before remain, to measure against
//! ([`KForm`]).
//!
//! Float weights (`F16`, `BF16`, `F32`) are interleaved the same way without
//! scales: a group-block is 32 columns × 16 rows, column-major, so one
//! vector holds one column of 16 rows and a multiply-add with one broadcast
//! activation advances 16 row dot products.

use std::ops::Range;

use super::packed_k;
use super::scalar::decode_block;
use super::{Job, WeightView};
use crate::buf::AlignedBytes;
use crate::quant::{f16_at, KernelError};
use crate::GgmlType;

/// Rows per interleaved group.
pub const PACK_ROWS: usize = 16;
/// Elements per block.
const QK: usize = 32;

/// The form `Q4_K` and `Q6_K` weights are packed in ([`PackedRows::pack_with`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KForm {
    /// Their super-blocks of 256 ([`PackKind::Q4K`], [`PackKind::Q6K`]):
    /// the fewest bytes, so the fastest decode at every level
    /// (`examples/kquant-bench`); what models load.
    SuperBlocks,
    /// The forms of the 32-value kinds ([`PackKind::Q4_1`],
    /// [`PackKind::S8x2`]), kept to measure the super-block forms against.
    Blocks32,
}

/// The repacked formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PackKind {
    /// From `Q4_0`: 4-bit `u`, `m = -8 d`.
    Q4_0,
    /// From `Q4_1`: 4-bit `u`, stored `m`.
    Q4_1,
    /// From `Q5_1`, `Q5_0` (`m = -16 d`, exact in `f16`) and `Q5_K`: 5-bit `u`, stored `m`.
    Q5_1,
    /// From `Q8_0`: 8-bit `u = q + 128`, `m = -128 d`.
    Q8_0,
    /// From `Q6_K`: signed 8-bit values with a scale per 16 (two per 32),
    /// multiplied with the activations offset to unsigned (module docs).
    S8x2,
    /// From `Q4_K`: its 4-bit values, super-blocks of 256
    /// with `f16` `d` and `dmin` per row, 8-bit scales and minimums per 32
    /// (4.625 bits per weight; `packed_k`).
    Q4K,
    /// From `Q6_K`: its low 4-bit and high 2-bit planes,
    /// 8-bit scales per 16 values and `f16` `d` per row and super-block of
    /// 256 (6.5625 bits per weight, the file's size; `packed_k`).
    Q6K,
    /// From `F16`: values as they are.
    F16,
    /// From `BF16`: values as they are.
    BF16,
    /// From `F32`: values as they are.
    F32,
}

impl PackKind {
    /// The kind a GGUF type packs into, if any.
    pub fn of(ty: GgmlType) -> Option<Self> {
        match ty {
            GgmlType::Q4_0 => Some(Self::Q4_0),
            GgmlType::Q4_1 => Some(Self::Q4_1),
            GgmlType::Q5_0 | GgmlType::Q5_1 => Some(Self::Q5_1),
            GgmlType::Q8_0 => Some(Self::Q8_0),
            GgmlType::F16 => Some(Self::F16),
            GgmlType::BF16 => Some(Self::BF16),
            GgmlType::F32 => Some(Self::F32),
            _ => None,
        }
    }

    /// Whether the kind holds float values (no scales, no integer kernels).
    pub fn is_float(self) -> bool {
        matches!(self, Self::F16 | Self::BF16 | Self::F32)
    }

    /// Bytes per value of a float kind.
    fn float_size(self) -> usize {
        if self == Self::F32 {
            4
        } else {
            2
        }
    }

    /// Bytes of quants per group-block.
    pub(crate) fn quant_bytes(self) -> usize {
        match self {
            Self::Q4_0 | Self::Q4_1 | Self::Q5_1 | Self::Q4K => 4 * 64,
            Self::Q6K => 6 * 64,
            Self::Q8_0 | Self::S8x2 => 8 * 64,
            Self::F16 | Self::BF16 | Self::F32 => QK * PACK_ROWS * self.float_size(),
        }
    }

    /// Offset of the quants within a group-block.
    pub(crate) fn quant_offset(self) -> usize {
        match self {
            Self::Q5_1 | Self::S8x2 => 128,
            Self::Q4_1 => 64,
            Self::Q4_0 | Self::Q8_0 | Self::Q4K | Self::Q6K => 32,
            Self::F16 | Self::BF16 | Self::F32 => 0,
        }
    }

    /// Bytes of one group-block (16 rows × 32 columns; a super-block
    /// kind's header apart).
    pub fn group_block_bytes(self) -> usize {
        self.quant_offset() + self.quant_bytes()
    }

    /// Bytes of the header before each super-block's 8 group-blocks (the
    /// rows' `f16` scales per 256 columns); 0 for kinds without super-blocks.
    pub(crate) fn super_header(self) -> usize {
        match self {
            Self::Q4K => 64,
            Self::Q6K => 32,
            _ => 0,
        }
    }

    /// Offset of block `b`'s group-block within its group of 16 rows.
    #[inline(always)]
    pub(crate) fn block_at(self, b: usize) -> usize {
        let gbb = self.group_block_bytes();
        match self.super_header() {
            0 => b * gbb,
            h => self.header_at(b) + h + b % packed_k::BLOCKS * gbb,
        }
    }

    /// Offset of the header of the super-block holding block `b` (super-block kinds).
    #[inline(always)]
    pub(crate) fn header_at(self, b: usize) -> usize {
        b / packed_k::BLOCKS * (self.super_header() + packed_k::BLOCKS * self.group_block_bytes())
    }

    /// Bytes of one group of 16 rows of `nb` blocks.
    pub(crate) fn group_bytes(self, nb: usize) -> usize {
        nb * self.group_block_bytes() + nb / packed_k::BLOCKS * self.super_header()
    }

    /// Whether the kernels need the activations' sums per 16 values.
    pub(crate) fn needs_half_sums(self) -> bool {
        self == Self::Q6K
    }

    /// Whether a second `f16` per row follows `d`: `m` (`Q4_1`, `Q5_1`; the
    /// others imply it), or `S8x2`'s scale of its second 16 values.
    pub(crate) fn stores_m(self) -> bool {
        matches!(self, Self::Q4_1 | Self::Q5_1 | Self::S8x2)
    }

    /// `m / d` for kinds whose `m` is implied.
    pub(crate) fn implied_m(self) -> f32 {
        match self {
            Self::Q4_0 => -8.0,
            Self::Q8_0 => -128.0,
            _ => 0.0,
        }
    }
}

/// A weight matrix in the interleaved layout (see the module docs).
#[derive(Clone)]
pub struct PackedRows {
    kind: PackKind,
    ty: GgmlType,
    rows: usize,
    cols: usize,
    data: AlignedBytes,
}

impl std::fmt::Debug for PackedRows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PackedRows({:?}, {}x{})", self.kind, self.rows, self.cols)
    }
}

impl PackedRows {
    /// Repacks `w`, `Q4_K` and `Q6_K` in their super-block forms
    /// ([`KForm::SuperBlocks`]; see [`Self::pack_with`]).
    pub fn pack(w: WeightView<'_>) -> Option<Self> {
        Self::pack_with(w, KForm::SuperBlocks)
    }

    /// Repacks `w`, `Q4_K` and `Q6_K` in the form `form`; `None` when its
    /// type has no packed kind, or its rows are not a multiple of 16, or its
    /// block data does not match its shape. Every level's kernels compute
    /// every kind.
    ///
    /// [`KForm::SuperBlocks`]: `Q4_K` and `Q6_K` keep their super-blocks
    /// ([`PackKind::Q4K`], [`PackKind::Q6K`]: 4.625 and 6.5625 bits per
    /// weight). Otherwise, and `Q5_K` always, K-quants take the
    /// form of another kind ([`Self::kind`]; [`Self::ty`]
    /// still names the file's type): `Q4_K` becomes `Q4_1` (each 32-value block of a superblock is
    /// `a·q − b` with its own 6-bit scale and minimum: the same 4-bit
    /// values, `a` and `-b` rounded to `f16`, at most 2^-11 of the block's
    /// scale off), `Q5_K` likewise `Q5_1`, and `Q6_K` becomes `S8x2` (its
    /// signed values as bytes, its two scales per 32 values times `d`
    /// rounded to `f16`; 10 bits per weight instead of 6.56). Requantizing
    /// Q6_K to one 8-bit scale per 32 was tried and visibly hurt SmolLM2's
    /// generations. The scalar path converts every row to `f32` per
    /// product, over 10x slower.
    pub fn pack_with(w: WeightView<'_>, form: KForm) -> Option<Self> {
        if let Some(kind) = packed_k::kind_for(&w, form) {
            return Self::pack_super(w, kind);
        }
        if matches!(w.ty, GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K) {
            return Self::pack_k_quant(w);
        }
        let kind = PackKind::of(w.ty)?;
        let rb = packable_row_bytes(&w, QK)?;
        let nb = w.cols / QK;
        let gbb = kind.group_block_bytes();
        let len = (w.rows / PACK_ROWS).checked_mul(nb)?.checked_mul(gbb)?;
        let mut data = AlignedBytes::zeroed(len);
        let out = &mut data[..];
        let ts = w.ty.type_size();
        if kind.is_float() {
            let es = kind.float_size();
            par_groups(out, nb * gbb, &|g, og| {
                for lane in 0..PACK_ROWS {
                    let r = g * PACK_ROWS + lane;
                    for c in 0..w.cols {
                        let (b, cc) = (c / QK, c % QK);
                        let at = b * gbb + (cc * PACK_ROWS + lane) * es;
                        og[at..at + es].copy_from_slice(&w.data[r * rb + c * es..r * rb + (c + 1) * es]);
                    }
                }
            });
            return Some(Self { kind, ty: w.ty, rows: w.rows, cols: w.cols, data });
        }
        par_groups(out, nb * gbb, &|g, og| {
            for lane in 0..PACK_ROWS {
                let r = g * PACK_ROWS + lane;
                for b in 0..nb {
                    let src = &w.data[r * rb + b * ts..r * rb + (b + 1) * ts];
                    let gb = &mut og[b * gbb..][..gbb];
                    // The scales are f16 in the file, so they are stored bit
                    // for bit (Q5_0's implied m = -16 d too: a power-of-two
                    // multiple of an f16).
                    let (v, d, m) = decode_block(w.ty, src);
                    let flip = if kind == PackKind::Q8_0 { 0x80 } else { 0 };
                    write_block(kind, gb, lane, &v.map(|v| v as u8 ^ flip), d, m);
                }
            }
        });
        Some(Self { kind, ty: w.ty, rows: w.rows, cols: w.cols, data })
    }

    /// [`Self::pack_with`] into a super-block kind (`packed_k`).
    fn pack_super(w: WeightView<'_>, kind: PackKind) -> Option<Self> {
        let rb = packable_row_bytes(&w, packed_k::QKK)?;
        let nsb = w.cols / packed_k::QKK;
        let sbb = kind.group_bytes(packed_k::BLOCKS);
        let ts = w.ty.type_size();
        let mut data = AlignedBytes::zeroed((w.rows / PACK_ROWS).checked_mul(nsb)?.checked_mul(sbb)?);
        par_groups(&mut data[..], nsb * sbb, &|g, og| {
            for lane in 0..PACK_ROWS {
                let r = g * PACK_ROWS + lane;
                for (s, sb) in w.data[r * rb..(r + 1) * rb].chunks_exact(ts).enumerate() {
                    packed_k::write_super(kind, &mut og[s * sbb..(s + 1) * sbb], lane, sb);
                }
            }
        });
        Some(Self { kind, ty: w.ty, rows: w.rows, cols: w.cols, data })
    }

    /// [`Self::pack_with`] for `Q4_K` (as `Q4_1`), `Q5_K` (as `Q5_1`) and `Q6_K` (as `S8x2`).
    fn pack_k_quant(w: WeightView<'_>) -> Option<Self> {
        use crate::quant::kquants::{q4_k_block32, q5_k_block32, q6_k_values};
        const QKK: usize = 256;
        let rb = packable_row_bytes(&w, QKK)?;
        let kind = match w.ty {
            GgmlType::Q4_K => PackKind::Q4_1,
            GgmlType::Q5_K => PackKind::Q5_1,
            _ => PackKind::S8x2,
        };
        let nb = w.cols / QK;
        let gbb = kind.group_block_bytes();
        let ts = w.ty.type_size();
        let mut data = AlignedBytes::zeroed((w.rows / PACK_ROWS).checked_mul(nb)?.checked_mul(gbb)?);
        par_groups(&mut data[..], nb * gbb, &|g, og| {
            for lane in 0..PACK_ROWS {
                let r = g * PACK_ROWS + lane;
                for (s, sb) in w.data[r * rb..(r + 1) * rb].chunks_exact(ts).enumerate() {
                    // Q6_K: its signed 6-bit values and its two scales per
                    // 32, as they are (the scales' products with d rounded
                    // to f16).
                    let q6 = (kind == PackKind::S8x2).then(|| q6_k_values(sb));
                    for j in 0..QKK / QK {
                        let gb = &mut og[(s * QKK / QK + j) * gbb..][..gbb];
                        let Some((v, sc)) = &q6 else {
                            let (u, a, b) =
                                if kind == PackKind::Q4_1 { q4_k_block32(sb, j) } else { q5_k_block32(sb, j) };
                            write_block(kind, gb, lane, &u, a, -b);
                            continue;
                        };
                        let vals: [i8; QK] = std::array::from_fn(|i| v[QK * j + i]);
                        let (d0, d1) = (sc[2 * j], sc[2 * j + 1]);
                        write_block(kind, gb, lane, &vals.map(|v| v as u8), d0, d1);
                        // 128 · Σ d·v with the stored scales: what offsetting
                        // the activations adds.
                        let sum = |d: f32, vs: &[i8]| {
                            half::f16::from_f32(d).to_f32() * vs.iter().map(|&v| f32::from(v)).sum::<f32>()
                        };
                        let corr = 128.0 * (sum(d0, &vals[..16]) + sum(d1, &vals[16..]));
                        gb[64 + 4 * lane..68 + 4 * lane].copy_from_slice(&corr.to_le_bytes());
                    }
                }
            }
        });
        Some(Self { kind, ty: w.ty, rows: w.rows, cols: w.cols, data })
    }

    /// The packed format.
    pub fn kind(&self) -> PackKind {
        self.kind
    }
    /// The GGUF type it was packed from ([`Self::kind`] is the form it took;
    /// every kind is computed on 8-bit activations).
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
    /// Bytes of packed data (what one full matmul reads).
    pub fn n_bytes(&self) -> usize {
        self.data.len()
    }

    /// The packed bytes.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.data
    }

    /// The float value at byte offset `at` of a float kind.
    fn float_at(&self, at: usize) -> f32 {
        let b = &self.bytes()[at..];
        match self.kind {
            PackKind::F32 => f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            PackKind::BF16 => half::bf16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32(),
            _ => f16_at(b, 0),
        }
    }

    /// Row `r`'s block `b` of an integer kind: unsigned values, `d` and `m`
    /// (`w = d · u + m`).
    pub(crate) fn row_block(&self, r: usize, b: usize) -> ([u8; QK], f32, f32) {
        let nb = self.cols / QK;
        let gbb = self.kind.group_block_bytes();
        let (g, lane) = (r / PACK_ROWS, r % PACK_ROWS);
        let gb = &self.bytes()[(g * nb + b) * gbb..][..gbb];
        let d = f16_at(gb, 2 * lane);
        let m = if self.kind.stores_m() { f16_at(gb, 32 + 2 * lane) } else { self.kind.implied_m() * d };
        let qo = self.kind.quant_offset();
        let mut u = [0u8; QK];
        for k in 0..self.kind.quant_bytes() / 64 {
            for i in 0..4 {
                let byte = gb[qo + 64 * k + 4 * lane + i];
                match self.kind {
                    PackKind::Q8_0 => u[4 * k + i] = byte,
                    _ => {
                        u[4 * k + i] = byte & 0x0F;
                        u[16 + 4 * k + i] = byte >> 4;
                    }
                }
            }
        }
        if self.kind == PackKind::Q5_1 {
            let h = u32::from_le_bytes([gb[64 + 4 * lane], gb[65 + 4 * lane], gb[66 + 4 * lane], gb[67 + 4 * lane]]);
            for (j, u) in u.iter_mut().enumerate() {
                *u |= (((h >> j) & 1) as u8) << 4;
            }
        }
        (u, d, m)
    }

    /// Row `r`'s block `b` of an `S8x2` matrix: signed values and the
    /// scales of its two halves.
    pub(crate) fn row_block_s8(&self, r: usize, b: usize) -> ([i8; QK], [f32; 2]) {
        let nb = self.cols / QK;
        let gbb = self.kind.group_block_bytes();
        let (g, lane) = (r / PACK_ROWS, r % PACK_ROWS);
        let gb = &self.bytes()[(g * nb + b) * gbb..][..gbb];
        let qo = self.kind.quant_offset();
        let mut v = [0i8; QK];
        for k in 0..8 {
            for i in 0..4 {
                v[4 * k + i] = gb[qo + 64 * k + 4 * lane + i] as i8;
            }
        }
        (v, [f16_at(gb, 2 * lane), f16_at(gb, 32 + 2 * lane)])
    }

    /// Dequantizes row `r` into `out` (`cols` floats): embedding lookups.
    ///
    /// # Errors
    /// When `r` is out of range or `out` has the wrong length.
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) -> Result<(), KernelError> {
        if r >= self.rows {
            return Err(KernelError::Length { what: "packed row index bound", expected: self.rows, got: r });
        }
        crate::quant::check_len("packed row output", self.cols, out.len())?;
        if self.kind.is_float() {
            let (nb, gbb, es) = (self.cols / QK, self.kind.group_block_bytes(), self.kind.float_size());
            let (g, lane) = (r / PACK_ROWS, r % PACK_ROWS);
            for (c, o) in out.iter_mut().enumerate() {
                let at = (g * nb + c / QK) * gbb + ((c % QK) * PACK_ROWS + lane) * es;
                *o = self.float_at(at);
            }
            return Ok(());
        }
        if self.kind.super_header() > 0 {
            for (b, o) in out.chunks_exact_mut(QK).enumerate() {
                let (v, dd, mm) = packed_k::row_block(self, r, b);
                for (i, o) in o.iter_mut().enumerate() {
                    *o = dd[i / 16] * f32::from(v[i]) + mm[i / 16];
                }
            }
            return Ok(());
        }
        if self.kind == PackKind::S8x2 {
            for (b, o) in out.chunks_exact_mut(QK).enumerate() {
                let (v, d) = self.row_block_s8(r, b);
                for (i, o) in o.iter_mut().enumerate() {
                    *o = d[i / 16] * f32::from(v[i]);
                }
            }
            return Ok(());
        }
        for (b, o) in out.chunks_exact_mut(QK).enumerate() {
            let (u, d, m) = self.row_block(r, b);
            for (o, &u) in o.iter_mut().zip(&u) {
                *o = d * f32::from(u) + m;
            }
        }
        Ok(())
    }
}

/// Bytes per row of `w` when it can be packed: whole groups of 16 rows,
/// rows of whole `block`s of columns, and data that matches the shape.
fn packable_row_bytes(w: &WeightView<'_>, block: usize) -> Option<usize> {
    if w.rows == 0 || !w.rows.is_multiple_of(PACK_ROWS) || w.cols == 0 || !w.cols.is_multiple_of(block) {
        return None;
    }
    let rb = w.ty.row_bytes(w.cols)?;
    (w.data.len() == rb.checked_mul(w.rows)?).then_some(rb)
}

/// Runs `f(g, bytes)` for every group `g` of 16 rows (`gbytes` bytes of
/// `out` each), groups shared out over the machine's cores: packing a large
/// model's weights is load time, and rows are independent.
fn par_groups(out: &mut [u8], gbytes: usize, f: &(dyn Fn(usize, &mut [u8]) + Sync)) {
    let groups = out.len().checked_div(gbytes).unwrap_or(0);
    // Asking for the CPUs reads cgroup files: not for a matrix of one thread's work.
    let threads = if groups < 32 { 1 } else { std::thread::available_parallelism().map_or(1, |n| n.get()) };
    let threads = threads.min(groups / 16).max(1);
    if threads == 1 {
        out.chunks_exact_mut(gbytes).enumerate().for_each(|(g, og)| f(g, og));
        return;
    }
    let per = groups.div_ceil(threads);
    std::thread::scope(|sc| {
        for (i, chunk) in out.chunks_mut(per * gbytes).enumerate() {
            sc.spawn(move || chunk.chunks_exact_mut(gbytes).enumerate().for_each(|(j, og)| f(i * per + j, og)));
        }
    });
}

/// Writes row `lane`'s block of an integer kind into its group-block `gb`:
/// the values `u` as the kind stores them (`S8x2`: signed bytes as they
/// are), `d` and (where stored) `m` as f16 (`S8x2`: its two scales), and
/// `Q5_1`'s fifth bits. `S8x2`'s correction term is the caller's.
fn write_block(kind: PackKind, gb: &mut [u8], lane: usize, u: &[u8; QK], d: f32, m: f32) {
    gb[2 * lane..2 * lane + 2].copy_from_slice(&half::f16::from_f32(d).to_le_bytes());
    if kind.stores_m() {
        gb[32 + 2 * lane..32 + 2 * lane + 2].copy_from_slice(&half::f16::from_f32(m).to_le_bytes());
    }
    if kind == PackKind::Q5_1 {
        let h = u.iter().enumerate().fold(0u32, |h, (j, &u)| h | (u32::from(u >> 4 & 1) << j));
        gb[64 + 4 * lane..68 + 4 * lane].copy_from_slice(&h.to_le_bytes());
    }
    let qo = kind.quant_offset();
    for k in 0..kind.quant_bytes() / 64 {
        for i in 0..4 {
            gb[qo + 64 * k + 4 * lane + i] = match kind {
                PackKind::Q8_0 | PackKind::S8x2 => u[4 * k + i],
                _ => (u[4 * k + i] & 0x0F) | ((u[16 + 4 * k + i] & 0x0F) << 4),
            };
        }
    }
}

/// Portable kernel over packed rows: groups `groups`, every token. The
/// reference the SIMD kernel is tested against on machines that pack.
pub(super) fn rows_portable(job: &Job<'_>, p: &PackedRows, groups: Range<usize>) {
    if p.kind.is_float() {
        let (cols, gbb, es) = (p.cols, p.kind.group_block_bytes(), p.kind.float_size());
        let nb = cols / QK;
        for g in groups {
            for t in 0..job.n {
                let x = &job.x[t * cols..(t + 1) * cols];
                let mut out = [0f32; PACK_ROWS];
                for (c, &xc) in x.iter().enumerate() {
                    let base = (g * nb + c / QK) * gbb + (c % QK) * PACK_ROWS * es;
                    for (lane, o) in out.iter_mut().enumerate() {
                        *o += p.float_at(base + lane * es) * xc;
                    }
                }
                job.store_rows(t, g * PACK_ROWS, &out);
            }
        }
        return;
    }
    let act = job.act;
    let nb = act.nb();
    for g in groups {
        for t in 0..job.n {
            let mut out = [0f32; PACK_ROWS];
            for (lane, o) in out.iter_mut().enumerate() {
                for b in 0..nb {
                    if p.kind.super_header() > 0 {
                        let i = t * nb + b;
                        *o += packed_k::dot_block(p, g * PACK_ROWS + lane, b, &act.q[i * QK..(i + 1) * QK], act.d[i]);
                        continue;
                    }
                    if p.kind == PackKind::S8x2 {
                        let (v, d) = p.row_block_s8(g * PACK_ROWS + lane, b);
                        let i = t * nb + b;
                        let q = &act.q[i * QK..(i + 1) * QK];
                        let half = |h: usize| -> i32 {
                            v[16 * h..16 * h + 16]
                                .iter()
                                .zip(&q[16 * h..16 * h + 16])
                                .map(|(&v, &q)| i32::from(v) * i32::from(q))
                                .sum()
                        };
                        *o += act.d[i] * (d[0] * half(0) as f32 + d[1] * half(1) as f32);
                        continue;
                    }
                    let (u, d, m) = p.row_block(g * PACK_ROWS + lane, b);
                    let i = t * nb + b;
                    let q = &act.q[i * QK..(i + 1) * QK];
                    let isum: i32 = u.iter().zip(q).map(|(&u, &q)| i32::from(u) * i32::from(q)).sum();
                    *o += d * act.d[i] * isum as f32 + m * act.s[i];
                }
            }
            job.store_rows(t, g * PACK_ROWS, &out);
        }
    }
}
