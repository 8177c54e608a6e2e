//! Weights to the GPU's 16-bit types: F16 and BF16 pass through, every
//! other GGUF/safetensors type (F32, the quantized blocks) is dequantized
//! row by row and rounded to nearest. Plain Rust, tested without a GPU.

use kiln_gguf::GgmlType;
use kiln_models::ModelError;

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

/// Converts whole rows of `cols` elements of type `ty` (`bytes`) into
/// `dtype` bits in `out` (`out.len() / cols` rows).
pub fn fill_16(ty: GgmlType, bytes: &[u8], cols: usize, dtype: DType, out: &mut [u16]) -> Result<(), ModelError> {
    let rb = ty.row_bytes(cols).ok_or_else(|| ModelError::Config(format!("{cols} columns do not fit {ty}")))?;
    let rows = out.len().checked_div(cols).unwrap_or(0);
    if bytes.len() != rows * rb {
        return Err(ModelError::Config(format!("{} bytes for {rows} rows of {cols} {ty}", bytes.len())));
    }
    if matches!((ty, dtype), (GgmlType::F16, DType::F16) | (GgmlType::BF16, DType::Bf16)) {
        for (o, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
            *o = u16::from_le_bytes([b[0], b[1]]);
        }
        return Ok(());
    }
    let mut row = vec![0f32; cols];
    for (o, b) in out.chunks_exact_mut(cols).zip(bytes.chunks_exact(rb)) {
        kiln_kernels::quant::dequantize_row(ty, b, &mut row).map_err(|e| ModelError::Config(e.to_string()))?;
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
    fn wrong_sizes_are_errors_not_panics() {
        let mut out = vec![0u16; 64];
        assert!(fill_16(GgmlType::F16, &[0u8; 10], 32, DType::F16, &mut out).is_err());
        assert!(fill_16(GgmlType::Q8_0, &[0u8; 10], 33, DType::F16, &mut out).is_err());
    }
}
