// GGML Q4_0: an f16 scale d, then 16 bytes of nibbles; value i < 16 is
// the low nibble of byte i, value i + 16 its high nibble; x = d·(q − 8)
// (18 bytes).
const BLOCK_BYTES: u32 = 18u;

// Unit u: byte word k = u % 4 of block u / 4, as Q4_1's.
fn unit_cols(u: u32) -> vec2<u32> {
    let bl = u >> 2u;
    let k = u & 3u;
    return vec2<u32>(8u * bl + k, 8u * bl + 4u + k);
}

fn unit(row: u32, u: u32) -> Unit {
    let bl = u >> 2u;
    let k = u & 3u;
    let off = row + bl * BLOCK_BYTES;
    let d = half_at(off);
    let q = word_at(off + 2u + 4u * k);
    let c = unit_cols(u);
    return Unit(d * (nibbles(q, 0u) - 8.0), d * (nibbles(q, 4u) - 8.0), c.x, c.y);
}
