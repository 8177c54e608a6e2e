//! `MXFP4` (OCP microscaling FP4, as gpt-oss ships its experts): a block of
//! 32 values is one E8M0 scale byte `e` and 16 bytes of 4-bit E2M1 codes,
//! element `j < 16` in the low nibble of byte `j` and `j + 16` in its high
//! nibble. A code is a sign bit and a magnitude in {0, 0.5, 1, 1.5, 2, 3, 4, 6};
//! kiln keeps twice the magnitude as an integer ([`FP4_VALUES`], −12..12) and
//! half the scale, `2^(e−128)`, so a block is integers times one `f32`.

/// Twice the E2M1 value of each 4-bit code.
pub(crate) const FP4_VALUES: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// `2^(e−128)`: half the E8M0 scale `2^(e−127)`, exact for every byte
/// (subnormal for `e < 2`).
#[inline(always)]
pub(crate) fn e8m0_half(e: u8) -> f32 {
    if e < 2 {
        f32::from_bits(0x0020_0000 << e)
    } else {
        f32::from_bits(u32::from(e - 1) << 23)
    }
}

pub(super) fn dequant_mxfp4(b: &[u8], y: &mut [f32]) {
    let d = e8m0_half(b[0]);
    for (j, &q) in b[1..17].iter().enumerate() {
        y[j] = f32::from(FP4_VALUES[usize::from(q & 0x0F)]) * d;
        y[j + 16] = f32::from(FP4_VALUES[usize::from(q >> 4)]) * d;
    }
}

/// The code whose value (times `d`) is nearest `x`; ties go to the lower code.
fn nearest_code(x: f32, d: f32) -> u8 {
    let mut best = (0u8, f32::INFINITY);
    for (code, &v) in FP4_VALUES.iter().enumerate() {
        let err = (x - f32::from(v) * d).abs();
        if err < best.1 {
            best = (code as u8, err);
        }
    }
    best.0
}

/// The scale is the power of two that puts the block's largest magnitude
/// in the top binade of E2M1 (`e = ⌊log2 amax⌋ − 2 + 127`, as the format's
/// reference quantizer); each value takes the nearest code.
pub(super) fn quant_mxfp4(x: &[f32], b: &mut [u8]) {
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let e =
        if amax > 0.0 && amax.is_finite() { (amax.log2().floor() - 2.0 + 127.0).clamp(0.0, 254.0) as u8 } else { 0 };
    let d = e8m0_half(e);
    b[0] = e;
    for j in 0..16 {
        b[1 + j] = nearest_code(x[j], d) | (nearest_code(x[j + 16], d) << 4);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_is_a_power_of_two_for_every_byte() {
        for e in 0..=255u8 {
            let want = 2f64.powi(i32::from(e) - 128);
            assert_eq!(f64::from(e8m0_half(e)), want, "e = {e}");
        }
    }

    #[test]
    fn codes_decode_to_e2m1_values() {
        // Code 0b0101 is +3.0 (E2M1 1.5 × 2) with e = 127 (scale 1, half 0.5).
        let mut b = [0u8; 17];
        b[0] = 127;
        b[1] = 0x05 | (0x0F << 4);
        b[2] = 0x09;
        let mut y = [f32::NAN; 32];
        dequant_mxfp4(&b, &mut y);
        assert_eq!((y[0], y[16], y[1], y[17], y[5]), (3.0, -6.0, -0.5, 0.0, 0.0));
    }

    #[test]
    fn values_on_the_grid_round_trip() {
        let x: Vec<f32> = (0..32).map(|i| f32::from(FP4_VALUES[i % 16]) * 0.25).collect();
        let mut b = [0u8; 17];
        quant_mxfp4(&x, &mut b);
        let mut y = [0f32; 32];
        dequant_mxfp4(&b, &mut y);
        assert_eq!(&y[..], &x[..]);
    }
}
