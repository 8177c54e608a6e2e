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
