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
    let qa = wide_nibbles(ql, 0u, qh, 2u * j, 3u) - 32.0;
    let qb = wide_nibbles(ql, 4u, qh, 4u + 2u * j, 3u) - 32.0;
    let c = unit_cols(u);
    return Unit(d * signed_byte_at(si) * qa, d * signed_byte_at(si + 4u) * qb, c.x, c.y);
}

// Piece p: i = p % 8 of block p / 8, in half n = i / 4: nibble bytes
// 32s + 16l' .. + 15 (s = (i / 2) % 2, l' = i % 2) of the half, whose low
// nibbles are its values 32s + 16l' .. + 15 and high nibbles the values 64
// further, with pair bytes 16l' .. + 15 of the half (bits 2s and 4 + 2s).
fn piece_cols(p: u32) -> vec2<u32> {
    let i = p & 7u;
    let ca = 64u * (p >> 3u) + 32u * (i >> 2u) + 8u * ((i >> 1u) & 1u) + 4u * (i & 1u);
    return vec2<u32>(ca, ca + 16u);
}

// Piece p's 6-bit values q (0..63) and scales: w = d·sc·(q − 32), so
// Σ w·x = d·sc·Σ q·x − 32·d·sc·Σ x.
fn piece(row: u32, p: u32) -> Piece {
    let i = p & 7u;
    let n = i >> 2u;
    let s = (i >> 1u) & 1u;
    let lh = i & 1u;
    let b = row + (p >> 3u) * BLOCK_BYTES;
    let ql = b + 64u * n + 32u * s + 16u * lh;
    let qh = b + 128u + 32u * n + 16u * lh;
    let si = b + 192u + 8u * n + 2u * s + lh;
    let l = vec4<u32>(word_at(ql), word_at(ql + 4u), word_at(ql + 8u), word_at(ql + 12u));
    let hh = vec4<u32>(word_at(qh), word_at(qh + 4u), word_at(qh + 8u), word_at(qh + 12u));
    let m4 = vec4<u32>(0x0f0f0f0fu);
    let m2 = vec4<u32>(0x03030303u);
    let sa = vec4<u32>(2u * s);
    let qa = (l & m4) | (((hh >> sa) & m2) << vec4<u32>(4u));
    let qb = ((l >> vec4<u32>(4u)) & m4) | (((hh >> (sa + vec4<u32>(4u))) & m2) << vec4<u32>(4u));
    let sc = half_at(b + 208u) * vec2<f32>(signed_byte_at(si), signed_byte_at(si + 4u));
    return Piece(qa, qb, sc, 32.0 * sc);
}
