//! Weights to their device form. Quantized matrices the kernels read in
//! place ([`QFormat`]) keep their bytes (Q4_K and Q5_K as they are; Q6_K and the
//! 32-value block formats reordered into aligned planes, the latter's rows
//! padded to whole superblocks where they end inside one); everything else
//! becomes the GPU's 16-bit type: F16 and BF16 pass through, other GGUF/safetensors types (F32, the remaining quantized
//! blocks) are dequantized row by row and rounded to nearest. Plain Rust,
//! tested without a GPU.

use kiln_backend::BackendError as ModelError;
use kiln_gguf::GgmlType;

/// The 16-bit type of weights, activations fed to GEMMs, and the KV cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DType {
    /// IEEE half.
    F16,
    /// bfloat16.
    Bf16,
}

impl DType {
    /// The suffix of this type's kernels (`embed_f16`, `embed_bf16`).
    pub fn suffix(self) -> &'static str {
        match self {
            Self::F16 => "f16",
            Self::Bf16 => "bf16",
        }
    }
}

/// A quantized format the CUDA kernels read in place (kernels/quant.cu;
/// the order is the kernels' `FMT_*` numbers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QFormat {
    /// GGUF Q4_K, stored as in the file (144-byte superblocks).
    Q4K,
    /// GGUF Q6_K, its 210-byte superblocks split into planes ([`Self::to_device`]).
    Q6K,
    /// GGUF Q8_0, in planes of quants and scales.
    Q8_0,
    /// GGUF Q4_0, in planes of quants and scales.
    Q4_0,
    /// GGUF Q4_1, in planes of quants, scales and minimums.
    Q4_1,
    /// GGUF Q5_K, stored as in the file (176-byte superblocks).
    Q5K,
    /// GGUF Q5_0, in planes of quants, fifth bits and scales.
    Q5_0,
    /// GGUF Q5_1, in planes of quants, fifth bits, scales and minimums.
    Q5_1,
    /// GGUF Q3_K, its 110-byte superblocks split into planes.
    Q3K,
    /// GGUF Q2_K, its 84-byte superblocks split into planes.
    Q2K,
    /// GGUF MXFP4 (gpt-oss's experts), in planes of codes and scale bytes.
    Mxfp4,
}

/// [`QFormat::mmq_rows`] of every format.
const MMQ_ROWS: usize = 128;

/// Values per K-quant superblock.
pub const QK_K: usize = 256;

impl QFormat {
    /// Every format, in kernel order.
    pub const ALL: [Self; 11] = [
        Self::Q4K,
        Self::Q6K,
        Self::Q8_0,
        Self::Q4_0,
        Self::Q4_1,
        Self::Q5K,
        Self::Q5_0,
        Self::Q5_1,
        Self::Q3K,
        Self::Q2K,
        Self::Mxfp4,
    ];

    /// The device format for a weight of type `ty` with rows of `cols`
    /// values, if the kernels read it in place: rows of whole 256-value
    /// superblocks, or for the 32-value formats ([`Self::ragged`]) whole
    /// blocks (the kernels take them 8 blocks at a time, a row's last
    /// superblock padded).
    pub fn of(ty: GgmlType, cols: usize) -> Option<Self> {
        Self::ALL.into_iter().find(|f| f.ggml() == ty).filter(|f| f.takes(cols))
    }
    /// Whether the kernels take rows of `cols` values in this format: whole
    /// superblocks, or for a [`Self::ragged`] one whole blocks.
    pub fn takes(self, cols: usize) -> bool {
        cols > 0 && cols.is_multiple_of(if self.ragged() { 32 } else { QK_K })
    }
    /// The format a weight of type `ty` and `cols` columns is placed in
    /// ([`Self::of`]). Rows ending inside a superblock stay quantized in
    /// MXFP4 always (its only other form is 4 times its bytes), in the
    /// other 32-value formats when `ragged` says so (`--cuda
    /// ragged-quant`), by default for rows of at least [`RAGGED_MIN_COLS`].
    pub fn placed(ty: GgmlType, cols: usize, ragged: Option<bool>) -> Option<Self> {
        let ragged = ragged.unwrap_or(cols >= RAGGED_MIN_COLS);
        Self::of(ty, cols).filter(|&f| ragged || f == Self::Mxfp4 || cols.is_multiple_of(QK_K))
    }
    /// Whether rows may end inside a superblock: the 32-value formats,
    /// whose device rows [`Self::pad_rows`] completes with zero blocks
    /// (the kernels' `Part::RAGGED`).
    pub fn ragged(self) -> bool {
        matches!(self, Self::Q8_0 | Self::Q4_0 | Self::Q4_1 | Self::Q5_0 | Self::Q5_1 | Self::Mxfp4)
    }
    /// Rows of `cols` values (`blocks`, as the file stores them) padded
    /// with zero blocks to whole superblocks (unchanged when `cols` is a
    /// multiple of 256). A zero block is zero in every 32-value format.
    pub fn pad_rows(self, blocks: Vec<u8>, cols: usize) -> Result<Vec<u8>, ModelError> {
        if cols.is_multiple_of(QK_K) {
            return Ok(blocks);
        }
        let ty = self.ggml();
        let rb = ty
            .row_bytes(cols)
            .filter(|&rb| rb > 0 && self.ragged() && blocks.len().is_multiple_of(rb))
            .ok_or_else(|| ModelError::Weight(format!("{} bytes are not whole rows of {cols} {ty}", blocks.len())))?;
        let padded = padded_cols(cols) / ty.block_size() * ty.type_size();
        let mut out = Vec::with_capacity(blocks.len() / rb * padded);
        for row in blocks.chunks_exact(rb) {
            out.extend_from_slice(row);
            out.resize(out.len() + padded - rb, 0);
        }
        Ok(out)
    }
    /// The GGUF type.
    pub fn ggml(self) -> GgmlType {
        match self {
            Self::Q4K => GgmlType::Q4_K,
            Self::Q6K => GgmlType::Q6_K,
            Self::Q8_0 => GgmlType::Q8_0,
            Self::Q4_0 => GgmlType::Q4_0,
            Self::Q4_1 => GgmlType::Q4_1,
            Self::Q5K => GgmlType::Q5_K,
            Self::Q5_0 => GgmlType::Q5_0,
            Self::Q5_1 => GgmlType::Q5_1,
            Self::Q3K => GgmlType::Q3_K,
            Self::Q2K => GgmlType::Q2_K,
            Self::Mxfp4 => GgmlType::MXFP4,
        }
    }
    /// The suffix of this format's kernels (`gemv_add_1_q4k_f16`).
    pub fn suffix(self) -> &'static str {
        match self {
            Self::Q4K => "q4k",
            Self::Q6K => "q6k",
            Self::Q8_0 => "q8_0",
            Self::Q4_0 => "q4_0",
            Self::Q4_1 => "q4_1",
            Self::Q5K => "q5k",
            Self::Q5_0 => "q5_0",
            Self::Q5_1 => "q5_1",
            Self::Q3K => "q3k",
            Self::Q2K => "q2k",
            Self::Mxfp4 => "mxfp4",
        }
    }
    /// Most rows of a step that reads a matrix of this format in place, in
    /// passes of 8 rows of the decode products, rather than dequantizing it
    /// for cuBLAS. Dequantizing every matrix of an 8B costs a step ~17.5 ms
    /// whatever its rows; the decode products are bound by their integer
    /// dot products at 8 rows, and cost ~0.9 ms per row (Q4_K, Q4_0) to
    /// ~1.2 ms (Q8_0). Prompt TTFT on the H100, dequantized vs in place
    /// (docs/cuda.md): Q4_K_M mix 16 rows 17.4 vs 16.0 ms, Q5_K mix 17.6 vs
    /// 17.2, Q4_0 17.6 vs 15.9, Q8_0 12 rows 17.8 vs 15.3 but 16 rows 17.7
    /// vs 19.8. Q6_K was measured only inside the K-quant mixes, Q4_1,
    /// Q5_0, Q5_1, Q3_K and Q2_K not at all: they take the common 16.
    pub fn pass_rows(self) -> usize {
        match self {
            Self::Q8_0 => 12,
            _ => 16,
        }
    }
    /// Most rows of a step that multiplies a matrix of this format on the
    /// tensor cores, reading it in place (kernels/mmq.cu); larger steps
    /// dequantize it for cuBLAS, whose f16 products run faster than the
    /// dequantizing kernel once the step's arithmetic outweighs the
    /// dequantization (docs/cuda.md has the measurement).
    pub fn mmq_rows(self) -> usize {
        MMQ_ROWS
    }
    /// Device bytes of `superblocks` superblocks (the same as the file's).
    pub fn bytes(self, superblocks: usize) -> usize {
        let ty = self.ggml();
        superblocks * QK_K / ty.block_size() * ty.type_size()
    }
    /// The file's blocks (whole superblocks: rows padded by
    /// [`Self::pad_rows`]) in the device layout.
    pub fn to_device(self, blocks: Vec<u8>) -> Result<Vec<u8>, ModelError> {
        let fields: &[(usize, usize)] = match self {
            // 144- and 176-byte superblocks: every field 16-byte aligned.
            Self::Q4K | Self::Q5K => return Ok(blocks),
            Self::Q6K => &Q6K,
            Self::Q8_0 => &[(2, 32), (0, 2)],
            Self::Q4_0 => &[(2, 16), (0, 2)],
            Self::Q4_1 => &[(4, 16), (0, 2), (2, 2)],
            Self::Q5_0 => &[(6, 16), (2, 4), (0, 2)],
            Self::Q5_1 => &[(8, 16), (4, 4), (0, 2), (2, 2)],
            Self::Q3K => &[(32, 64), (0, 32), (96, 12), (108, 2)],
            Self::Q2K => &[(16, 64), (0, 16), (80, 4)],
            Self::Mxfp4 => &[(1, 16), (0, 1)],
        };
        planes(self.ggml(), &blocks, fields)
    }
}

/// The narrowest rows ending inside a superblock that the 32-value formats
/// keep quantized by default ([`QFormat::placed`]). Measured on an H200
/// (docs/cuda.md, "Rows that end inside a superblock"): gpt-oss-20b's Q8_0
/// rows of 2880 read in place decode 7% faster for 1.4% of prompt speed;
/// Qwen2.5-0.5B's 896 in Q8_0 decoded 18% faster but prefilled 13–37%
/// slower (each prompt step dequantizes the matrices for cuBLAS, or takes
/// the tensor-core product at a depth too small to fill the GPU), and
/// SmolLM2-135M's 576 in Q4_1 lost both.
pub const RAGGED_MIN_COLS: usize = 2048;

/// Values per device row of a quantized matrix of `cols` columns: whole
/// superblocks ([`QFormat::pad_rows`]).
pub fn padded_cols(cols: usize) -> usize {
    cols.next_multiple_of(QK_K)
}

/// Q6_K superblock fields: 128 bytes of low nibbles, 64 of high bit pairs,
/// 16 int8 scales, the f16 scale `d`.
const Q6K: [(usize, usize); 4] = [(0, 128), (128, 64), (192, 16), (208, 2)];

/// Splits `blocks` (whole blocks of `ty`, as in a GGUF file) into planes,
/// one per field `(offset, length)` of a block, in the order given: all the
/// blocks' first field, then all their second, and so on. The kernels then
/// load each field with aligned 16-byte accesses: Q6_K's 210-byte
/// superblocks, Q3_K's 110 and Q2_K's 84, and the 34-, 18-, 20-, 22- and
/// 24-byte blocks of Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1 are not aligned. Q6_K
/// keeps its field order (low nibbles, high bit pairs, scales, `d`); Q3_K
/// and Q2_K put their 2-bit quants first (then Q3_K's third bits, scales,
/// `d`; Q2_K's scales, then `d` and `dmin`); the 32-value formats put their
/// quants first, then Q5_x's fifth bits, then `d`, then Q4_1's and Q5_1's
/// `m` (MXFP4: its codes, then its scale bytes).
fn planes(ty: GgmlType, blocks: &[u8], fields: &[(usize, usize)]) -> Result<Vec<u8>, ModelError> {
    let size = ty.type_size();
    if !blocks.len().is_multiple_of(size) {
        return Err(ModelError::Weight(format!("{} bytes are not whole {ty} blocks", blocks.len())));
    }
    let n = blocks.len() / size;
    let mut out = vec![0u8; blocks.len()];
    let mut plane = 0;
    for &(off, len) in fields {
        for (s, b) in blocks.chunks_exact(size).enumerate() {
            out[plane + s * len..plane + (s + 1) * len].copy_from_slice(&b[off..off + len]);
        }
        plane += n * len;
    }
    Ok(out)
}

/// Converts whole rows of `cols` elements of type `ty` (`bytes`) into
/// `dtype` bits in `out` (`out.len() / cols` rows).
pub fn fill_16(ty: GgmlType, bytes: &[u8], cols: usize, dtype: DType, out: &mut [u16]) -> Result<(), ModelError> {
    let rb = ty.row_bytes(cols).ok_or_else(|| ModelError::Weight(format!("{cols} columns do not fit {ty}")))?;
    let rows = out.len().checked_div(cols).unwrap_or(0);
    if bytes.len() != rows * rb {
        return Err(ModelError::Weight(format!("{} bytes for {rows} rows of {cols} {ty}", bytes.len())));
    }
    if matches!((ty, dtype), (GgmlType::F16, DType::F16) | (GgmlType::BF16, DType::Bf16)) {
        for (o, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
            *o = u16::from_le_bytes([b[0], b[1]]);
        }
        return Ok(());
    }
    let mut row = vec![0f32; cols];
    for (o, b) in out.chunks_exact_mut(cols).zip(bytes.chunks_exact(rb)) {
        kiln_kernels::quant::dequantize_row(ty, b, &mut row).map_err(|e| ModelError::Weight(e.to_string()))?;
        match dtype {
            DType::F16 => o.iter_mut().zip(&row).for_each(|(o, &v)| *o = half::f16::from_f32(v).to_bits()),
            DType::Bf16 => o.iter_mut().zip(&row).for_each(|(o, &v)| *o = half::bf16::from_f32(v).to_bits()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(n: usize) -> Vec<f32> {
        (0..n).map(|i| ((i * 37 % 101) as f32 - 50.0) / 17.0).collect()
    }

    #[test]
    fn sixteen_bit_weights_pass_through_bit_for_bit() {
        let v = values(64);
        for (ty, dt) in [(GgmlType::F16, DType::F16), (GgmlType::BF16, DType::Bf16)] {
            let bits: Vec<u16> = match dt {
                DType::F16 => v.iter().map(|&x| half::f16::from_f32(x).to_bits()).collect(),
                DType::Bf16 => v.iter().map(|&x| half::bf16::from_f32(x).to_bits()).collect(),
            };
            let bytes: Vec<u8> = bits.iter().flat_map(|b| b.to_le_bytes()).collect();
            let mut out = vec![0u16; 64];
            fill_16(ty, &bytes, 32, dt, &mut out).unwrap();
            assert_eq!(out, bits, "{ty}");
        }
    }

    #[test]
    fn quantized_and_f32_rows_are_dequantized_then_rounded() {
        let (rows, cols) = (3, 64);
        let v = values(rows * cols);
        for ty in [GgmlType::F32, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::F16] {
            let rb = ty.row_bytes(cols).unwrap();
            let mut bytes = vec![0u8; rows * rb];
            for (r, dst) in bytes.chunks_exact_mut(rb).enumerate() {
                kiln_kernels::quant::quantize_row(ty, &v[r * cols..(r + 1) * cols], dst).unwrap();
            }
            for dt in [DType::F16, DType::Bf16] {
                let mut out = vec![0u16; rows * cols];
                fill_16(ty, &bytes, cols, dt, &mut out).unwrap();
                let mut want = vec![0f32; cols];
                for r in 0..rows {
                    kiln_kernels::quant::dequantize_row(ty, &bytes[r * rb..(r + 1) * rb], &mut want).unwrap();
                    for (c, &w) in want.iter().enumerate() {
                        let got = match dt {
                            DType::F16 => half::f16::from_bits(out[r * cols + c]).to_f32(),
                            DType::Bf16 => half::bf16::from_bits(out[r * cols + c]).to_f32(),
                        };
                        // One rounding to the 16-bit type: half an ulp.
                        let ulp = if dt == DType::F16 { 2f32.powi(-11) } else { 2f32.powi(-8) };
                        assert!((got - w).abs() <= w.abs() * ulp + 1e-6, "{ty} {dt:?} row {r} col {c}: {got} vs {w}");
                    }
                }
            }
        }
    }

    #[test]
    fn quantized_formats_are_kept_for_whole_superblocks_or_blocks() {
        assert_eq!(QFormat::of(GgmlType::Q4_K, 4096), Some(QFormat::Q4K));
        assert_eq!(QFormat::of(GgmlType::Q6_K, 14336), Some(QFormat::Q6K));
        assert_eq!(QFormat::of(GgmlType::Q4_K, 896), None);
        assert_eq!(QFormat::of(GgmlType::Q8_0, 4096), Some(QFormat::Q8_0));
        // The 32-value formats take rows of whole blocks (gpt-oss's 2880).
        assert_eq!(QFormat::of(GgmlType::Q4_0, 896), Some(QFormat::Q4_0));
        assert_eq!(QFormat::of(GgmlType::MXFP4, 2880), Some(QFormat::Mxfp4));
        assert_eq!(QFormat::of(GgmlType::Q8_0, 2880), Some(QFormat::Q8_0));
        assert_eq!(QFormat::of(GgmlType::Q8_0, 48), None);
        assert_eq!(QFormat::of(GgmlType::Q8_0, 0), None);
        assert_eq!(QFormat::Mxfp4.bytes(3), 3 * 8 * 17);
        // Placed in place at such widths: MXFP4 always, the others on request.
        assert_eq!(QFormat::placed(GgmlType::MXFP4, 576, Some(false)), Some(QFormat::Mxfp4));
        assert_eq!(QFormat::placed(GgmlType::Q8_0, 2880, Some(false)), None);
        assert_eq!(QFormat::placed(GgmlType::Q8_0, 896, Some(true)), Some(QFormat::Q8_0));
        assert_eq!(QFormat::placed(GgmlType::Q8_0, 4096, Some(false)), Some(QFormat::Q8_0));
        // By default from 2048 columns on.
        assert_eq!(QFormat::placed(GgmlType::Q8_0, 2880, None), Some(QFormat::Q8_0));
        assert_eq!(QFormat::placed(GgmlType::Q4_1, 576, None), None);
        assert_eq!(QFormat::placed(GgmlType::Q8_0, 896, None), None);
        assert_eq!(QFormat::of(GgmlType::Q5_K, 4096), Some(QFormat::Q5K));
        assert_eq!(QFormat::of(GgmlType::Q5_1, 512), Some(QFormat::Q5_1));
        assert_eq!(QFormat::of(GgmlType::Q3_K, 4096), Some(QFormat::Q3K));
        assert_eq!(QFormat::of(GgmlType::Q2_K, 896), None);
        assert_eq!(QFormat::Q4K.bytes(3), 3 * 144);
        assert_eq!(QFormat::Q6K.bytes(3), 3 * 210);
        assert_eq!(QFormat::Q8_0.bytes(3), 3 * 8 * 34);
        assert_eq!(QFormat::Q4_1.bytes(3), 3 * 8 * 20);
        assert_eq!(QFormat::Q5K.bytes(3), 3 * 176);
        assert_eq!(QFormat::Q5_0.bytes(3), 3 * 8 * 22);
        assert_eq!(QFormat::Q5_1.bytes(3), 3 * 8 * 24);
        assert_eq!(QFormat::Q3K.bytes(3), 3 * 110);
        assert_eq!(QFormat::Q2K.bytes(3), 3 * 84);
        for (i, f) in QFormat::ALL.into_iter().enumerate() {
            assert_eq!(f as usize, i, "{f:?}: kernel order");
        }
    }

    #[test]
    fn block32_planes_hold_every_field_of_every_block() {
        for (ty, scales) in [(GgmlType::Q8_0, 1), (GgmlType::Q4_0, 1), (GgmlType::Q4_1, 2)] {
            let size = ty.type_size();
            let n = 16;
            let blocks: Vec<u8> = (0..n * size).map(|i| (i * 7 % 251) as u8).collect();
            let planes = QFormat::of(ty, 256).unwrap().to_device(blocks.clone()).unwrap();
            assert_eq!(planes.len(), blocks.len());
            let qb = size - 2 * scales;
            for i in 0..n {
                let b = &blocks[i * size..(i + 1) * size];
                assert_eq!(&planes[i * qb..(i + 1) * qb], &b[2 * scales..], "{ty} quants of {i}");
                for s in 0..scales {
                    let at = n * qb + (s * n + i) * 2;
                    assert_eq!(&planes[at..at + 2], &b[2 * s..2 * s + 2], "{ty} scale {s} of {i}");
                }
            }
        }
        // Q4_K superblocks stay as they are; partial blocks are refused.
        assert_eq!(QFormat::Q4K.to_device(vec![7; 144]).unwrap(), vec![7; 144]);
        assert!(QFormat::Q8_0.to_device(vec![0; 35]).is_err());
    }

    #[test]
    fn ragged_rows_are_padded_with_zero_blocks_to_whole_superblocks() {
        // Two rows of 320 values (10 blocks) become two rows of 16 blocks.
        let f = QFormat::Mxfp4;
        let rb = 10 * 17;
        let rows: Vec<u8> = (0..2 * rb).map(|i| (i % 250) as u8 + 1).collect();
        let padded = f.pad_rows(rows.clone(), 320).unwrap();
        assert_eq!(padded.len(), 2 * 16 * 17);
        for r in 0..2 {
            assert_eq!(&padded[r * 16 * 17..r * 16 * 17 + rb], &rows[r * rb..(r + 1) * rb]);
            assert!(padded[r * 16 * 17 + rb..(r + 1) * 16 * 17].iter().all(|&b| b == 0));
        }
        // Whole superblocks pass through; K-quants and partial rows are refused.
        assert_eq!(f.pad_rows(vec![3; 8 * 17], 256).unwrap(), vec![3; 8 * 17]);
        assert!(f.pad_rows(vec![0; rb + 1], 320).is_err());
        assert!(QFormat::Q4K.pad_rows(vec![0; 144], 320).is_err());
        // A zero block is zero in every 32-value format.
        for f in QFormat::ALL.into_iter().filter(|f| f.ragged()) {
            let ty = f.ggml();
            let mut out = vec![1f32; 32];
            kiln_kernels::quant::dequantize_row(ty, &vec![0; ty.type_size()], &mut out).unwrap();
            assert!(out.iter().all(|&v| v == 0.0), "{ty}");
        }
        assert_eq!(padded_cols(2880), 3072);
        assert_eq!(padded_cols(4096), 4096);
    }

    /// MXFP4 values of device part `p` of superblock `sb` (of `n`), decoded
    /// as quant_formats.cuh's `Part<FMT_MXFP4>` does: the sign bit and a
    /// byte-permute lookup of twice the magnitude, times 2^(e−128).
    fn mxfp4_device_part(w: &[u8], n: usize, sb: usize, p: usize) -> Vec<(usize, f32)> {
        let e = u32::from(w[n * 128 + sb * 8 + p]);
        let s = if e < 2 { f32::from_bits(0x0020_0000 << e) } else { f32::from_bits((e - 1) << 23) };
        let table = [0u8, 1, 2, 3, 4, 6, 8, 12];
        let mut out = Vec::new();
        for k in 0..2 {
            for j in 0..16 {
                let byte = w[sb * 128 + 16 * p + j];
                let code = if k == 0 { byte & 0x0F } else { byte >> 4 };
                let mag = i32::from(table[usize::from(code & 7)]);
                let q = if code & 8 != 0 { -mag } else { mag };
                out.push((32 * p + 16 * k + j, s * q as f32));
            }
        }
        out
    }

    #[test]
    fn mxfp4_decodes_on_the_device_layout_as_the_cpu_dequantizes() {
        let n = 3;
        let f = QFormat::Mxfp4;
        let mut blocks: Vec<u8> = (0..f.bytes(n)).map(|i| (i * 131 % 251) as u8 ^ (i >> 3) as u8).collect();
        for (i, b) in blocks.chunks_exact_mut(17).enumerate() {
            b[0] = [0, 1, 2, 100, 127, 140][i % 6];
        }
        let mut want = vec![0f32; n * QK_K];
        kiln_kernels::quant::dequantize_row(GgmlType::MXFP4, &blocks, &mut want).unwrap();
        let dev = f.to_device(blocks).unwrap();
        for sb in 0..n {
            for p in 0..8 {
                for (at, v) in mxfp4_device_part(&dev, n, sb, p) {
                    assert_eq!(v, want[sb * QK_K + at], "sb {sb} value {at}");
                }
            }
        }
    }

    /// Values of part `p` (32 values: two runs of 16) of superblock `sb`
    /// of device bytes `w` (`n` superblocks), decoded the way quant.cu's
    /// `Part<FMT_Q5K>` / `Fives32` / `Part<FMT_Q3K>` / `Part<FMT_Q2K>` do
    /// (same offsets, same bit operations), with each value's position in
    /// the superblock.
    fn device_part(f: QFormat, w: &[u8], n: usize, sb: usize, p: usize) -> Vec<(usize, f32)> {
        let u32_at = |at: usize| u32::from_le_bytes([w[at], w[at + 1], w[at + 2], w[at + 3]]);
        let f16_at = |at: usize| half::f16::from_bits(u16::from_le_bytes([w[at], w[at + 1]])).to_f32();
        let (q, qh, s, c, lo, hi): ([u32; 4], Vec<u32>, [f32; 2], [f32; 2], usize, usize) = match f {
            QFormat::Q5K => {
                let b = sb * 176;
                let h = [u32_at(b), u32_at(b + 4), u32_at(b + 8), u32_at(b + 12)];
                let (d, dmin) = (f16_at(b), f16_at(b + 2));
                let sh = 16 * ((p >> 1) & 1);
                let (y, z, wv) = ((h[1] >> sh) & 0xFFFF, (h[2] >> sh) & 0xFFFF, (h[3] >> sh) & 0xFFFF);
                let (sc2, m2) = if p >= 4 {
                    ((wv & 0x0F0F) | ((y >> 2) & 0x3030), ((wv >> 4) & 0x0F0F) | ((z >> 2) & 0x3030))
                } else {
                    (y & 0x3F3F, z & 0x3F3F)
                };
                let s = [d * (sc2 & 0xFF) as f32, d * (sc2 >> 8) as f32];
                let c = [dmin * (m2 & 0xFF) as f32, dmin * (m2 >> 8) as f32];
                let q = std::array::from_fn(|i| u32_at(b + 48 + 16 * p + 4 * i));
                let qh = (0..4).map(|i| u32_at(b + 16 + 16 * (p & 1) + 4 * i)).collect();
                (q, qh, s, c, 64 * (p >> 1) + 16 * (p & 1), 32)
            }
            QFormat::Q3K | QFormat::Q2K => {
                let (h, j) = (p >> 2, p & 3);
                let (lo, q3) = (128 * h + 32 * j, f == QFormat::Q3K);
                let mut out = Vec::new();
                for k in 0..2 {
                    let (s, c) = if q3 {
                        let sc = &w[n * 96 + sb * 12..];
                        let is = 8 * h + 2 * j + k;
                        let low = if is < 8 { sc[is] & 0x0F } else { sc[is - 8] >> 4 } as i32;
                        let high = ((sc[8 + (is & 3)] >> (2 * (is >> 2))) & 3) as i32;
                        let s = f16_at(n * 108 + 2 * sb) * ((low | (high << 4)) - 32) as f32;
                        (s, 4.0 * s)
                    } else {
                        let sc = w[n * 64 + sb * 16 + 8 * h + 2 * j + k];
                        let (d, dmin) = (f16_at(n * 80 + 4 * sb), f16_at(n * 80 + 4 * sb + 2));
                        (d * (sc & 0x0F) as f32, dmin * (sc >> 4) as f32)
                    };
                    for i in 0..4 {
                        let l = u32_at(sb * 64 + 32 * h + 16 * k + 4 * i);
                        let mut word = (l >> (2 * j)) & 0x0303_0303;
                        if q3 {
                            let hb = u32_at(n * 64 + sb * 32 + 16 * k + 4 * i);
                            word |= ((hb >> (4 * h + j)) & 0x0101_0101) << 2;
                        }
                        for e in 0..4 {
                            out.push((lo + 16 * k + 4 * i + e, s * ((word >> (8 * e)) & 0xFF) as f32 - c));
                        }
                    }
                }
                return out;
            }
            _ => {
                let q = std::array::from_fn(|i| u32_at(sb * 128 + 16 * p + 4 * i));
                let qh = vec![u32_at(n * 128 + 4 * (sb * 8 + p))];
                let d = f16_at(n * 160 + 2 * (sb * 8 + p));
                let c = if f == QFormat::Q5_1 { -f16_at(n * 176 + 2 * (sb * 8 + p)) } else { 16.0 * d };
                (q, qh, [d; 2], [c; 2], 32 * p, 16)
            }
        };
        let mut out = Vec::new();
        for k in 0..2 {
            for i in 0..4 {
                let nib = (if k == 0 { q[i] } else { q[i] >> 4 }) & 0x0F0F_0F0F;
                let word = if f == QFormat::Q5K {
                    let shift = 2 * (p >> 1) as u32;
                    nib | (((qh[i] >> (shift + k as u32)) & 0x0101_0101) << 4)
                } else {
                    let h = (qh[0] >> (16 * k + 4 * i)) & 0xF;
                    nib | ((h & 1) << 4) | ((h & 2) << 11) | ((h & 4) << 18) | ((h & 8) << 25)
                };
                for e in 0..4 {
                    let v = (word >> (8 * e)) & 0xFF;
                    out.push((lo + k * hi + 4 * i + e, s[k] * v as f32 - c[k]));
                }
            }
        }
        out
    }

    #[test]
    fn new_formats_decode_on_the_device_layout_as_the_cpu_dequantizes() {
        let n = 3;
        for f in [QFormat::Q5K, QFormat::Q5_0, QFormat::Q5_1, QFormat::Q3K, QFormat::Q2K] {
            let ty = f.ggml();
            let bytes = f.bytes(n);
            // Arbitrary bytes are valid blocks; small scales keep the
            // values finite and distinct.
            let mut blocks: Vec<u8> = (0..bytes).map(|i| (i * 131 % 251) as u8 ^ (i >> 3) as u8).collect();
            let size = ty.type_size();
            for b in blocks.chunks_exact_mut(size) {
                // Where each format keeps its f16 scales.
                let at: &[usize] = match ty {
                    GgmlType::Q5_0 => &[0],
                    GgmlType::Q3_K => &[108],
                    GgmlType::Q2_K => &[80, 82],
                    _ => &[0, 2],
                };
                for (&a, v) in at.iter().zip([0.013f32, -0.021]) {
                    b[a..a + 2].copy_from_slice(&half::f16::from_f32(v).to_le_bytes());
                }
            }
            let mut want = vec![0f32; n * QK_K];
            kiln_kernels::quant::dequantize_row(ty, &blocks, &mut want).unwrap();
            let dev = f.to_device(blocks).unwrap();
            for sb in 0..n {
                let mut seen = [false; QK_K];
                for p in 0..8 {
                    for (at, v) in device_part(f, &dev, n, sb, p) {
                        assert!(!seen[at], "{f:?} value {at} twice");
                        seen[at] = true;
                        let w = want[sb * QK_K + at];
                        assert!((v - w).abs() <= 1e-6 * w.abs().max(1.0), "{f:?} sb {sb} value {at}: {v} vs {w}");
                    }
                }
                assert!(seen.iter().all(|&s| s), "{f:?}: every value decoded");
            }
        }
    }

    #[test]
    fn q6k_planes_hold_every_field_of_every_superblock() {
        let n = 3;
        let blocks: Vec<u8> = (0..n * 210).map(|i| (i * 7 % 251) as u8).collect();
        let planes = QFormat::Q6K.to_device(blocks.clone()).unwrap();
        assert_eq!(planes.len(), blocks.len());
        for s in 0..n {
            let b = &blocks[s * 210..(s + 1) * 210];
            assert_eq!(&planes[s * 128..(s + 1) * 128], &b[..128], "ql of {s}");
            assert_eq!(&planes[n * 128 + s * 64..n * 128 + (s + 1) * 64], &b[128..192], "qh of {s}");
            assert_eq!(&planes[n * 192 + s * 16..n * 192 + (s + 1) * 16], &b[192..208], "scales of {s}");
            assert_eq!(&planes[n * 208 + s * 2..n * 208 + (s + 1) * 2], &b[208..210], "d of {s}");
        }
        assert!(QFormat::Q6K.to_device(blocks[..209].to_vec()).is_err());
    }

    #[test]
    fn wrong_sizes_are_errors_not_panics() {
        let mut out = vec![0u16; 64];
        assert!(fill_16(GgmlType::F16, &[0u8; 10], 32, DType::F16, &mut out).is_err());
        assert!(fill_16(GgmlType::Q8_0, &[0u8; 10], 33, DType::F16, &mut out).is_err());
    }
}
