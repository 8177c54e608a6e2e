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
