// What the product kernels (product_piece.wgsl, product.wgsl,
// product_tiled.wgsl) share: their parameters, the input, output and bias
// they bind (the weights, binding 1, are the format's: types/bytes.wgsl or
// types/words.wgsl), and how an output value is written. Prepended to
// each.

struct Params {
    rows: u32,      // output rows in this chunk of W
    cols: u32,      // inputs (a multiple of 8)
    n: u32,         // input rows
    row_bytes: u32, // bytes of one row of W
    x_stride: u32,  // floats between input rows (a multiple of 4)
    y_stride: u32,  // floats between output rows
    y_off: u32,     // first output column of this chunk
    flags: u32,     // 1: add the bias; 2: add into y; 16: GELU (INPUT 2)
    x_off: u32,     // first float of the input (a multiple of 4)
    eps: f32,       // the norm's epsilon (INPUT 1)
    x_scale: f32,   // inputs times this in f16 tiles (product_coop.wgsl; 0: 1)
    heads: u32,     // INPUT 3: query heads,
    head_dim: u32,  // their width
    nsplit: u32,    // and key splits
    _pad5: u32,
    _pad6: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<storage, read> bias: array<f32>;

// Writes output row `ro` of input row `t`: its sum `s` (+ bias) (+ y).
fn finish(ro: u32, t: u32, s: f32) {
    var v = s;
    if ((p.flags & 1u) != 0u) {
        v += bias[p.y_off + ro];
    }
    let yi = t * p.y_stride + p.y_off + ro;
    if ((p.flags & 2u) != 0u) {
        v += y[yi];
    }
    y[yi] = v;
}
