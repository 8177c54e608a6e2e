// GGML Q4_1: f16 scale d and minimum m, then 16 bytes of nibbles laid out
// as Q4_0's; x = d·q + m (20 bytes: every block is word-aligned).
const BLOCK_BYTES: u32 = 20u;

// Unit u: byte word k = u % 4 of block u / 4; its low nibbles are columns
// 32·(u / 4) + 4k .. + 3, its high nibbles 16 columns further.
fn unit_cols(u: u32) -> vec2<u32> {
    let bl = u >> 2u;
    let k = u & 3u;
    return vec2<u32>(8u * bl + k, 8u * bl + 4u + k);
}

fn unit(row: u32, u: u32) -> Unit {
    let bl = u >> 2u;
    let k = u & 3u;
    let o = (row + bl * BLOCK_BYTES) >> 2u;
    let dm = unpack2x16float(w[o]);
    let q = w[o + 1u + k];
    let c = unit_cols(u);
    return Unit(dm.x * nibbles(q, 0u) + dm.y, dm.x * nibbles(q, 4u) + dm.y, c.x, c.y);
}

// Piece p: block p (its low nibbles are values 0 .. 15, its high ones 16
// .. 31); Σ (d·q + m)·x = d·Σ q·x + m·Σ x.
fn piece_cols(p: u32) -> vec2<u32> {
    return vec2<u32>(8u * p, 8u * p + 4u);
}

fn piece_dot(row: u32, p: u32, v: X8) -> f32 {
    let o = (row + p * BLOCK_BYTES) >> 2u;
    let dm = unpack2x16float(w[o]);
    let q0 = w[o + 1u];
    let q1 = w[o + 2u];
    let q2 = w[o + 3u];
    let q3 = w[o + 4u];
    let qa = dot(nibbles(q0, 0u), v.a0) + dot(nibbles(q1, 0u), v.a1) + dot(nibbles(q2, 0u), v.a2)
        + dot(nibbles(q3, 0u), v.a3);
    let qb = dot(nibbles(q0, 4u), v.b0) + dot(nibbles(q1, 4u), v.b1) + dot(nibbles(q2, 4u), v.b2)
        + dot(nibbles(q3, 4u), v.b3);
    return dm.x * (qa + qb) + dm.y * sum4(v.a0 + v.a1 + v.a2 + v.a3 + v.b0 + v.b1 + v.b2 + v.b3);
}
