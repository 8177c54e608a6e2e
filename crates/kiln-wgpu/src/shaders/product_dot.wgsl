// y = x·Wᵀ (+ bias) (+ y) for one input row (decode steps) over K-quant
// weights, by integer dot products: the row was quantized first
// (quant_x.wgsl: two 8-bit digits per value, a scale per 32 values and
// the sum of every 16), so a piece of 32 weights (the format's `piece`
// and k_piece.wgsl's `piece_idot`, prepended) is a few dot4I8Packed of its packed values with
// the digits (well under one instruction a weight, where decoding each
// weight to a float and multiplying it was issue-bound at a fraction of
// the memory's rate), scaled per run of 16 by the block's scales:
//     Σ w·x = s·dx·(Σ q·h + Σ q·l / 254) − c·sx.
// A workgroup of 256 takes RPW (8) output rows, 64 threads per pair of
// rows r and r + 4 (product_piece.wgsl's layout with twice the threads a
// row: a matrix of 4096 rows then fills an H200), each thread taking the
// rows' pieces at a stride of 64 and reading each piece's digits once for
// both rows; one pass through workgroup memory sums each row's 64 parts.

const TPR: u32 = 64u;
const RPW: u32 = PRODUCT_ROWSu;
const WG: u32 = 256u;
const_assert RPW * TPR == 2u * WG;
// Rows r and r + HALF of a workgroup's RPW share a thread.
const HALF: u32 = RPW / 2u;

// (Bindings 0 and 3-4, `Params` and `finish`: product_io.wgsl, prepended;
// binding 2, the f32 input the other products read, is unused here.)
// The quantized input row (quant_x.wgsl's layout).
@group(0) @binding(5) var<storage, read> xq: array<vec4<u32>>;

var<workgroup> red: array<f32, WG * 2u>;

// The digits and scales of the two runs of 16 inputs piece `q` multiplies.
fn xq_piece(q: u32, runs: u32) -> XQ {
    let c = piece_cols(q) >> vec2<u32>(2u);
    let da = bitcast<vec4<f32>>(xq[2u * runs + (c.x >> 1u)]);
    let db = bitcast<vec4<f32>>(xq[2u * runs + (c.y >> 1u)]);
    return XQ(
        xq[c.x],
        xq[runs + c.x],
        xq[c.y],
        xq[runs + c.y],
        vec2<f32>(da.x, select(da.y, da.z, (c.x & 1u) != 0u)),
        vec2<f32>(db.x, select(db.y, db.z, (c.y & 1u) != 0u)),
    );
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let g = wid.x + wid.y * 65535u;
    let rl = lid.x / TPR;
    let lane = lid.x % TPR;
    let r = g * RPW + rl;
    var acc = 0.0;
    var acc2 = 0.0;
    if (r < p.rows) {
        let row = r * p.row_bytes;
        let row2 = min(r + HALF, p.rows - 1u) * p.row_bytes;
        let np = p.cols / 32u;
        let runs = p.cols / 16u;
        for (var q = lane; q < np; q += TPR) {
            let v = xq_piece(q, runs);
            acc += piece_idot(row, q, v);
            acc2 += piece_idot(row2, q, v);
        }
    }
    red[lane * RPW + rl * 2u] = acc;
    red[lane * RPW + rl * 2u + 1u] = acc2;
    workgroupBarrier();
    if (lid.x < RPW) {
        let ro = g * RPW + lid.x / 2u + HALF * (lid.x % 2u);
        if (ro < p.rows) {
            var s = 0.0;
            for (var j = 0u; j < TPR; j++) {
                s += red[j * RPW + lid.x];
            }
            finish(ro, 0u, s);
        }
    }
}
