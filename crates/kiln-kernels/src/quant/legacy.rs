//! The 32-element block formats: `Q4_0`, `Q4_1`, `Q5_0`, `Q5_1`, `Q8_0`, `Q8_1`.
//!
//! 4/5-bit blocks keep element `j < 16` in the low nibble of byte `j` and
//! element `j + 16` in its high nibble; the fifth bit of element `j` is bit
//! `j` of a little-endian `u32`.

use super::{f16_at, put_f16};

/// The 32 nibbles of a 4-bit block in element order.
#[inline(always)]
fn nibbles(qs: &[u8]) -> impl Iterator<Item = (usize, u8)> + '_ {
    qs.iter().take(16).enumerate().flat_map(|(j, &b)| [(j, b & 0x0F), (j + 16, b >> 4)])
}

pub(super) fn dequant_q4_0(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    for (j, q) in nibbles(&b[2..18]) {
        y[j] = (q as i32 - 8) as f32 * d;
    }
}

pub(super) fn dequant_q4_1(b: &[u8], y: &mut [f32]) {
    let (d, m) = (f16_at(b, 0), f16_at(b, 2));
    for (j, q) in nibbles(&b[4..20]) {
        y[j] = q as f32 * d + m;
    }
}

#[inline(always)]
fn qh_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

pub(super) fn dequant_q5_0(b: &[u8], y: &mut [f32]) {
    let (d, qh) = (f16_at(b, 0), qh_at(b, 2));
    for (j, q) in nibbles(&b[6..22]) {
        let q = q as u32 | (((qh >> j) & 1) << 4);
        y[j] = (q as i32 - 16) as f32 * d;
    }
}

pub(super) fn dequant_q5_1(b: &[u8], y: &mut [f32]) {
    let (d, m, qh) = (f16_at(b, 0), f16_at(b, 2), qh_at(b, 4));
    for (j, q) in nibbles(&b[8..24]) {
        let q = q as u32 | (((qh >> j) & 1) << 4);
        y[j] = q as f32 * d + m;
    }
}

pub(super) fn dequant_q8_0(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    for (y, &q) in y.iter_mut().zip(&b[2..34]) {
        *y = q as i8 as f32 * d;
    }
}

pub(super) fn dequant_q8_1(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    for (y, &q) in y.iter_mut().zip(&b[4..36]) {
        *y = q as i8 as f32 * d;
    }
}

/// The element of largest magnitude (keeping its sign).
fn signed_amax(x: &[f32]) -> f32 {
    x.iter().fold(0f32, |m, &v| if v.abs() > m.abs() { v } else { m })
}

/// Symmetric `bits`-bit quantization: `d = max / -2^(bits-1)` so the largest
/// magnitude maps exactly to `-2^(bits-1)`; stores `q + 2^(bits-1)`.
fn quant_symmetric(x: &[f32], bits: u32) -> (f32, [u8; 32]) {
    let half = 1i32 << (bits - 1);
    let d = signed_amax(x) / -(half as f32);
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut q = [0u8; 32];
    for (q, &v) in q.iter_mut().zip(x) {
        *q = ((v * id).round() as i32 + half).clamp(0, 2 * half - 1) as u8;
    }
    (d, q)
}

/// Asymmetric quantization onto `0..=levels`: returns `(d, min, q)`.
fn quant_asymmetric(x: &[f32], levels: u32) -> (f32, f32, [u8; 32]) {
    let min = x.iter().copied().fold(f32::INFINITY, f32::min);
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let d = (max - min) / levels as f32;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut q = [0u8; 32];
    for (q, &v) in q.iter_mut().zip(x) {
        *q = (((v - min) * id).round() as i32).clamp(0, levels as i32) as u8;
    }
    (d, min, q)
}

fn pack_nibbles(q: &[u8; 32], out: &mut [u8]) {
    for j in 0..16 {
        out[j] = (q[j] & 0x0F) | ((q[j + 16] & 0x0F) << 4);
    }
}

fn high_bits(q: &[u8; 32]) -> [u8; 4] {
    let qh = q.iter().enumerate().fold(0u32, |h, (j, &v)| h | (u32::from(v >> 4 & 1) << j));
    qh.to_le_bytes()
}

pub(super) fn quant_q4_0(x: &[f32], b: &mut [u8]) {
    let (d, q) = quant_symmetric(x, 4);
    put_f16(b, 0, d);
    pack_nibbles(&q, &mut b[2..18]);
}

pub(super) fn quant_q4_1(x: &[f32], b: &mut [u8]) {
    let (d, m, q) = quant_asymmetric(x, 15);
    put_f16(b, 0, d);
    put_f16(b, 2, m);
    pack_nibbles(&q, &mut b[4..20]);
}

pub(super) fn quant_q5_0(x: &[f32], b: &mut [u8]) {
    let (d, q) = quant_symmetric(x, 5);
    put_f16(b, 0, d);
    b[2..6].copy_from_slice(&high_bits(&q));
    pack_nibbles(&q, &mut b[6..22]);
}

pub(super) fn quant_q5_1(x: &[f32], b: &mut [u8]) {
    let (d, m, q) = quant_asymmetric(x, 31);
    put_f16(b, 0, d);
    put_f16(b, 2, m);
    b[4..8].copy_from_slice(&high_bits(&q));
    pack_nibbles(&q, &mut b[8..24]);
}

/// `d = amax / 127`, `q = round(x / d)`; returns `(d, Σq)`.
pub(super) fn quant_q8(x: &[f32], qs: &mut [u8]) -> (f32, i32) {
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut sum = 0;
    for (q, &v) in qs.iter_mut().zip(x) {
        let v = (v * id).round().clamp(-127.0, 127.0) as i8;
        sum += i32::from(v);
        *q = v as u8;
    }
    (d, sum)
}

pub(super) fn quant_q8_0(x: &[f32], b: &mut [u8]) {
    let (d, _) = quant_q8(x, &mut b[2..34]);
    put_f16(b, 0, d);
}

pub(super) fn quant_q8_1(x: &[f32], b: &mut [u8]) {
    let (d, sum) = quant_q8(x, &mut b[4..36]);
    put_f16(b, 0, d);
    put_f16(b, 2, d * sum as f32);
}
