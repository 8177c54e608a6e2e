// GGML Q6_K: blocks of 256 values (210 bytes, so every other block starts
// 2 bytes off a word): 128 bytes of low nibbles, 64 bytes of high 2-bit
// pairs, 16 signed scales (one per 16 values), then the f16 scale d;
// x = d·sc·(q − 32). Each half of 128 values has 64 nibble bytes and 32
// pair bytes: nibble byte l (< 32) holds values l (low) and l + 64
// (high), byte l + 32 values l + 32 and l + 96; pair byte l's bits 0-1,
// 2-3, 4-5 and 6-7 are the top of values l, l + 32, l + 64 and l + 96.
const BLOCK_BYTES: u32 = 210u;

// Unit u: nibble word k = u % 16 of half n = (u / 16) % 2 of block u / 32:
// with j = k / 8 and l = 4·(k % 8), its low nibbles are columns
// 128n + 32j + l .. + 3 of the block, its high ones 64 columns further.
fn unit_cols(u: u32) -> vec2<u32> {
    let col = 64u * (u >> 5u) + 32u * ((u >> 4u) & 1u) + 8u * ((u >> 3u) & 1u) + (u & 7u);
    return vec2<u32>(col, col + 16u);
}

fn unit(row: u32, u: u32) -> Unit {
    let bl = u >> 5u;
    let n = (u >> 4u) & 1u;
    let k = u & 15u;
    let j = k >> 3u;
    let l = 4u * (k & 7u);
    let b = row + bl * BLOCK_BYTES;
    let ql = word_at(b + 64u * n + 4u * k);
    let qh = word_at(b + 128u + 32u * n + l);
    let d = half_at(b + 208u);
    let si = b + 192u + 8u * n + 2u * j + l / 16u;
    let qa = nibbles(ql, 0u) + 16.0 * pairs(qh, 2u * j) - 32.0;
    let qb = nibbles(ql, 4u) + 16.0 * pairs(qh, 4u + 2u * j) - 32.0;
    let c = unit_cols(u);
    return Unit(d * signed_byte_at(si) * qa, d * signed_byte_at(si + 4u) * qb, c.x, c.y);
}
