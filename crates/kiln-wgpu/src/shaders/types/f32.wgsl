// F32 weights (read 16 bytes at a time: words.wgsl).

// Unit u: values 8u .. 8u + 7.
fn unit_cols(u: u32) -> vec2<u32> {
    return vec2<u32>(2u * u, 2u * u + 1u);
}

fn unit(row: u32, u: u32) -> Unit {
    let i = (row >> 4u) + 2u * u;
    let c = unit_cols(u);
    return Unit(bitcast<vec4<f32>>(w[i]), bitcast<vec4<f32>>(w[i + 1u]), c.x, c.y);
}

// Piece p: values 32p .. 32p + 31.
fn piece_cols(p: u32) -> vec2<u32> {
    return vec2<u32>(8u * p, 8u * p + 4u);
}

fn piece_dot(row: u32, p: u32, v: X8) -> f32 {
    let i = (row >> 4u) + 8u * p;
    let a = dot(bitcast<vec4<f32>>(w[i]), v.a0) + dot(bitcast<vec4<f32>>(w[i + 1u]), v.a1)
        + dot(bitcast<vec4<f32>>(w[i + 2u]), v.a2) + dot(bitcast<vec4<f32>>(w[i + 3u]), v.a3);
    let b = dot(bitcast<vec4<f32>>(w[i + 4u]), v.b0) + dot(bitcast<vec4<f32>>(w[i + 5u]), v.b1)
        + dot(bitcast<vec4<f32>>(w[i + 6u]), v.b2) + dot(bitcast<vec4<f32>>(w[i + 7u]), v.b3);
    return a + b;
}
