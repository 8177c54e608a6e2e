// x[t] = scale · W[token[t]] for the rows of one chunk of W (rows
// row0..row0+rows; other tokens are another chunk's): one workgroup per
// step row. The weight format's `unit` is prepended to this file.

struct Params {
    rows: u32,      // rows in this chunk of W
    cols: u32,
    row_bytes: u32,
    row0: u32,      // first row (token id) of this chunk
    scale: f32,
    tokens: u32,    // offset of the step's tokens in `step`
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
// (Binding 1, the weights, is the format's: types/bytes.wgsl or words.wgsl.)
@group(0) @binding(2) var<storage, read> step: array<u32>;
@group(0) @binding(3) var<storage, read_write> x: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let t = wid.x;
    let tok = step[p.tokens + t];
    if (tok < p.row0 || tok - p.row0 >= p.rows) {
        return;
    }
    let row = (tok - p.row0) * p.row_bytes;
    let base = t * p.cols;
    for (var u = lid.x; u < p.cols / 8u; u += 64u) {
        let v = unit(row, u);
        for (var i = 0u; i < 4u; i++) {
            x[base + 4u * v.ca + i] = p.scale * v.a[i];
            x[base + 4u * v.cb + i] = p.scale * v.b[i];
        }
    }
}
