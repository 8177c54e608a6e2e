// GGML Q4_K: blocks of 256 values in 8 sub-blocks of 32 (144 bytes): f16
// scales d and dmin, 12 bytes of 6-bit sub-block scales and mins
// (`k_scale`), then 128 bytes of nibbles: bytes 32c .. 32c + 31 hold
// sub-block 2c in their low nibbles and 2c + 1 in their high ones;
// x = d·sc·q − dmin·m. Every block is word-aligned.
const BLOCK_BYTES: u32 = 144u;

// Unit u: nibble word k = u % 8 of chunk c = (u / 8) % 4 of block u / 32;
// its low nibbles are columns 64c + 4k .. + 3 of the block, its high
// nibbles 32 columns further.
fn unit(row: u32, u: u32) -> Unit {
    let bl = u >> 5u;
    let c = (u >> 3u) & 3u;
    let k = u & 7u;
    let o = (row + bl * BLOCK_BYTES) >> 2u;
    let dm = unpack2x16float(w[o]);
    let s0 = w[o + 1u];
    let s1 = w[o + 2u];
    let s2 = w[o + 3u];
    let sa = k_scale(s0, s1, s2, 2u * c) * dm;
    let sb = k_scale(s0, s1, s2, 2u * c + 1u) * dm;
    let q = w[o + 4u + 8u * c + k];
    let col = 64u * bl + 16u * c + k;
    return Unit(sa.x * nibbles(q, 0u) - sa.y, sb.x * nibbles(q, 4u) - sb.y, col, col + 8u);
}
