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

// Piece p: block p (as Q4_1's); Σ d·(q − 8)·x = d·(Σ q·x − 8·Σ x).
fn piece_cols(p: u32) -> vec2<u32> {
    return vec2<u32>(8u * p, 8u * p + 4u);
}

fn piece_dot(row: u32, p: u32, v: X8) -> f32 {
    let off = row + p * BLOCK_BYTES;
    let q0 = word_at(off + 2u);
    let q1 = word_at(off + 6u);
    let q2 = word_at(off + 10u);
    let q3 = word_at(off + 14u);
    let qa = dot(nibbles(q0, 0u), v.a0) + dot(nibbles(q1, 0u), v.a1) + dot(nibbles(q2, 0u), v.a2)
        + dot(nibbles(q3, 0u), v.a3);
    let qb = dot(nibbles(q0, 4u), v.b0) + dot(nibbles(q1, 4u), v.b1) + dot(nibbles(q2, 4u), v.b2)
        + dot(nibbles(q3, 4u), v.b3);
    let sx = sum4(v.a0 + v.a1 + v.a2 + v.a3 + v.b0 + v.b1 + v.b2 + v.b3);
    return half_at(off) * (qa + qb - 8.0 * sx);
}
