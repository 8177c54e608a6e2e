// GGML Q5_K: Q4_K's blocks (f16 d and dmin, 12 scale bytes) with 32
// bytes of fifth bits after the scales, then the 128 bytes of nibbles:
// bit 2c of byte l is the fifth bit of value l of sub-block 2c, bit 2c + 1
// that of sub-block 2c + 1; x = d·sc·q − dmin·m (176 bytes, word-aligned).
const BLOCK_BYTES: u32 = 176u;

// Unit u: as Q4_K's (nibble word k = u % 8 of chunk c = (u / 8) % 4),
// with word k of the fifth bits.
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
    let h = w[o + 4u + k];
    let q = w[o + 12u + 8u * c + k];
    let qa = nibbles(q, 0u) + 16.0 * bits(h, 2u * c);
    let qb = nibbles(q, 4u) + 16.0 * bits(h, 2u * c + 1u);
    let col = 64u * bl + 16u * c + k;
    return Unit(sa.x * qa - sa.y, sb.x * qb - sb.y, col, col + 8u);
}
