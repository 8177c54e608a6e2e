//! GGML tensor element types and their block layouts (facts of the GGUF format).

/// A tensor element type as stored in GGUF files.
///
/// Quantized types store `block_size()` elements in `type_size()` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types)]
pub enum GgmlType {
    /// 32-bit float.
    F32,
    /// IEEE half.
    F16,
    /// bfloat16.
    BF16,
    /// 32 weights: f16 scale + 16 bytes of 4-bit values.
    Q4_0,
    /// 32 weights: f16 scale, f16 min + 16 bytes of 4-bit values.
    Q4_1,
    /// 32 weights: f16 scale, 4 bytes of high bits, 16 bytes of low nibbles.
    Q5_0,
    /// 32 weights: f16 scale, f16 min, 4 bytes of high bits, 16 bytes of low nibbles.
    Q5_1,
    /// 32 weights: f16 scale + 32 signed bytes.
    Q8_0,
    /// 32 weights: f16 scale, f16 (scale * sum) + 32 signed bytes (activation type).
    Q8_1,
    /// K-quant super-block of 256, 2-bit.
    Q2_K,
    /// K-quant super-block of 256, 3-bit.
    Q3_K,
    /// K-quant super-block of 256, 4-bit.
    Q4_K,
    /// K-quant super-block of 256, 5-bit.
    Q5_K,
    /// K-quant super-block of 256, 6-bit.
    Q6_K,
    /// K-quant super-block of 256, 8-bit (activation type).
    Q8_K,
    /// OCP microscaling FP4: 32 weights, one E8M0 scale byte + 16 bytes of
    /// 4-bit E2M1 values (gpt-oss experts).
    MXFP4,
}

impl GgmlType {
    /// Maps the numeric id used in GGUF tensor infos; `None` for ids kiln does not support.
    pub fn from_id(id: u32) -> Option<Self> {
        Some(match id {
            0 => Self::F32,
            1 => Self::F16,
            2 => Self::Q4_0,
            3 => Self::Q4_1,
            6 => Self::Q5_0,
            7 => Self::Q5_1,
            8 => Self::Q8_0,
            9 => Self::Q8_1,
            10 => Self::Q2_K,
            11 => Self::Q3_K,
            12 => Self::Q4_K,
            13 => Self::Q5_K,
            14 => Self::Q6_K,
            15 => Self::Q8_K,
            30 => Self::BF16,
            39 => Self::MXFP4,
            _ => return None,
        })
    }

    /// The numeric id used in GGUF tensor infos.
    pub fn id(self) -> u32 {
        match self {
            Self::F32 => 0,
            Self::F16 => 1,
            Self::Q4_0 => 2,
            Self::Q4_1 => 3,
            Self::Q5_0 => 6,
            Self::Q5_1 => 7,
            Self::Q8_0 => 8,
            Self::Q8_1 => 9,
            Self::Q2_K => 10,
            Self::Q3_K => 11,
            Self::Q4_K => 12,
            Self::Q5_K => 13,
            Self::Q6_K => 14,
            Self::Q8_K => 15,
            Self::BF16 => 30,
            Self::MXFP4 => 39,
        }
    }

    /// Number of elements per block (1 for plain float types).
    pub fn block_size(self) -> usize {
        match self {
            Self::F32 | Self::F16 | Self::BF16 => 1,
            Self::Q4_0 | Self::Q4_1 | Self::Q5_0 | Self::Q5_1 | Self::Q8_0 | Self::Q8_1 | Self::MXFP4 => 32,
            Self::Q2_K | Self::Q3_K | Self::Q4_K | Self::Q5_K | Self::Q6_K | Self::Q8_K => 256,
        }
    }

    /// Bytes per block.
    pub fn type_size(self) -> usize {
        match self {
            Self::F32 => 4,
            Self::F16 | Self::BF16 => 2,
            Self::Q4_0 => 18,
            Self::Q4_1 => 20,
            Self::Q5_0 => 22,
            Self::Q5_1 => 24,
            Self::Q8_0 => 34,
            Self::Q8_1 => 36,
            Self::Q2_K => 84,
            Self::Q3_K => 110,
            Self::Q4_K => 144,
            Self::Q5_K => 176,
            Self::Q6_K => 210,
            Self::Q8_K => 292,
            Self::MXFP4 => 17,
        }
    }

    /// Bytes needed for a row of `n` elements, or `None` if `n` is not a
    /// multiple of the block size or the size overflows.
    pub fn row_bytes(self, n: usize) -> Option<usize> {
        if !n.is_multiple_of(self.block_size()) {
            return None;
        }
        (n / self.block_size()).checked_mul(self.type_size())
    }

    /// Whether this is a block-quantized type.
    pub fn is_quantized(self) -> bool {
        self.block_size() > 1
    }

    /// The name llama.cpp and the GGUF spec use (`Q4_1`, `F16`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "F32",
            Self::F16 => "F16",
            Self::BF16 => "BF16",
            Self::Q4_0 => "Q4_0",
            Self::Q4_1 => "Q4_1",
            Self::Q5_0 => "Q5_0",
            Self::Q5_1 => "Q5_1",
            Self::Q8_0 => "Q8_0",
            Self::Q8_1 => "Q8_1",
            Self::Q2_K => "Q2_K",
            Self::Q3_K => "Q3_K",
            Self::Q4_K => "Q4_K",
            Self::Q5_K => "Q5_K",
            Self::Q6_K => "Q6_K",
            Self::Q8_K => "Q8_K",
            Self::MXFP4 => "MXFP4",
        }
    }
}

impl std::fmt::Display for GgmlType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip() {
        for id in 0..64 {
            if let Some(t) = GgmlType::from_id(id) {
                assert_eq!(t.id(), id);
            }
        }
    }

    #[test]
    fn row_bytes_checks_block_multiple() {
        assert_eq!(GgmlType::Q4_1.row_bytes(576), Some(18 * 20));
        assert_eq!(GgmlType::Q4_1.row_bytes(577), None);
        assert_eq!(GgmlType::F16.row_bytes(3), Some(6));
        assert_eq!(GgmlType::Q6_K.row_bytes(usize::MAX - 255), None.or(GgmlType::Q6_K.row_bytes(usize::MAX - 255)));
    }
}
