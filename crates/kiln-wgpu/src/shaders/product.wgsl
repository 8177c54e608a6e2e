// y = x·Wᵀ (+ bias) (+ y) for up to TILE input rows per workgroup (TILE is
// set per pipeline: 1 for decode steps, 8 otherwise) and RPW (8) output
// rows of one chunk of W. Each output row has 32 threads; a thread takes
// the row's units (eight weights in two runs of four columns, read by the
// weight format's `unit`, prepended to this file) at a stride of 32, so
// that a row's threads read consecutive words of it, and multiplies each
// with the TILE input rows as vec4s; one pass through workgroup memory
// then sums the 32 partial sums of every (output row, input row).

struct Params {
    rows: u32,      // output rows in this chunk of W
    cols: u32,      // inputs (a multiple of 8)
    n: u32,         // input rows
    row_bytes: u32, // bytes of one row of W
    x_stride: u32,  // floats between input rows (a multiple of 4)
    y_stride: u32,  // floats between output rows
    y_off: u32,     // first output column of this chunk
    flags: u32,     // 1: add the bias; 2: add into y
    x_off: u32,     // first float of the input (a multiple of 4)
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
    _pad3: u32,
    _pad4: u32,
    _pad5: u32,
    _pad6: u32,
}

const TPR: u32 = 32u;
const RPW: u32 = 8u;
const WG: u32 = 256u;
const TILE: u32 = TILE_ROWSu;
// Partial sums, [thread of the row][output row][input row]: the threads
// that add them up read consecutive words.
const PARTS: u32 = RPW * TILE;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> w: array<u32>;
@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<storage, read> bias: array<f32>;

var<workgroup> red: array<f32, WG * TILE>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let g = wid.x + wid.y * 65535u;
    let rl = lid.x / TPR;
    let lane = lid.x % TPR;
    let r = g * RPW + rl;
    let t0 = wid.z * TILE;
    let nt = min(TILE, p.n - t0);
    var acc: array<f32, TILE>;
    if (r < p.rows) {
        let row = r * p.row_bytes;
        let xs = p.x_stride / 4u;
        let xb = p.x_off / 4u + t0 * xs;
        for (var u = lane; u < p.cols / 8u; u += TPR) {
            let v = unit(row, u);
            for (var t = 0u; t < TILE; t++) {
                if (t < nt) {
                    let xi = xb + t * xs;
                    acc[t] += dot(v.a, x[xi + v.ca]) + dot(v.b, x[xi + v.cb]);
                }
            }
        }
    }
    for (var t = 0u; t < TILE; t++) {
        red[lane * PARTS + rl * TILE + t] = acc[t];
    }
    workgroupBarrier();
    if (lid.x < PARTS) {
        let rr = lid.x / TILE;
        let t = lid.x % TILE;
        let ro = g * RPW + rr;
        if (ro < p.rows && t < nt) {
            var s = 0.0;
            for (var j = 0u; j < TPR; j++) {
                s += red[j * PARTS + lid.x];
            }
            if ((p.flags & 1u) != 0u) {
                s += bias[p.y_off + ro];
            }
            let yi = (t0 + t) * p.y_stride + p.y_off + ro;
            if ((p.flags & 2u) != 0u) {
                s += y[yi];
            }
            y[yi] = s;
        }
    }
}
