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
