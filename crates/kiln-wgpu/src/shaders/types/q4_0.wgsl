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
