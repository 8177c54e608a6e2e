// How the unit and piece products (product.wgsl, product_piece.wgsl)
// read their input rows: INPUT (set per pipeline) 0, as they are; 1,
// RMS-normed on the way in (x·g, the kernel scaling its sums by 1 / rms);
// 2, a gated unit's [gate | up] (act.wgsl's act(gate)·up); 3 (staged
// decode forms only: product.wgsl), attention's output still in its key
// splits. Prepended to each, after product_io.wgsl.

const INPUT: u32 = INPUT_MODEu;

@group(0) @binding(5) var<storage, read> norm_w: array<vec4<f32>>;

// Four values of the input row at vec4 `xi` at vec4 column `c`: as they
// are, normed by g (before the 1 / rms scale), or act(gate)·up of a gated
// row (`gh`: the vec4s between its gate and up), as INPUT says.
fn x_in(xi: u32, c: u32, gh: u32, gelu: bool) -> vec4<f32> {
    if (INPUT == 1u) {
        return x[xi + c] * norm_w[c];
    }
    if (INPUT == 2u) {
        return act(x[xi + c], gelu) * x[xi + gh + c];
    }
    return x[xi + c];
}
