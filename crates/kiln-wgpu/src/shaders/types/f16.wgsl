// F16 weights: blocks of 4 values (8 bytes).
const BLOCK: u32 = 4u;
const BLOCK_BYTES: u32 = 8u;

fn dequant(off: u32, v: ptr<function, array<f32, 32>>) {
    let i = off >> 2u;
    let a = unpack2x16float(w[i]);
    let b = unpack2x16float(w[i + 1u]);
    (*v)[0] = a.x;
    (*v)[1] = a.y;
    (*v)[2] = b.x;
    (*v)[3] = b.y;
}

// Unit u: values 8u .. 8u + 7 (16 bytes; rows of a multiple of 8 values
// start word-aligned).
fn unit(row: u32, u: u32) -> Unit {
    let i = (row >> 2u) + 4u * u;
    let a = vec4<f32>(unpack2x16float(w[i]), unpack2x16float(w[i + 1u]));
    let b = vec4<f32>(unpack2x16float(w[i + 2u]), unpack2x16float(w[i + 3u]));
    return Unit(a, b, 2u * u, 2u * u + 1u);
}
