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
