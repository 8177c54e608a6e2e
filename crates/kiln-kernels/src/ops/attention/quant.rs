//! Quantized K/V sides of the cache ([`KvType::Q8_0`], [`KvType::Q4_0`]):
//! GGML's 32-value blocks along the head dimension, each with an `f16`
//! scale `d` (`q8_0`: `x = d · q`, `q` a signed byte; `q4_0`:
//! `x = d · (q − 8)`, `q` a nibble), laid out within one (block, head) of
//! the cache for the kernels that read them in place:
//! - **K**, by 32-dimension group `g`: the `block_size` keys' scales
//!   (`f16`), then the values transposed as in the `f16` cache, so one load
//!   holds one dimension of 16 keys: `q8_0` `[32][block_size]` bytes;
//!   `q4_0` `[16][block_size]` bytes, byte `(e, t)` holding dimension
//!   `2e` of key `t` in its low nibble and `2e + 1` in its high one.
//! - **V**, by key: the key's `head_dim / 32` blocks exactly as GGML
//!   stores them (`q8_0`: `d`, 32 bytes; `q4_0`: `d`, 16 bytes with
//!   element `j` in the low nibble of byte `j` and `j + 16` in its high one).
//!
//! Both sizes are whole `u16`s: the cache stays a `u16` array.
//!
//! **Rotation.** A quantized side stores each head *rotated* by an
//! orthonormal Walsh-Hadamard transform `H` (over the largest power of two
//! dividing the head dimension, 64 for SmolLM2's heads): `H` spreads a few
//! large channels over all of them, so the 32-value blocks have no outlier
//! that sets a coarse scale for the rest (what makes `q4_0` keys lose
//! several percent of perplexity unrotated). Scores need no change but the
//! query's rotation (`Hq · Hk = q · k`, `H` orthonormal), and outputs over a
//! rotated V are rotated back (`H` is its own inverse). llama.cpp rotates
//! its quantized caches the same way.

use kiln_backend::KvType;

/// Values per quantization block.
pub(crate) const QK: usize = 32;

/// Rotates `x` in place by the normalized Walsh-Hadamard transform over
/// consecutive chunks of [`rotation_len`] values.
pub(crate) fn rotate_head(x: &mut [f32]) {
    let n = rotation_len(x.len());
    let scale = 1.0 / (n as f32).sqrt();
    for c in x.chunks_exact_mut(n) {
        let mut h = 1;
        while h < n {
            for i in (0..n).step_by(2 * h) {
                for j in i..i + h {
                    let (a, b) = (c[j], c[j + h]);
                    c[j] = a + b;
                    c[j + h] = a - b;
                }
            }
            h *= 2;
        }
        c.iter_mut().for_each(|v| *v *= scale);
    }
}

/// Values per rotation chunk: the largest power of two dividing `head_dim`.
pub(crate) fn rotation_len(head_dim: usize) -> usize {
    1 << head_dim.max(1).trailing_zeros()
}

/// `u16`s of one (block, head) of a side of type `ty`.
pub(crate) fn head_len(ty: KvType, block_size: usize, head_dim: usize) -> usize {
    match ty {
        KvType::F16 => block_size * head_dim,
        _ => block_size * ty.bytes(head_dim) / 2,
    }
}

/// `u16`s of one K group (32 dimensions of `bs` keys, with their scales).
#[inline]
pub(crate) fn k_group_len(ty: KvType, bs: usize) -> usize {
    bs * ty.block_bytes() / 2
}

/// Bytes of a `u16` slice.
#[inline]
pub(crate) fn bytes(x: &[u16]) -> &[u8] {
    // SAFETY: any `u16` is two initialized bytes; `u8` has alignment 1.
    unsafe { std::slice::from_raw_parts(x.as_ptr().cast(), x.len() * 2) }
}

/// Bytes of a mutable `u16` slice.
#[inline]
fn bytes_mut(x: &mut [u16]) -> &mut [u8] {
    // SAFETY: as [`bytes`]; every byte pattern is a valid `u16`.
    unsafe { std::slice::from_raw_parts_mut(x.as_mut_ptr().cast(), x.len() * 2) }
}

/// The scale and quantized values of 32 values (`q8_0`: signed bytes;
/// `q4_0`: nibbles 0..=15 with 8 the zero), as GGML rounds them.
fn quantize_block(ty: KvType, x: &[f32], q: &mut [u8; QK]) -> u16 {
    match ty {
        KvType::Q8_0 => {
            let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
            let d = amax / 127.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            for (q, &v) in q.iter_mut().zip(x) {
                *q = (v * id).round() as i8 as u8;
            }
            half::f16::from_f32(d).to_bits()
        }
        _ => {
            // The value of largest magnitude, with its sign, maps to -8.
            let max = x.iter().fold(0f32, |m, &v| if v.abs() > m.abs() { v } else { m });
            let d = max / -8.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            for (q, &v) in q.iter_mut().zip(x) {
                *q = ((v * id + 8.5) as i8).clamp(0, 15) as u8;
            }
            half::f16::from_f32(d).to_bits()
        }
    }
}

/// Writes key `t` (`x`: one head, `head_dim` values) into a quantized K
/// (block, head) `dst`.
pub(crate) fn write_k(ty: KvType, bs: usize, dst: &mut [u16], t: usize, x: &[f32]) {
    let gl = k_group_len(ty, bs);
    let mut q = [0u8; QK];
    for (g, xs) in x.chunks_exact(QK).enumerate() {
        let grp = &mut dst[g * gl..(g + 1) * gl];
        grp[t] = quantize_block(ty, xs, &mut q);
        let vals = &mut bytes_mut(grp)[2 * bs..];
        match ty {
            KvType::Q8_0 => {
                for (d, &v) in q.iter().enumerate() {
                    vals[d * bs + t] = v;
                }
            }
            _ => {
                for e in 0..QK / 2 {
                    vals[e * bs + t] = q[2 * e] | (q[2 * e + 1] << 4);
                }
            }
        }
    }
}

/// Writes key `t`'s V row (`x`: `head_dim` values) into a quantized V
/// (block, head) `dst`, in GGML's block layout.
pub(crate) fn write_v(ty: KvType, dst: &mut [u16], t: usize, x: &[f32]) {
    let bl = ty.block_bytes() / 2;
    let row = x.len() / QK * bl;
    let mut q = [0u8; QK];
    for (g, xs) in x.chunks_exact(QK).enumerate() {
        let blk = &mut dst[t * row + g * bl..t * row + (g + 1) * bl];
        blk[0] = quantize_block(ty, xs, &mut q);
        let vals = &mut bytes_mut(blk)[2..];
        match ty {
            KvType::Q8_0 => vals[..QK].copy_from_slice(&q),
            _ => {
                for j in 0..QK / 2 {
                    vals[j] = q[j] | (q[j + QK / 2] << 4);
                }
            }
        }
    }
}

#[inline]
fn f16(bits: u16) -> f32 {
    half::f16::from_bits(bits).to_f32()
}

/// Widens a quantized K (block, head) to `f32` in the `f16` cache's order
/// (`[head_dim][block_size]`).
pub(crate) fn widen_k(ty: KvType, bs: usize, hd: usize, src: &[u16], out: &mut [f32]) {
    let gl = k_group_len(ty, bs);
    for g in 0..hd / QK {
        let grp = &src[g * gl..(g + 1) * gl];
        let vals = &bytes(grp)[2 * bs..];
        for dd in 0..QK {
            let d = g * QK + dd;
            for t in 0..bs {
                let q = match ty {
                    KvType::Q8_0 => vals[dd * bs + t] as i8 as f32,
                    _ => (((vals[(dd / 2) * bs + t] >> (4 * (dd % 2))) & 0xF) as i32 - 8) as f32,
                };
                out[d * bs + t] = f16(grp[t]) * q;
            }
        }
    }
}

/// Widens a quantized V (block, head) to `f32` rows (`[block_size][head_dim]`).
pub(crate) fn widen_v(ty: KvType, bs: usize, hd: usize, src: &[u16], out: &mut [f32]) {
    let bl = ty.block_bytes() / 2;
    for t in 0..bs {
        for g in 0..hd / QK {
            let at = (t * (hd / QK) + g) * bl;
            let blk = &src[at..at + bl];
            let d = f16(blk[0]);
            let vals = &bytes(blk)[2..];
            let o = &mut out[t * hd + g * QK..][..QK];
            match ty {
                KvType::Q8_0 => {
                    for (o, &q) in o.iter_mut().zip(vals) {
                        *o = d * q as i8 as f32;
                    }
                }
                _ => {
                    for j in 0..QK / 2 {
                        o[j] = d * ((vals[j] & 0xF) as i32 - 8) as f32;
                        o[j + QK / 2] = d * ((vals[j] >> 4) as i32 - 8) as f32;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(n: usize, hd: usize) -> Vec<f32> {
        (0..n * hd).map(|i| ((i * 7919 % 1000) as f32 / 500.0 - 1.0) * (1.0 + (i % 5) as f32)).collect()
    }

    #[test]
    fn a_written_key_and_value_widen_back_within_half_a_step() {
        let (bs, hd) = (16, 64);
        for ty in [KvType::Q8_0, KvType::Q4_0] {
            let x = rows(bs, hd);
            let mut k = vec![0u16; head_len(ty, bs, hd)];
            let mut v = vec![0u16; head_len(ty, bs, hd)];
            for t in 0..bs {
                write_k(ty, bs, &mut k, t, &x[t * hd..(t + 1) * hd]);
                write_v(ty, &mut v, t, &x[t * hd..(t + 1) * hd]);
            }
            let (mut kf, mut vf) = (vec![0f32; bs * hd], vec![0f32; bs * hd]);
            widen_k(ty, bs, hd, &k, &mut kf);
            widen_v(ty, bs, hd, &v, &mut vf);
            let levels = if ty == KvType::Q8_0 { 127.0 } else { 8.0 };
            for t in 0..bs {
                for g in 0..hd / QK {
                    let blk = &x[t * hd + g * QK..][..QK];
                    let step = blk.iter().fold(0f32, |m, v| m.max(v.abs())) / levels;
                    for dd in 0..QK {
                        let d = g * QK + dd;
                        let want = x[t * hd + d];
                        // Half a step of rounding, plus the f16 scale's own rounding;
                        // q4_0's largest magnitude of the other sign clamps to 7 steps.
                        let edge = if ty == KvType::Q4_0 { 0.5 * step } else { 0.0 };
                        let tol = 0.5 * step + edge + want.abs() * 2e-3 + 1e-6;
                        assert!((kf[d * bs + t] - want).abs() <= tol, "{ty} K t{t} d{d}: {} vs {want}", kf[d * bs + t]);
                        assert!((vf[t * hd + d] - want).abs() <= tol, "{ty} V t{t} d{d}: {} vs {want}", vf[t * hd + d]);
                    }
                }
            }
        }
    }

    #[test]
    fn the_rotation_is_orthonormal_and_its_own_inverse() {
        let x: Vec<f32> = (0..96).map(|i| ((i * 37 % 11) as f32 - 5.0) * if i == 7 { 40.0 } else { 1.0 }).collect();
        assert_eq!(rotation_len(96), 32);
        assert_eq!(rotation_len(128), 128);
        let mut y = x.clone();
        rotate_head(&mut y);
        let norm = |v: &[f32]| v.iter().map(|a| a * a).sum::<f32>();
        assert!((norm(&x) - norm(&y)).abs() < 1e-3 * norm(&x));
        // The outlier is spread over its chunk.
        assert!(y.iter().map(|v| v.abs()).fold(0f32, f32::max) < 0.5 * 40.0 * 5.0);
        rotate_head(&mut y);
        for (a, b) in x.iter().zip(&y) {
            assert!((a - b).abs() < 1e-4, "{a} vs {b}");
        }
    }

    #[test]
    fn v_blocks_are_ggml_blocks() {
        // A V row of one block dequantizes with GGML's own block decoder.
        let x: Vec<f32> = (0..32).map(|i| i as f32 / 4.0 - 3.0).collect();
        for (ty, gty) in [(KvType::Q8_0, kiln_gguf::GgmlType::Q8_0), (KvType::Q4_0, kiln_gguf::GgmlType::Q4_0)] {
            let mut v = vec![0u16; head_len(ty, 1, 32)];
            write_v(ty, &mut v, 0, &x);
            let mut y = vec![0f32; 32];
            crate::quant::dequantize_row(gty, bytes(&v), &mut y).unwrap();
            if crate::quant::can_quantize(gty) {
                let mut q = vec![0u8; ty.block_bytes()];
                crate::quant::quantize_row(gty, &x, &mut q).unwrap();
                assert_eq!(q, bytes(&v), "{ty}: the weights' quantizer agrees");
            }
            let mut w = vec![0f32; 32];
            widen_v(ty, 1, 32, &v, &mut w);
            assert_eq!(y, w, "{ty}");
        }
    }
}
