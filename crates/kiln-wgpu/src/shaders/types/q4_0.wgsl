// GGML Q4_0: an f16 scale d, then 16 bytes of nibbles; value i < 16 is
// the low nibble of byte i, value i + 16 its high nibble; x = d·(q − 8)
// (18 bytes).
const BLOCK: u32 = 32u;
const BLOCK_BYTES: u32 = 18u;

fn dequant(off: u32, v: ptr<function, array<f32, 32>>) {
    let d = half_at(off);
    for (var i = 0u; i < 16u; i += 4u) {
        let q = word_at(off + 2u + i);
        for (var k = 0u; k < 4u; k++) {
            let b = (q >> (8u * k)) & 0xffu;
            (*v)[i + k] = d * (f32(b & 0xfu) - 8.0);
            (*v)[i + k + 16u] = d * (f32(b >> 4u) - 8.0);
        }
    }
}

// Unit u: byte word k = u % 4 of block u / 4, as Q4_1's.
fn unit(row: u32, u: u32) -> Unit {
    let bl = u >> 2u;
    let k = u & 3u;
    let off = row + bl * BLOCK_BYTES;
    let d = half_at(off);
    let q = word_at(off + 2u + 4u * k);
    return Unit(d * (nibbles(q, 0u) - 8.0), d * (nibbles(q, 4u) - 8.0), 8u * bl + k, 8u * bl + 4u + k);
}
