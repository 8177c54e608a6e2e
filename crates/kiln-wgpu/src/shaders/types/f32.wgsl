// F32 weights: blocks of 4 values (16 bytes).
const BLOCK: u32 = 4u;
const BLOCK_BYTES: u32 = 16u;

fn dequant(off: u32, v: ptr<function, array<f32, 32>>) {
    let i = off >> 2u;
    for (var k = 0u; k < 4u; k++) {
        (*v)[k] = bitcast<f32>(w[i + k]);
    }
}
