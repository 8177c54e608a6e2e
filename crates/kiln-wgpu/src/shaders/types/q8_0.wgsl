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

// Unit u: bytes 8k .. 8k + 7 (k = u % 4) of block u / 4, eight
// consecutive columns.
fn unit(row: u32, u: u32) -> Unit {
    let bl = u >> 2u;
    let k = u & 3u;
    let off = row + bl * BLOCK_BYTES;
    let d = half_at(off);
    let o = off + 2u + 8u * k;
    return Unit(d * signed_bytes(word_at(o)), d * signed_bytes(word_at(o + 4u)), 8u * bl + 2u * k, 8u * bl + 2u * k + 1u);
}
