// y = x·Wᵀ (+ bias) (+ y) for up to TILE input rows per workgroup (TILE is
// set per pipeline: 1 for decode steps, 8 for steps of up to 47 rows;
// prompts take product_tiled.wgsl, and decode steps over K-quants
// product_piece.wgsl) and RPW output rows
// of one chunk of W (8; 16 in decode, where each thread takes two rows, r
// and r + 8, and reads each input value once for both: the input reads,
// not the weights', bounded decode on an H200 before). Each output row
// has 32 threads; a thread takes the row's units (eight weights in two
// runs of four columns, read by the weight format's `unit`, prepended to
// this file) at a stride of 32, two units a round (both read before
// either is used), so that a row's threads read consecutive words of it,
// and multiplies each with the TILE input rows as vec4s; one pass
// through workgroup memory then sums the 32 partial sums of every
// (output row, input row). (Named values, not arrays: units or sums in
// an indexed array went to memory on NVIDIA's Vulkan compiler and made
// the products 2x slower.)
// INPUT (set per pipeline, as TILE) 1: the input rows are RMS-normed on
// the way in (x·g / rms(x), the norm before a layer's products): the
// workgroup sums each input row's squares (first, in steps of several
// rows; in decode, the first row's threads as they read the row), reads
// x·g, and scales its sums by 1 / rms, so that no normed copy of the
// rows is written and read back. INPUT 2: the input
// rows are a gated unit's [gate | up] (x_stride 2·cols) and the product
// takes act(gate)·up (act.wgsl's, prepended: SiLU, or GELU's tanh form
// with flags & 16), so that
// the unit's output is never written either. INPUT 0: the rows as they are.


const TPR: u32 = 32u;
// Two output rows per thread (decode forms). RPW is set per pipeline by
// `shaders::product_rows`, which the backend's workgroup count uses too.
const TWO: bool = TILE == 1u;
const RPW: u32 = PRODUCT_ROWSu;
const_assert RPW == select(8u, 16u, TWO);
const WG: u32 = 256u;
const TILE: u32 = TILE_ROWSu;
// Partial sums, [thread of the row][output row][input row]: the threads
// that add them up read consecutive words.
// Input rows per pass of the final sums (TILE, at most 8; the two-row
// decode form sums its 16 rows in one pass: `red` holds WG × 8 values,
// 8 KiB, in every form).
const RT: u32 = RT_ROWSu;
const PARTS: u32 = RPW * RT;

// (Bindings 0-4, `Params` and `finish`: product_io.wgsl; INPUT, binding
// 5 and `x_in`: product_input.wgsl; both prepended.)

var<workgroup> red: array<f32, RED_WORDSu>;
// STAGE (decode, INPUT 1, up to 4096 columns): the workgroup first sums
// the row's squares, then writes the normed row x·g / rms into `red` as
// f16 pairs; the units then read their inputs there instead of x and g
// from the buffers. With INPUT 2 (up to 8192 columns: `red` is
// twice as large then) it writes act(gate)·up times `p.x_scale` (a gated
// unit's output may pass f16's range; 0 reads as 1), clamped into f16's
// range, and scales its sums back. With INPUT 3 it writes attention's
// output merged from its key splits (`combine_weights`, `combined`).
const STAGE: bool = STAGE_Xu == 1u;
// (INPUT 3: the key splits' (m, l) and weights, SSQ_WORDS ≥ 2 × heads ×
// splits.)
var<workgroup> ssq: array<f32, SSQ_WORDSu>;

// Input vec4 `c` of the staged row.
fn x_staged(c: u32) -> vec4<f32> {
    return vec4<f32>(unpack2x16float(bitcast<u32>(red[2u * c])), unpack2x16float(bitcast<u32>(red[2u * c + 1u])));
}

// A decode unit's input: staged, or as `x_in` reads it.
fn x_dec(xi: u32, c: u32, gh: u32, gelu: bool) -> vec4<f32> {
    if (STAGE) {
        return x_staged(c);
    }
    return x_in(xi, c, gh, gelu);
}
var<workgroup> sums: array<f32, 16 * RT>;
// The first row's threads' sums of squares (decode, INPUT 1).
var<workgroup> squares: array<f32, TPR>;

// 1 / rms of a row from the sum of its squares.
fn inv_rms(sum_sq: f32) -> f32 {
    return inverseSqrt(sum_sq / f32(p.cols) + p.eps);
}

// 1 / rms of the input row at `xb`, from the whole workgroup (the staged
// row is normed before it is stored: x·g itself may pass f16's range).
fn staged_inv_rms(xb: u32, li: u32) -> f32 {
    var ss = 0.0;
    for (var c = li; c < p.cols / 4u; c += WG) {
        let v = x[xb + c];
        ss += dot(v, v);
    }
    ssq[li] = ss;
    workgroupBarrier();
    if (li < TPR) {
        var s = 0.0;
        for (var j = 0u; j < WG / TPR; j++) {
            s += ssq[li * (WG / TPR) + j];
        }
        squares[li] = s;
    }
    workgroupBarrier();
    var sq = 0.0;
    for (var j = 0u; j < TPR; j++) {
        sq += squares[j];
    }
    return inv_rms(sq);
}

// INPUT 3 (staged decode form): `x` binds attention.wgsl's key splits, per
// query head p.nsplit of [unnormalized output (hd) | maximum m, sum l, 2
// unused], and the workgroup merges them as attn_combine.wgsl does. First
// every split's (m, l) into `ssq` at once (pairs side by side), then one
// thread a head turns its splits' m into weights e^(m_z − M) / Σ e^(m_z −
// M) l_z there, from workgroup memory (an empty split, l = 0, weighs 0) ...
fn combine_weights(li: u32) {
    let sv = p.head_dim / 4u + 1u;
    for (var i = li; i < p.heads * p.nsplit; i += WG) {
        let ml = x[i * sv + sv - 1u];
        ssq[2u * i] = ml.x;
        ssq[2u * i + 1u] = ml.y;
    }
    workgroupBarrier();
    for (var h = li; h < p.heads; h += WG) {
        let first = 2u * h * p.nsplit;
        var mx = -3.0e38;
        for (var z = 0u; z < p.nsplit; z++) {
            if (ssq[first + 2u * z + 1u] > 0.0) {
                mx = max(mx, ssq[first + 2u * z]);
            }
        }
        var l = 0.0;
        for (var z = 0u; z < p.nsplit; z++) {
            let lz = ssq[first + 2u * z + 1u];
            let e = select(0.0, exp(ssq[first + 2u * z] - mx), lz > 0.0);
            ssq[first + 2u * z] = e;
            l += e * lz;
        }
        let il = 1.0 / l;
        for (var z = 0u; z < p.nsplit; z++) {
            ssq[first + 2u * z] *= il;
        }
    }
    workgroupBarrier();
}

// ... then input vec4 `c` (of head c / (hd / 4)) is Σ_z weight_z · o_z.
fn combined(c: u32) -> vec4<f32> {
    let hv = p.head_dim / 4u;
    let sv = hv + 1u;
    let first = (c / hv) * p.nsplit;
    let d = c % hv;
    var o = vec4(0.0);
    for (var z = 0u; z < p.nsplit; z++) {
        o += ssq[2u * (first + z)] * x[(first + z) * sv + d];
    }
    return o;
}

// The sum of squares of input vec4 `c` of row `xi`, as it is.
fn square(xi: u32, c: u32) -> f32 {
    let v = x[xi + c];
    return dot(v, v);
}

// Unit v times input row `xi`.
fn unit_dot(v: Unit, xi: u32, gh: u32, gelu: bool) -> f32 {
    return dot(v.a, x_in(xi, v.ca, gh, gelu)) + dot(v.b, x_in(xi, v.cb, gh, gelu));
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>SUBGROUP_ARGS) {
    let g = wid.x + wid.y * 65535u;
    // (SUB: the subgroup's number and the thread's place in it.)
    let rl = ROW_OF_THREAD;
    let lane = LANE_OF_THREAD;
    let r = g * RPW + rl;
    var acc2 = 0.0;
    let t0 = wid.z * TILE;
    let nt = min(TILE, p.n - t0);
    var acc: array<f32, TILE>;
    let xs = p.x_stride / 4u;
    let xb = p.x_off / 4u + t0 * xs;
    let normed = INPUT == 1u;
    let gelu = (p.flags & 16u) != 0u;
    let gh = p.cols / 4u;
    // 1 / rms of each input row (INPUT 1), from the whole workgroup, in
    // steps of several rows; decode (TWO) sums the squares as it reads
    // the row instead (the first row's threads, whose units cover it
    // once), so that the weights' reads start at once.
    var inv: array<f32, TILE>;
    var row_ss = 0.0;
    if (normed && !TWO) {
        for (var t = 0u; t < TILE; t++) {
            var ss = 0.0;
            if (t < nt) {
                for (var c = lid.x; c < p.cols / 4u; c += WG) {
                    let v = x[xb + t * xs + c];
                    ss += dot(v, v);
                }
            }
            red[t * WG + lid.x] = ss;
        }
        workgroupBarrier();
        // Two levels (16 sums of 16, then every thread adds the 16): two
        // barriers instead of a tree's eight (`red` is next written after
        // the second).
        if (lid.x < 16u * TILE) {
            let t = lid.x / 16u;
            let k = lid.x % 16u;
            var s = 0.0;
            for (var j = 0u; j < 16u; j++) {
                s += red[t * WG + k * 16u + j];
            }
            sums[lid.x] = s;
        }
        workgroupBarrier();
        for (var t = 0u; t < TILE; t++) {
            var s = 0.0;
            for (var k = 0u; k < 16u; k++) {
                s += sums[t * 16u + k];
            }
            inv[t] = inv_rms(s);
        }
    }
    let xsc = select(p.x_scale, 1.0, p.x_scale == 0.0 || INPUT != 2u || !STAGE);
    if (STAGE) {
        // INPUT 1: the row's sum of squares first, so that the staged
        // values are normed ones (x·g / rms): x·g itself passes f16's
        // range where a model's residual stream is large (Gemma 3's).
        var inv_rms = 1.0;
        if (normed) {
            inv_rms = staged_inv_rms(xb, lid.x);
        }
        if (INPUT == 3u) {
            combine_weights(lid.x);
        }
        for (var c = lid.x; c < p.cols / 4u; c += WG) {
            var xg: vec4<f32>;
            if (INPUT == 2u) {
                xg = act(x[xb + c], gelu) * x[xb + gh + c] * xsc;
            } else if (INPUT == 3u) {
                xg = combined(c);
            } else {
                xg = x[xb + c] * norm_w[c] * inv_rms;
            }
            xg = clamp(xg, vec4(-65504.0), vec4(65504.0));
            red[2u * c] = bitcast<f32>(pack2x16float(xg.xy));
            red[2u * c + 1u] = bitcast<f32>(pack2x16float(xg.zw));
        }
        workgroupBarrier();
    }
    if (r < p.rows) {
        let row = r * p.row_bytes;
        let nu = p.cols / 8u;
        var u = lane;
        if (TWO) {
            let row2 = min(r + 8u, p.rows - 1u) * p.row_bytes;
            for (; u + TPR < nu; u += 2u * TPR) {
                let v0 = unit(row, u);
                let w0 = unit(row2, u);
                let v1 = unit(row, u + TPR);
                let w1 = unit(row2, u + TPR);
                let x0a = x_dec(xb, v0.ca, gh, gelu);
                let x0b = x_dec(xb, v0.cb, gh, gelu);
                let x1a = x_dec(xb, v1.ca, gh, gelu);
                let x1b = x_dec(xb, v1.cb, gh, gelu);
                acc[0] += dot(v0.a, x0a) + dot(v0.b, x0b) + dot(v1.a, x1a) + dot(v1.b, x1b);
                acc2 += dot(w0.a, x0a) + dot(w0.b, x0b) + dot(w1.a, x1a) + dot(w1.b, x1b);
                if (normed && !STAGE && rl == 0u) {
                    row_ss += square(xb, v0.ca) + square(xb, v0.cb) + square(xb, v1.ca) + square(xb, v1.cb);
                }
            }
            for (; u < nu; u += TPR) {
                let v0 = unit(row, u);
                let w0 = unit(row2, u);
                let x0a = x_dec(xb, v0.ca, gh, gelu);
                let x0b = x_dec(xb, v0.cb, gh, gelu);
                acc[0] += dot(v0.a, x0a) + dot(v0.b, x0b);
                acc2 += dot(w0.a, x0a) + dot(w0.b, x0b);
                if (normed && !STAGE && rl == 0u) {
                    row_ss += square(xb, v0.ca) + square(xb, v0.cb);
                }
            }
        }
        // (In decode, u is past the row's end here.)
        for (; u + TPR < nu; u += 2u * TPR) {
            let v0 = unit(row, u);
            let v1 = unit(row, u + TPR);
            for (var t = 0u; t < TILE; t++) {
                if (t < nt) {
                    let xi = xb + t * xs;
                    acc[t] += unit_dot(v0, xi, gh, gelu) + unit_dot(v1, xi, gh, gelu);
                }
            }
        }
        for (; u < nu; u += TPR) {
            let v0 = unit(row, u);
            for (var t = 0u; t < TILE; t++) {
                if (t < nt) {
                    acc[t] += unit_dot(v0, xb + t * xs, gh, gelu);
                }
            }
        }
        if (normed && !TWO) {
            for (var t = 0u; t < TILE; t++) {
                acc[t] *= inv[t];
            }
        }
    }
    if (TWO && SUB) {
        let s1 = row_sum(acc[0]);
        let s2 = row_sum(acc2);
        let sq = row_sum(row_ss);
        var scale = 1.0;
        if (normed) {
            if (rl == 0u && lane == 0u) {
                squares[0] = sq;
            }
            workgroupBarrier();
            scale = inv_rms(squares[0]);
        }
        if (lane == 0u && r < p.rows) {
            finish(r, t0, s1 * scale);
            if (r + 8u < p.rows) {
                finish(r + 8u, t0, s2 * scale);
            }
        }
        return;
    }
    if (TWO) {
        if (STAGE) {
            // Every thread is done with the staged row in `red`.
            workgroupBarrier();
        }
        red[lane * 16u + rl * 2u] = acc[0];
        red[lane * 16u + rl * 2u + 1u] = acc2;
        if (normed && !STAGE && rl == 0u) {
            squares[lane] = row_ss;
        }
        workgroupBarrier();
        if (lid.x < 16u) {
            let ro = g * RPW + lid.x / 2u + 8u * (lid.x % 2u);
            if (ro < p.rows) {
                var s = 0.0;
                for (var j = 0u; j < TPR; j++) {
                    s += red[j * 16u + lid.x];
                }
                // (Staged rows are normed already.)
                if (normed && !STAGE) {
                    var sq = 0.0;
                    for (var j = 0u; j < TPR; j++) {
                        sq += squares[j];
                    }
                    s *= inv_rms(sq);
                }
                finish(ro, t0, s / xsc);
            }
        }
        return;
    }
    for (var tb = 0u; tb < TILE; tb += RT) {
        for (var j = 0u; j < RT; j++) {
            red[lane * PARTS + rl * RT + j] = acc[tb + j];
        }
        workgroupBarrier();
        if (lid.x < PARTS) {
            let rr = lid.x / RT;
            let t = tb + lid.x % RT;
            let ro = g * RPW + rr;
            if (ro < p.rows && t < nt) {
                var s = 0.0;
                for (var j = 0u; j < TPR; j++) {
                    s += red[j * PARTS + lid.x];
                }
                finish(ro, t0 + t, s);
            }
        }
        workgroupBarrier();
    }
}
