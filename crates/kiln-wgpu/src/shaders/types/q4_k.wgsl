// GGML Q4_K: blocks of 256 values in 8 sub-blocks of 32 (144 bytes): f16
// scales d and dmin, 12 bytes of 6-bit sub-block scales and mins
// (`k_scale`), then 128 bytes of nibbles: bytes 32c .. 32c + 31 hold
// sub-block 2c in their low nibbles and 2c + 1 in their high ones;
// x = d·sc·q − dmin·m. Every block is word-aligned.
const BLOCK_BYTES: u32 = 144u;

// Unit u: nibble word k = u % 8 of sub-block j = (u / 8) % 4 and of
// sub-block j + 4 (chunks j / 2 and j / 2 + 2, the same nibbles) of block
// u / 32: columns 32j + 4k .. + 3 and 128 columns further. Sub-blocks j
// and j + 4 keep their scales in the same byte of each scale word
// (`k_scales`), so a unit decodes them without a branch.
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
    let sh = 4u * (j & 1u);
    let qa = nibbles(w[o + 4u + 8u * (j >> 1u) + k], sh);
    let qb = nibbles(w[o + 20u + 8u * (j >> 1u) + k], sh);
    let c = unit_cols(u);
    return Unit(dm.x * s.x * qa - dm.y * s.y, dm.x * s.z * qb - dm.y * s.w, c.x, c.y);
}
