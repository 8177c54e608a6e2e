// F16 weights.

// Unit u: values 8u .. 8u + 7 (16 bytes; rows of a multiple of 8 values
// start word-aligned).
fn unit_cols(u: u32) -> vec2<u32> {
    return vec2<u32>(2u * u, 2u * u + 1u);
}

fn unit(row: u32, u: u32) -> Unit {
    let i = (row >> 2u) + 4u * u;
    let a = vec4<f32>(unpack2x16float(w[i]), unpack2x16float(w[i + 1u]));
    let b = vec4<f32>(unpack2x16float(w[i + 2u]), unpack2x16float(w[i + 3u]));
    let c = unit_cols(u);
    return Unit(a, b, c.x, c.y);
}
