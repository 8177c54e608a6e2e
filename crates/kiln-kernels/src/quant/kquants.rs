//! The 256-element K-quant super-block formats (read only, plus `Q8_K`).

use super::{f16_at, put_f16};

/// The 6-bit (scale, min) pair `j` of a `Q4_K`/`Q5_K` 12-byte scale array.
#[inline(always)]
pub(crate) fn scale_min_k4(j: usize, s: &[u8]) -> (u8, u8) {
    if j < 4 {
        (s[j] & 63, s[j + 4] & 63)
    } else {
        ((s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4), (s[j + 4] >> 4) | ((s[j] >> 6) << 4))
    }
}

/// Q2_K: `scales[16]` (low nibble scale, high nibble min), `qs[64]`, d, dmin.
pub(super) fn dequant_q2_k(b: &[u8], y: &mut [f32]) {
    let (scales, qs) = (&b[0..16], &b[16..80]);
    let (d, dmin) = (f16_at(b, 80), f16_at(b, 82));
    let mut k = 0;
    for (half, q) in qs.chunks_exact(32).enumerate() {
        for shift in 0..4 {
            for part in 0..2 {
                let sc = scales[half * 8 + shift * 2 + part];
                let (dl, ml) = (d * f32::from(sc & 0x0F), dmin * f32::from(sc >> 4));
                for &v in &q[part * 16..part * 16 + 16] {
                    y[k] = dl * f32::from((v >> (2 * shift)) & 3) - ml;
                    k += 1;
                }
            }
        }
    }
}

/// The 16 signed 6-bit scales of a Q3_K block (biased by 32 in storage).
fn q3_k_scales(s: &[u8]) -> [i8; 16] {
    let mut out = [0i8; 16];
    for (j, o) in out.iter_mut().enumerate() {
        let low = if j < 8 { s[j] & 0x0F } else { s[j - 8] >> 4 };
        let high = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
        *o = (low | (high << 4)) as i8 - 32;
    }
    out
}

/// Q3_K: `hmask[32]`, `qs[64]`, `scales[12]`, d.
pub(super) fn dequant_q3_k(b: &[u8], y: &mut [f32]) {
    let (hmask, qs) = (&b[0..32], &b[32..96]);
    let scales = q3_k_scales(&b[96..108]);
    let d = f16_at(b, 108);
    let mut k = 0;
    for (half, q) in qs.chunks_exact(32).enumerate() {
        for shift in 0..4 {
            let bit = 1u8 << (half * 4 + shift);
            for part in 0..2 {
                let dl = d * f32::from(scales[half * 8 + shift * 2 + part]);
                for l in part * 16..part * 16 + 16 {
                    let low = i32::from((q[l] >> (2 * shift)) & 3);
                    let v = low - if hmask[l] & bit != 0 { 0 } else { 4 };
                    y[k] = dl * v as f32;
                    k += 1;
                }
            }
        }
    }
}

/// Block `j` (values `32j..32j + 32`) of a Q4_K superblock in Q4_1's form:
/// the 4-bit values and `(a, b)` with `w = a·q − b` (exactly as
/// [`dequant_q4_k`] computes them).
pub(crate) fn q4_k_block32(b: &[u8], j: usize) -> ([u8; 32], f32, f32) {
    let (d, dmin, scales) = (f16_at(b, 0), f16_at(b, 2), &b[4..16]);
    let (sc, m) = scale_min_k4(j, scales);
    let (c, shift) = (j / 2, 4 * (j % 2));
    let mut q = [0u8; 32];
    for (l, q) in q.iter_mut().enumerate() {
        *q = (b[16 + 32 * c + l] >> shift) & 0x0F;
    }
    (q, d * f32::from(sc), dmin * f32::from(m))
}

/// Q4_K: d, dmin, `scales[12]`, `qs[128]`.
pub(super) fn dequant_q4_k(b: &[u8], y: &mut [f32]) {
    let (d, dmin, scales, qs) = (f16_at(b, 0), f16_at(b, 2), &b[4..16], &b[16..144]);
    for (c, q) in qs.chunks_exact(32).enumerate() {
        for (nib, shift) in [(0, 0u8), (1, 4)] {
            let (sc, m) = scale_min_k4(2 * c + nib, scales);
            let (dl, ml) = (d * f32::from(sc), dmin * f32::from(m));
            for (l, &v) in q.iter().enumerate() {
                y[64 * c + 32 * nib + l] = dl * f32::from((v >> shift) & 0x0F) - ml;
            }
        }
    }
}

/// Block `j` of a Q5_K superblock in Q5_1's form: the 5-bit values and
/// `(a, b)` with `w = a·q − b` (as [`dequant_q5_k`] computes them).
pub(crate) fn q5_k_block32(b: &[u8], j: usize) -> ([u8; 32], f32, f32) {
    let (d, dmin, scales, qh) = (f16_at(b, 0), f16_at(b, 2), &b[4..16], &b[16..48]);
    let (sc, m) = scale_min_k4(j, scales);
    let (c, shift) = (j / 2, 4 * (j % 2));
    let mut q = [0u8; 32];
    for (l, q) in q.iter_mut().enumerate() {
        *q = ((b[48 + 32 * c + l] >> shift) & 0x0F) | (((qh[l] >> j) & 1) << 4);
    }
    (q, d * f32::from(sc), dmin * f32::from(m))
}

/// Q5_K: d, dmin, `scales[12]`, `qh[32]`, `qs[128]`.
pub(super) fn dequant_q5_k(b: &[u8], y: &mut [f32]) {
    let (d, dmin, scales, qh, qs) = (f16_at(b, 0), f16_at(b, 2), &b[4..16], &b[16..48], &b[48..176]);
    for (c, q) in qs.chunks_exact(32).enumerate() {
        for (nib, shift) in [(0, 0u8), (1, 4)] {
            let (sc, m) = scale_min_k4(2 * c + nib, scales);
            let (dl, ml) = (d * f32::from(sc), dmin * f32::from(m));
            let bit = 1u8 << (2 * c + nib);
            for (l, &v) in q.iter().enumerate() {
                let hi = if qh[l] & bit != 0 { 16 } else { 0 };
                y[64 * c + 32 * nib + l] = dl * f32::from(((v >> shift) & 0x0F) + hi) - ml;
            }
        }
    }
}

/// The 256 signed values (`q - 32`) of a Q6_K superblock and its 16 scales
/// times `d` (value `i` is `scale[i / 16] · v[i]`, as [`dequant_q6_k`]).
pub(crate) fn q6_k_values(b: &[u8]) -> ([i8; 256], [f32; 16]) {
    let (ql, qh, sc) = (&b[0..128], &b[128..192], &b[192..208]);
    let d = f16_at(b, 208);
    let mut v = [0i8; 256];
    for half in 0..2 {
        let (ql, qh) = (&ql[64 * half..], &qh[32 * half..]);
        for l in 0..32 {
            let h = qh[l];
            let q = [
                (ql[l] & 0x0F) | ((h & 3) << 4),
                (ql[l + 32] & 0x0F) | (((h >> 2) & 3) << 4),
                (ql[l] >> 4) | (((h >> 4) & 3) << 4),
                (ql[l + 32] >> 4) | (((h >> 6) & 3) << 4),
            ];
            for (i, q) in q.into_iter().enumerate() {
                v[128 * half + l + 32 * i] = q as i8 - 32;
            }
        }
    }
    (v, std::array::from_fn(|g| d * f32::from(sc[g] as i8)))
}

/// Q6_K: `ql[128]`, `qh[64]`, `scales[16]` (i8), d.
pub(crate) fn dequant_q6_k(b: &[u8], y: &mut [f32]) {
    let (v, scale) = q6_k_values(b);
    for (i, (y, &v)) in y.iter_mut().zip(&v).enumerate() {
        *y = scale[i / 16] * f32::from(v);
    }
}

/// Q8_K: d (f32), `qs[256]` (i8), `bsums[16]` (i16).
pub(super) fn dequant_q8_k(b: &[u8], y: &mut [f32]) {
    let d = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    for (y, &q) in y.iter_mut().zip(&b[4..260]) {
        *y = d * f32::from(q as i8);
    }
}

pub(super) fn quant_q8_k(x: &[f32], b: &mut [u8]) {
    let (d, _) = super::legacy::quant_q8(x, &mut b[4..260]);
    b[0..4].copy_from_slice(&d.to_le_bytes());
    for g in 0..16 {
        let s: i32 = b[4 + 16 * g..20 + 16 * g].iter().map(|&v| i32::from(v as i8)).sum();
        b[260 + 2 * g..262 + 2 * g].copy_from_slice(&(s as i16).to_le_bytes());
    }
}

/// Quantizes 256 values to a Q4_K superblock: per 32-value block the range
/// `[min, max]` in 15 steps, its step `a` and offset `b = -min` (when `min < 0`)
/// as 6-bit multiples of the superblock's `d` and `dmin`. Simple rounding
/// (no search for the best scales, as llama.cpp's quantizer does): for
/// tests and random models.
pub(super) fn quant_q4_k(x: &[f32], b: &mut [u8]) {
    let mut a = [0f32; 8];
    let mut off = [0f32; 8];
    for (j, blk) in x.chunks_exact(32).enumerate() {
        let lo = blk.iter().fold(f32::INFINITY, |m, &v| m.min(v)).min(0.0);
        let hi = blk.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
        a[j] = (hi - lo) / 15.0;
        off[j] = -lo;
    }
    let d = a.iter().fold(0f32, |m, &v| m.max(v)) / 63.0;
    let dmin = off.iter().fold(0f32, |m, &v| m.max(v)) / 63.0;
    put_f16(b, 0, d);
    put_f16(b, 2, dmin);
    // The stored scales, as the decoder reads them back.
    let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
    // Steps round up (no value past 15 steps), offsets to nearest.
    let six = |v: f32, unit: f32| if unit > 0.0 { (v / unit).clamp(0.0, 63.0) } else { 0.0 };
    let sc: [u8; 8] = std::array::from_fn(|j| six(a[j], d).ceil().min(63.0) as u8);
    let m: [u8; 8] = std::array::from_fn(|j| six(off[j], dmin).round() as u8);
    let s = &mut b[4..16];
    for j in 0..4 {
        s[j] = sc[j] | ((sc[j + 4] >> 4) << 6);
        s[j + 4] = m[j] | ((m[j + 4] >> 4) << 6);
        s[j + 8] = (sc[j + 4] & 0x0F) | ((m[j + 4] & 0x0F) << 4);
    }
    for (j, blk) in x.chunks_exact(32).enumerate() {
        let (step, base) = (d * f32::from(sc[j]), dmin * f32::from(m[j]));
        let (c, shift) = (j / 2, 4 * (j % 2));
        for (l, &v) in blk.iter().enumerate() {
            let q = if step > 0.0 { ((v + base) / step).round().clamp(0.0, 15.0) as u8 } else { 0 };
            let byte = &mut b[16 + 32 * c + l];
            *byte = if shift == 0 { (*byte & 0xF0) | q } else { (*byte & 0x0F) | (q << 4) };
        }
    }
}

/// Quantizes 256 values to a Q6_K superblock: per 16 values a step of
/// `amax / 31` as an 8-bit multiple of the superblock's `d`. Simple
/// rounding: for tests and random models.
pub(super) fn quant_q6_k(x: &[f32], b: &mut [u8]) {
    let steps: [f32; 16] =
        std::array::from_fn(|g| x[16 * g..16 * g + 16].iter().fold(0f32, |m, v| m.max(v.abs())) / 31.0);
    put_f16(b, 208, steps.iter().fold(0f32, |m, &v| m.max(v)) / 127.0);
    let d = f16_at(b, 208);
    // Steps round up, so no value needs more than 31 of them.
    let sc: [u8; 16] = std::array::from_fn(|g| if d > 0.0 { (steps[g] / d).ceil().clamp(0.0, 127.0) as u8 } else { 0 });
    b[192..208].copy_from_slice(&sc);
    b[..192].fill(0);
    for (i, &v) in x.iter().enumerate() {
        let step = d * f32::from(sc[i / 16]);
        let q = if step > 0.0 { (v / step).round().clamp(-32.0, 31.0) as i32 + 32 } else { 32 } as u8;
        // Inverse of dequant_q6_k's layout: half, then l and i of y[l + 32 i].
        let (half, r) = (i / 128, i % 128);
        let (l, k) = (r % 32, r / 32);
        let ql = 64 * half + l + if k % 2 == 1 { 32 } else { 0 };
        b[ql] |= if k < 2 { q & 0x0F } else { (q & 0x0F) << 4 };
        b[128 + 32 * half + l] |= (q >> 4) << (2 * k);
    }
}
