//! GGUF block formats: dequantize every supported [`GgmlType`], quantize the
//! ones kiln writes (activations, test models).
//!
//! All layouts are little-endian with `f16` scales (`Q8_K` uses an `f32`
//! scale), exactly as stored in GGUF files:
//!
//! | type | block | bytes | value |
//! | --- | --- | --- | --- |
//! | `Q4_0` | 32 | 18 | `d·(q−8)`, `q` 4-bit |
//! | `Q4_1` | 32 | 20 | `d·q + m` |
//! | `Q5_0` | 32 | 22 | `d·(q−16)`, `q` 5-bit (high bits in a `u32`) |
//! | `Q5_1` | 32 | 24 | `d·q + m` |
//! | `Q8_0` | 32 | 34 | `d·q`, `q` signed 8-bit |
//! | `Q8_1` | 32 | 36 | `d·q`; also stores `d·Σq` |
//! | `Q2_K`..`Q6_K` | 256 | 84..210 | super-blocks with 6/8-bit sub-block scales |
//! | `Q8_K` | 256 | 292 | `d·q`, `f32` scale, sums of 16 |
//! | `MXFP4` | 32 | 17 | `2^(e−127)·fp4(q)`: E8M0 scale byte, 4-bit E2M1 codes |
//!
//! ```
//! use kiln_kernels::{quant, GgmlType};
//! let x: Vec<f32> = (0..64).map(|i| i as f32 / 8.0 - 4.0).collect();
//! let mut q = vec![0u8; GgmlType::Q8_0.row_bytes(64).unwrap()];
//! quant::quantize_row(GgmlType::Q8_0, &x, &mut q).unwrap();
//! let mut back = vec![0f32; 64];
//! quant::dequantize_row(GgmlType::Q8_0, &q, &mut back).unwrap();
//! assert!(x.iter().zip(&back).all(|(a, b)| (a - b).abs() < 0.02));
//! ```

mod error;
pub(crate) mod fp4;
pub(crate) mod kquants;
mod legacy;

pub use error::KernelError;
pub(crate) use error::{check_len, row_bytes};

use crate::GgmlType;
use half::{bf16, f16};

/// Reads the little-endian `f16` at `b[i..i + 2]` as `f32`.
#[inline(always)]
pub(crate) fn f16_at(b: &[u8], i: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[i], b[i + 1]])).to_f32()
}

/// Writes `v` as a little-endian `f16` at `b[i..i + 2]`.
#[inline(always)]
pub(crate) fn put_f16(b: &mut [u8], i: usize, v: f32) {
    b[i..i + 2].copy_from_slice(&f16::from_f32(v).to_le_bytes());
}

/// Dequantizes one row: `data` holds `out.len()` elements of type `ty`.
///
/// # Errors
/// `out.len()` is not a multiple of the block size, or `data` is not exactly
/// `ty.row_bytes(out.len())` bytes.
pub fn dequantize_row(ty: GgmlType, data: &[u8], out: &mut [f32]) -> Result<(), KernelError> {
    check_len("dequantize_row input bytes", row_bytes(ty, out.len())?, data.len())?;
    let bs = ty.block_size();
    let f: fn(&[u8], &mut [f32]) = match ty {
        GgmlType::F32 => |b, y| y[0] = f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
        GgmlType::F16 => |b, y| y[0] = f16_at(b, 0),
        GgmlType::BF16 => |b, y| y[0] = bf16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32(),
        GgmlType::Q4_0 => legacy::dequant_q4_0,
        GgmlType::Q4_1 => legacy::dequant_q4_1,
        GgmlType::Q5_0 => legacy::dequant_q5_0,
        GgmlType::Q5_1 => legacy::dequant_q5_1,
        GgmlType::Q8_0 => legacy::dequant_q8_0,
        GgmlType::Q8_1 => legacy::dequant_q8_1,
        GgmlType::Q2_K => kquants::dequant_q2_k,
        GgmlType::Q3_K => kquants::dequant_q3_k,
        GgmlType::Q4_K => kquants::dequant_q4_k,
        GgmlType::Q5_K => kquants::dequant_q5_k,
        GgmlType::Q6_K => kquants::dequant_q6_k,
        GgmlType::Q8_K => kquants::dequant_q8_k,
        GgmlType::MXFP4 => fp4::dequant_mxfp4,
    };
    for (b, y) in data.chunks_exact(ty.type_size()).zip(out.chunks_exact_mut(bs)) {
        f(b, y);
    }
    Ok(())
}

/// Quantizes one row of `x` into `out` (`ty.row_bytes(x.len())` bytes).
///
/// Supported: `F32`, `F16`, `BF16` (round to nearest even), `Q4_0`, `Q4_1`,
/// `Q5_0`, `Q5_1`, `Q8_0`, `Q8_1`, `Q8_K`, `MXFP4` (round to nearest), and `Q4_K`,
/// `Q6_K` with simple per-block scales (for tests and random models: no
/// search for the best scales). `Q2_K`, `Q3_K` and `Q5_K` return
/// [`KernelError::Unsupported`]: kiln only reads them.
///
/// # Errors
/// Length mismatch, or a type listed above as unsupported.
pub fn quantize_row(ty: GgmlType, x: &[f32], out: &mut [u8]) -> Result<(), KernelError> {
    check_len("quantize_row output bytes", row_bytes(ty, x.len())?, out.len())?;
    let bs = ty.block_size();
    let f: fn(&[f32], &mut [u8]) = match ty {
        GgmlType::F32 => |x, b| b.copy_from_slice(&x[0].to_le_bytes()),
        GgmlType::F16 => |x, b| put_f16(b, 0, x[0]),
        GgmlType::BF16 => |x, b| b.copy_from_slice(&bf16::from_f32(x[0]).to_le_bytes()),
        GgmlType::Q4_0 => legacy::quant_q4_0,
        GgmlType::Q4_1 => legacy::quant_q4_1,
        GgmlType::Q5_0 => legacy::quant_q5_0,
        GgmlType::Q5_1 => legacy::quant_q5_1,
        GgmlType::Q8_0 => legacy::quant_q8_0,
        GgmlType::Q8_1 => legacy::quant_q8_1,
        GgmlType::Q8_K => kquants::quant_q8_k,
        GgmlType::Q4_K => kquants::quant_q4_k,
        GgmlType::Q6_K => kquants::quant_q6_k,
        GgmlType::MXFP4 => fp4::quant_mxfp4,
        GgmlType::Q2_K | GgmlType::Q3_K | GgmlType::Q5_K => {
            return Err(KernelError::Unsupported { op: "quantize_row", ty })
        }
    };
    for (x, b) in x.chunks_exact(bs).zip(out.chunks_exact_mut(ty.type_size())) {
        f(x, b);
    }
    Ok(())
}

/// Whether [`quantize_row`] supports `ty`.
pub fn can_quantize(ty: GgmlType) -> bool {
    !matches!(ty, GgmlType::Q2_K | GgmlType::Q3_K | GgmlType::Q5_K)
}

/// Every type kiln reads, in GGUF id order.
pub const ALL_TYPES: [GgmlType; 16] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q8_1,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::Q8_K,
    GgmlType::BF16,
    GgmlType::MXFP4,
];

#[cfg(test)]
mod tests {
    use super::*;

    fn ramp(n: usize) -> Vec<f32> {
        (0..n).map(|i| ((i * 37 % 101) as f32 - 50.0) / 17.0).collect()
    }

    #[test]
    fn round_trip_error_is_within_half_a_step() {
        for ty in ALL_TYPES.into_iter().filter(|t| can_quantize(*t)) {
            let x = ramp(512);
            let mut q = vec![0u8; ty.row_bytes(512).unwrap()];
            quantize_row(ty, &x, &mut q).unwrap();
            let mut y = vec![0f32; 512];
            dequantize_row(ty, &q, &mut y).unwrap();
            let range = 100.0 / 17.0;
            // 4-bit: step = range / 15 (asymmetric) or amax / 8 (symmetric).
            let step = match ty {
                GgmlType::Q4_0 => range / 8.0,
                GgmlType::Q4_1 => range / 15.0,
                GgmlType::Q5_0 => range / 16.0,
                GgmlType::Q5_1 => range / 31.0,
                GgmlType::Q8_0 | GgmlType::Q8_1 | GgmlType::Q8_K => range / 127.0,
                // Steps rounded up to 6-bit multiples of the superblock's,
                // and the offset's own rounding: a fifth more.
                GgmlType::Q4_K => range / 15.0 * 1.2,
                GgmlType::Q6_K => range / 2.0 / 31.0 * 1.05,
                // Scale unit u = 2^(⌊log2 amax⌋ − 2) ≤ amax / 4; values past
                // 6u clip to it (error < 2u), elsewhere half a gap (≤ u).
                // Error ≤ amax / 2 = range / 4: half of this step.
                GgmlType::MXFP4 => range / 2.0,
                _ => range / 128.0,
            };
            for (a, b) in x.iter().zip(&y) {
                assert!((a - b).abs() <= step * 0.51 + 1e-3 * a.abs(), "{ty}: {a} vs {b}");
            }
        }
    }

    #[test]
    fn lengths_are_checked() {
        let mut y = vec![0f32; 32];
        assert!(matches!(dequantize_row(GgmlType::Q4_1, &[0; 19], &mut y), Err(KernelError::Length { .. })));
        let mut y = vec![0f32; 31];
        assert!(matches!(dequantize_row(GgmlType::Q4_1, &[0; 20], &mut y), Err(KernelError::NotBlockMultiple { .. })));
        assert!(matches!(
            quantize_row(GgmlType::Q5_K, &[0.0; 256], &mut [0; 176]),
            Err(KernelError::Unsupported { .. })
        ));
        assert!(quantize_row(GgmlType::Q8_0, &[0.0; 32], &mut [0; 33]).is_err());
    }

    #[test]
    fn zero_rows_quantize_to_zero() {
        for ty in ALL_TYPES.into_iter().filter(|t| can_quantize(*t)) {
            let mut q = vec![0xAAu8; ty.row_bytes(256).unwrap()];
            quantize_row(ty, &[0.0; 256], &mut q).unwrap();
            let mut y = vec![1f32; 256];
            dequantize_row(ty, &q, &mut y).unwrap();
            assert!(y.iter().all(|v| *v == 0.0), "{ty}");
        }
    }

    #[test]
    fn q8_1_stores_scaled_sum() {
        let x = ramp(32);
        let mut q = [0u8; 36];
        quantize_row(GgmlType::Q8_1, &x, &mut q).unwrap();
        let d = f16_at(&q, 0);
        let sum: i32 = q[4..].iter().map(|&v| v as i8 as i32).sum();
        assert!((f16_at(&q, 2) - d * sum as f32).abs() <= 1e-3 * (d * sum as f32).abs() + 1e-3);
    }
}
