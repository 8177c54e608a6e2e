// F16 weights (read 16 bytes at a time: words.wgsl).

// Unit u: values 8u .. 8u + 7 (16 bytes; rows of a multiple of 8 values
// start 16-byte aligned).
fn unit_cols(u: u32) -> vec2<u32> {
    return vec2<u32>(2u * u, 2u * u + 1u);
}

fn unit(row: u32, u: u32) -> Unit {
    let q = w[(row >> 4u) + u];
    let c = unit_cols(u);
    return Unit(halves(q.x, q.y), halves(q.z, q.w), c.x, c.y);
}

// Piece p: values 32p .. 32p + 31 (64 bytes).
fn piece_cols(p: u32) -> vec2<u32> {
    return vec2<u32>(8u * p, 8u * p + 4u);
}

fn piece_dot(row: u32, p: u32, v: X8) -> f32 {
    let i = (row >> 4u) + 4u * p;
    let q0 = w[i];
    let q1 = w[i + 1u];
    let q2 = w[i + 2u];
    let q3 = w[i + 3u];
    let a = dot(halves(q0.x, q0.y), v.a0) + dot(halves(q0.z, q0.w), v.a1) + dot(halves(q1.x, q1.y), v.a2)
        + dot(halves(q1.z, q1.w), v.a3);
    let b = dot(halves(q2.x, q2.y), v.b0) + dot(halves(q2.z, q2.w), v.b1) + dot(halves(q3.x, q3.y), v.b2)
        + dot(halves(q3.z, q3.w), v.b3);
    return a + b;
}
