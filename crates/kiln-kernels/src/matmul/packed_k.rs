//! The super-block packed kinds, `Q4_K` and `Q6_K` at close to their file
//! size (layout of the other kinds in `packed`).
//!
//! Rows are interleaved 16 per group as in every packed kind, but a group
//! keeps the file's super-blocks of 256 columns: per super-block a header
//! with each row's `f16` scales, then its 8 blocks of 32 columns, each a
//! *group-block* of 8-bit block scales and the quants:
//!
//! | bytes | `Q4K` (from `Q4_K`) | `Q6K` (from `Q6_K`) |
//! | --- | --- | --- |
//! | header 32 | `d`: row `r`'s at `2r` (`f16`) | `d`, the same |
//! | header 32 | `dmin`, likewise | — |
//! | block 32 | row `r`'s scale at `2r`, minimum at `2r + 1` (`u8`, the file's 6-bit values) | row `r`'s scales of values 0..16 at `2r` and 16..32 at `2r + 1` (`i8`) |
//! | block 4 × 64 | the low 4 bits, as `Q4_x` (chunk `k`: row `r`'s bytes at `64k + 4r`, low nibble element `4k + i`, high `16 + 4k + i`) | the same |
//! | block 2 × 64 | — | the high 2 bits: chunk `c`, byte `64c + 4r + i` holds in bits 0-1, 2-3, 4-5 and 6-7 those of elements `8c + i`, `16 + 8c + i`, `8c + 4 + i` and `20 + 8c + i` |
//!
//! `Q4K` is 2368 bytes per 16 × 256 weights (4.625 bits per weight, the
//! file's 4.5 plus its scales unpacked to bytes), `Q6K` 3360 (6.5625 bits,
//! the file's size). A weight is `w = dd · u + mm` with `u` the unsigned
//! 4- or 6-bit value: `Q4K` `dd = d · sc`, `mm = -dmin · m`; `Q6K`
//! `dd = d · sc` (per 16 values), `mm = -32 · dd`, computed as
//! `dd · (u - 32)` as the file's own dequantizing does, so unpacking gives
//! every value back exactly.
//!
//! The kernels read the 6-bit values unsigned (the high plane shifted and
//! ORed onto the nibbles) and take the `-32` offset off with the activations'
//! sums per 16 values (`ActQ8::h`).

use super::act::QK;
use super::packed::{KForm, PackKind, PackedRows, PACK_ROWS};
use super::WeightView;
use crate::quant::f16_at;
use crate::quant::kquants::{q4_k_block32, q6_k_values, scale_min_k4};

/// Columns per super-block.
pub(crate) const QKK: usize = 256;
/// Blocks of 32 per super-block.
pub(crate) const BLOCKS: usize = QKK / QK;

/// Writes row `lane`'s super-block `sb` (the file's bytes, `Q4_K` or `Q6_K`
/// as `kind` says) into its group's super-block `out`.
pub(super) fn write_super(kind: PackKind, out: &mut [u8], lane: usize, sb: &[u8]) {
    let (hdr, gbb) = (kind.super_header(), kind.group_block_bytes());
    if kind == PackKind::Q6K {
        // The file's d and scales bit for bit, the values as 0..64.
        out[2 * lane..2 * lane + 2].copy_from_slice(&sb[208..210]);
        let (v, _) = q6_k_values(sb);
        let u = v.map(|v| (v + 32) as u8);
        for j in 0..BLOCKS {
            let gb = &mut out[hdr + j * gbb..][..gbb];
            gb[2 * lane] = sb[192 + 2 * j];
            gb[2 * lane + 1] = sb[192 + 2 * j + 1];
            let u: &[u8; QK] = (&u[QK * j..QK * (j + 1)]).try_into().unwrap_or_else(|_| unreachable!());
            write_nibbles(gb, lane, u);
            for c in 0..2 {
                for i in 0..4 {
                    let e = 8 * c + i;
                    let h = (u[e] >> 4) | ((u[16 + e] >> 4) << 2) | ((u[e + 4] >> 4) << 4) | ((u[20 + e] >> 4) << 6);
                    gb[QK + 4 * 64 + 64 * c + 4 * lane + i] = h;
                }
            }
        }
        return;
    }
    out[2 * lane..2 * lane + 2].copy_from_slice(&sb[0..2]);
    out[32 + 2 * lane..32 + 2 * lane + 2].copy_from_slice(&sb[2..4]);
    for j in 0..BLOCKS {
        let gb = &mut out[hdr + j * gbb..][..gbb];
        let (sc, m) = scale_min_k4(j, &sb[4..16]);
        gb[2 * lane] = sc;
        gb[2 * lane + 1] = m;
        write_nibbles(gb, lane, &q4_k_block32(sb, j).0);
    }
}

/// The low 4 bits of row `lane`'s 32 values into group-block `gb`.
fn write_nibbles(gb: &mut [u8], lane: usize, u: &[u8; QK]) {
    for k in 0..4 {
        for i in 0..4 {
            gb[QK + 64 * k + 4 * lane + i] = (u[4 * k + i] & 0x0F) | ((u[16 + 4 * k + i] & 0x0F) << 4);
        }
    }
}

/// Row `r`'s block `b` of a super-block kind: values `v` and, per half of
/// 16, `dd` and `mm` with `w = dd · v + mm` (`Q6K`: `v` signed, `mm = 0`;
/// `Q4K`: `v` unsigned, the same `dd` and `mm` for both halves).
pub(crate) fn row_block(p: &PackedRows, r: usize, b: usize) -> ([i8; QK], [f32; 2], [f32; 2]) {
    let kind = p.kind();
    let nb = p.cols() / QK;
    let (g, lane) = (r / PACK_ROWS, r % PACK_ROWS);
    let group = &p.bytes()[g * kind.group_bytes(nb)..];
    let hdr = &group[kind.header_at(b)..];
    let gb = &group[kind.block_at(b)..][..kind.group_block_bytes()];
    let d = f16_at(hdr, 2 * lane);
    let mut v = [0i8; QK];
    for k in 0..4 {
        for i in 0..4 {
            let byte = gb[QK + 64 * k + 4 * lane + i];
            v[4 * k + i] = (byte & 0x0F) as i8;
            v[16 + 4 * k + i] = (byte >> 4) as i8;
        }
    }
    if kind == PackKind::Q6K {
        for c in 0..2 {
            for i in 0..4 {
                let h = gb[QK + 4 * 64 + 64 * c + 4 * lane + i];
                let e = 8 * c + i;
                for (at, shift) in [(e, 0), (16 + e, 2), (e + 4, 4), (20 + e, 6)] {
                    v[at] = (v[at] | (((h >> shift) & 3) << 4) as i8) - 32;
                }
            }
        }
        let dd = |j: usize| d * f32::from(gb[2 * lane + j] as i8);
        return (v, [dd(0), dd(1)], [0.0; 2]);
    }
    let (dd, mm) = (d * f32::from(gb[2 * lane]), -(f16_at(hdr, 32 + 2 * lane) * f32::from(gb[2 * lane + 1])));
    (v, [dd; 2], [mm; 2])
}

/// The super-block kind `w` packs into in form `form`, if any.
pub(super) fn kind_for(w: &WeightView<'_>, form: KForm) -> Option<PackKind> {
    match w.ty {
        crate::GgmlType::Q4_K if form == KForm::SuperBlocks => Some(PackKind::Q4K),
        crate::GgmlType::Q6_K if form == KForm::SuperBlocks => Some(PackKind::Q6K),
        _ => None,
    }
}

/// Row `lane`'s dot product with token block `i` of the activations
/// (portable reference).
pub(super) fn dot_block(p: &PackedRows, r: usize, b: usize, q: &[i8], dx: f32) -> f32 {
    let (v, dd, mm) = row_block(p, r, b);
    let mut out = 0f32;
    for h in 0..2 {
        let (vs, qs) = (&v[16 * h..16 * h + 16], &q[16 * h..16 * h + 16]);
        let vq: i32 = vs.iter().zip(qs).map(|(&v, &q)| i32::from(v) * i32::from(q)).sum();
        let qsum: i32 = qs.iter().map(|&q| i32::from(q)).sum();
        out += dx * (dd[h] * vq as f32 + mm[h] * qsum as f32);
    }
    out
}
