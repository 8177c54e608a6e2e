// GGML Q8_0: an f16 scale d, then 32 signed bytes q; x = d·q (34 bytes).
const BLOCK: u32 = 32u;
const BLOCK_BYTES: u32 = 34u;

fn dequant(off: u32, v: ptr<function, array<f32, 32>>) {
    let d = half_at(off);
    for (var i = 0u; i < 32u; i += 4u) {
        let q = word_at(off + 2u + i);
        for (var k = 0u; k < 4u; k++) {
            // Sign-extend byte k of q.
            let b = i32(q << (24u - 8u * k)) >> 24u;
            (*v)[i + k] = d * f32(b);
        }
    }
}
