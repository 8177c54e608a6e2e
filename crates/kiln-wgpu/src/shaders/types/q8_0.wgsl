// GGML Q8_0: an f16 scale d, then 32 signed bytes q; x = d·q (34 bytes).
const BLOCK_BYTES: u32 = 34u;

// Unit u: bytes 8k .. 8k + 7 (k = u % 4) of block u / 4, eight
// consecutive columns.
fn unit_cols(u: u32) -> vec2<u32> {
    let c = 8u * (u >> 2u) + 2u * (u & 3u);
    return vec2<u32>(c, c + 1u);
}

fn unit(row: u32, u: u32) -> Unit {
    let bl = u >> 2u;
    let k = u & 3u;
    let off = row + bl * BLOCK_BYTES;
    let d = half_at(off);
    let o = off + 2u + 8u * k;
    let c = unit_cols(u);
    return Unit(d * signed_bytes(word_at(o)), d * signed_bytes(word_at(o + 4u)), c.x, c.y);
}
