// GGML Q4_1: f16 scale d and minimum m, then 16 bytes of nibbles laid out
// as Q4_0's; x = d·q + m (20 bytes: every block is word-aligned).
const BLOCK_BYTES: u32 = 20u;

// Unit u: byte word k = u % 4 of block u / 4; its low nibbles are columns
// 32·(u / 4) + 4k .. + 3, its high nibbles 16 columns further.
fn unit_cols(u: u32) -> vec2<u32> {
    let bl = u >> 2u;
    let k = u & 3u;
    return vec2<u32>(8u * bl + k, 8u * bl + 4u + k);
}

fn unit(row: u32, u: u32) -> Unit {
    let bl = u >> 2u;
    let k = u & 3u;
    let o = (row + bl * BLOCK_BYTES) >> 2u;
    let dm = unpack2x16float(w[o]);
    let q = w[o + 1u + k];
    let c = unit_cols(u);
    return Unit(dm.x * nibbles(q, 0u) + dm.y, dm.x * nibbles(q, 4u) + dm.y, c.x, c.y);
}
