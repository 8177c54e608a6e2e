// F32 weights.

// Unit u: values 8u .. 8u + 7.
fn unit_cols(u: u32) -> vec2<u32> {
    return vec2<u32>(2u * u, 2u * u + 1u);
}

fn unit(row: u32, u: u32) -> Unit {
    let i = (row >> 2u) + 8u * u;
    let a = bitcast<vec4<f32>>(vec4<u32>(w[i], w[i + 1u], w[i + 2u], w[i + 3u]));
    let b = bitcast<vec4<f32>>(vec4<u32>(w[i + 4u], w[i + 5u], w[i + 6u], w[i + 7u]));
    let c = unit_cols(u);
    return Unit(a, b, c.x, c.y);
}
