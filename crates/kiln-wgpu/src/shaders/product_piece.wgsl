// y = x·Wᵀ (+ bias) (+ y) for one input row (decode steps), RPW (16)
// output rows of one chunk of W per workgroup of 256: 32 threads per pair
// of output rows r and r + 8. A thread takes the rows' pieces (32 weights
// each, read by the weight format's `piece` and multiplied by `piece_dot`, prepended
// to this file: 16 bytes at a time where the format is 16-byte aligned,
// its block's scales once per piece) at a stride of 32, reads the 32
// input values of a piece once for both rows, and one pass through
// workgroup memory sums the 32 partial sums of each row (K-quant rows are
// whole blocks of 256).
// INPUT (set per pipeline) 1: the input row is RMS-normed on the way in
// (x·g / rms(x), the norm before a layer's products): the product reads
// x·g, the first row's 32 threads (whose pieces cover the row once) also
// sum the squares of the x they read, and the final sums are scaled by
// 1 / rms (no pass over the row before the first weight is read).
// INPUT 2: the input row is a gated unit's [gate | up] (x_stride 2·cols)
// and the product takes act(gate)·up (act.wgsl's, prepended: SiLU, or
// GELU's tanh form with flags & 16). INPUT 0: the row as it is.

const TPR: u32 = 32u;
const RPW: u32 = PRODUCT_ROWSu;
const_assert RPW == 16u;
const WG: u32 = 256u;

// (Bindings 0-4, `Params` and `finish`: product_io.wgsl; INPUT, binding
// 5 and `x_in`: product_input.wgsl; both prepended.)

var<workgroup> red: array<f32, WG * 2u>;
// The first row's threads' sums of squares (INPUT 1).
var<workgroup> squares: array<f32, TPR>;

// The sum of squares of the 32 input values piece `q` multiplies, as
// they are (not normed).
fn x_squares(xb: u32, q: u32) -> f32 {
    let c = piece_cols(q);
    var s = 0.0;
    for (var i = 0u; i < 4u; i++) {
        let a = x[xb + c.x + i];
        let b = x[xb + c.y + i];
        s += dot(a, a) + dot(b, b);
    }
    return s;
}

// The 32 input values piece `q` multiplies.
fn x_piece(xb: u32, q: u32, gh: u32, gelu: bool) -> X8 {
    let c = piece_cols(q);
    return X8(
        x_in(xb, c.x, gh, gelu),
        x_in(xb, c.x + 1u, gh, gelu),
        x_in(xb, c.x + 2u, gh, gelu),
        x_in(xb, c.x + 3u, gh, gelu),
        x_in(xb, c.y, gh, gelu),
        x_in(xb, c.y + 1u, gh, gelu),
        x_in(xb, c.y + 2u, gh, gelu),
        x_in(xb, c.y + 3u, gh, gelu),
    );
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>SUBGROUP_ARGS) {
    let g = wid.x + wid.y * 65535u;
    // (SUB: the subgroup's number and the thread's place in it.)
    let rl = ROW_OF_THREAD;
    let lane = LANE_OF_THREAD;
    let r = g * RPW + rl;
    let xb = p.x_off / 4u;
    let gelu = (p.flags & 16u) != 0u;
    let gh = p.cols / 4u;
    var acc = 0.0;
    var acc2 = 0.0;
    var ss = 0.0;
    if (r < p.rows) {
        let row = r * p.row_bytes;
        let row2 = min(r + 8u, p.rows - 1u) * p.row_bytes;
        let np = p.cols / 32u;
        for (var q = lane; q < np; q += TPR) {
            let v = x_piece(xb, q, gh, gelu);
            acc += piece_dot(row, q, v);
            acc2 += piece_dot(row2, q, v);
            if (INPUT == 1u && rl == 0u) {
                ss += x_squares(xb, q);
            }
        }
    }
    if (SUB) {
        let s1 = row_sum(acc);
        let s2 = row_sum(acc2);
        let sq = row_sum(ss);
        var scale = 1.0;
        if (INPUT == 1u) {
            if (rl == 0u && lane == 0u) {
                squares[0] = sq;
            }
            workgroupBarrier();
            scale = inverseSqrt(squares[0] / f32(p.cols) + p.eps);
        }
        if (lane == 0u && r < p.rows) {
            finish(r, 0u, s1 * scale);
            if (r + 8u < p.rows) {
                finish(r + 8u, 0u, s2 * scale);
            }
        }
        return;
    }
    red[lane * 16u + rl * 2u] = acc;
    red[lane * 16u + rl * 2u + 1u] = acc2;
    if (INPUT == 1u && rl == 0u) {
        squares[lane] = ss;
    }
    workgroupBarrier();
    if (lid.x < RPW) {
        let ro = g * RPW + lid.x / 2u + 8u * (lid.x % 2u);
        if (ro < p.rows) {
            var s = 0.0;
            for (var j = 0u; j < TPR; j++) {
                s += red[j * 16u + lid.x];
            }
            if (INPUT == 1u) {
                var sq = 0.0;
                for (var j = 0u; j < TPR; j++) {
                    sq += squares[j];
                }
                s *= inverseSqrt(sq / f32(p.cols) + p.eps);
            }
            finish(ro, 0u, s);
        }
    }
}
