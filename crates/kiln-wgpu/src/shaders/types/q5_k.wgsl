// GGML Q5_K: Q4_K's blocks (f16 d and dmin, 12 scale bytes) with 32
// bytes of fifth bits after the scales, then the 128 bytes of nibbles:
// bit 2c of byte l is the fifth bit of value l of sub-block 2c, bit 2c + 1
// that of sub-block 2c + 1; x = d·sc·q − dmin·m (176 bytes, word-aligned).
const BLOCK_BYTES: u32 = 176u;

// Unit u: as Q4_K's (sub-blocks j = (u / 8) % 4 and j + 4, nibble word
// k = u % 8 of each), with word k of the fifth bits (bits j and j + 4).
fn unit_cols(u: u32) -> vec2<u32> {
    let col = 64u * (u >> 5u) + 8u * ((u >> 3u) & 3u) + (u & 7u);
    return vec2<u32>(col, col + 32u);
}

fn unit(row: u32, u: u32) -> Unit {
    let bl = u >> 5u;
    let j = (u >> 3u) & 3u;
    let k = u & 7u;
    let o = (row + bl * BLOCK_BYTES) >> 2u;
    let dm = unpack2x16float(w[o]);
    let s = k_scales(w[o + 1u], w[o + 2u], w[o + 3u], j);
    let h = w[o + 4u + k];
    let sh = 4u * (j & 1u);
    let qa = nibbles(w[o + 12u + 8u * (j >> 1u) + k], sh) + 16.0 * bits(h, j);
    let qb = nibbles(w[o + 28u + 8u * (j >> 1u) + k], sh) + 16.0 * bits(h, j + 4u);
    let c = unit_cols(u);
    return Unit(dm.x * s.x * qa - dm.y * s.y, dm.x * s.z * qb - dm.y * s.w, c.x, c.y);
}
