// GGML Q4_1: f16 scale d and minimum m, then 16 bytes of nibbles laid out
// as Q4_0's; x = d·q + m (20 bytes: every block is word-aligned).
const BLOCK: u32 = 32u;
const BLOCK_BYTES: u32 = 20u;

fn dequant(off: u32, v: ptr<function, array<f32, 32>>) {
    let dm = unpack2x16float(w[off >> 2u]);
    for (var i = 0u; i < 16u; i += 4u) {
        let q = w[(off + 4u + i) >> 2u];
        for (var k = 0u; k < 4u; k++) {
            let b = (q >> (8u * k)) & 0xffu;
            (*v)[i + k] = dm.x * f32(b & 0xfu) + dm.y;
            (*v)[i + k + 16u] = dm.x * f32(b >> 4u) + dm.y;
        }
    }
}

// Unit u: byte word k = u % 4 of block u / 4; its low nibbles are columns
// 32·(u / 4) + 4k .. + 3, its high nibbles 16 columns further.
fn unit(row: u32, u: u32) -> Unit {
    let bl = u >> 2u;
    let k = u & 3u;
    let o = (row + bl * BLOCK_BYTES) >> 2u;
    let dm = unpack2x16float(w[o]);
    let q = w[o + 1u + k];
    return Unit(dm.x * nibbles(q, 0u) + dm.y, dm.x * nibbles(q, 4u) + dm.y, 8u * bl + k, 8u * bl + 4u + k);
}
