// y = x·Wᵀ (+ bias) (+ y) for up to TILE (8) input rows per workgroup: one
// workgroup per output row of one chunk of W, its 64 threads striding over
// the row's blocks (dequantized by the weight type's `dequant`, prepended
// to this file), then a tree reduction.

struct Params {
    rows: u32,      // output rows in this chunk of W
    cols: u32,      // inputs
    n: u32,         // input rows
    row_bytes: u32, // bytes of one row of W
    x_stride: u32,  // floats between input rows
    y_stride: u32,  // floats between output rows
    y_off: u32,     // first output column of this chunk
    flags: u32,     // 1: add the bias; 2: add into y
    x_off: u32,     // first float of the input
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
    _pad3: u32,
    _pad4: u32,
    _pad5: u32,
    _pad6: u32,
}

const WG: u32 = 64u;
const TILE: u32 = 8u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> w: array<u32>;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<storage, read> bias: array<f32>;

var<workgroup> red: array<f32, 512>; // WG × TILE

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let r = wid.x + wid.y * 65535u;
    let t0 = wid.z * TILE;
    if (r >= p.rows) {
        return;
    }
    var acc = array<f32, 8>(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
    var v: array<f32, 32>;
    let nb = p.cols / BLOCK;
    let row = r * p.row_bytes;
    for (var b = lid.x; b < nb; b += WG) {
        dequant(row + b * BLOCK_BYTES, &v);
        for (var t = 0u; t < TILE; t++) {
            if (t0 + t < p.n) {
                let xi = p.x_off + (t0 + t) * p.x_stride + b * BLOCK;
                var s = 0.0;
                for (var i = 0u; i < BLOCK; i++) {
                    s += v[i] * x[xi + i];
                }
                acc[t] += s;
            }
        }
    }
    for (var t = 0u; t < TILE; t++) {
        red[t * WG + lid.x] = acc[t];
    }
    workgroupBarrier();
    for (var half = WG / 2u; half > 0u; half >>= 1u) {
        if (lid.x < half) {
            for (var t = 0u; t < TILE; t++) {
                red[t * WG + lid.x] += red[t * WG + lid.x + half];
            }
        }
        workgroupBarrier();
    }
    if (lid.x < TILE && t0 + lid.x < p.n) {
        let t = t0 + lid.x;
        var s = red[lid.x * WG];
        if ((p.flags & 1u) != 0u) {
            s += bias[p.y_off + r];
        }
        let yi = t * p.y_stride + p.y_off + r;
        if ((p.flags & 2u) != 0u) {
            s += y[yi];
        }
        y[yi] = s;
    }
}
