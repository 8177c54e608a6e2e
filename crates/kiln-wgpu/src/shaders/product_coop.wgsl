// y = x·Wᵀ (+ bias) (+ y) for steps of many input rows (prompts) by
// cooperative matrices (tensor cores on NVIDIA, simdgroup matrices on
// Apple): tiles of BM input rows × BM output rows, 2·BM threads in
// subgroups of 32, each subgroup FM × FN fragments of F × F sums (f32)
// over f16 tiles in workgroup memory. A round is BK columns: each thread
// copies BK / 16 units of one output row and the same units' input
// values of one input row into the tiles (`K_INNER` below says how they
// lie), the next round read into registers meanwhile.
// Input values are scaled by `p.x_scale` (a power of two; 0 reads as 1)
// and clamped into f16's range on the way in, the sums scaled back on
// the way out: the backend scales a gated unit's output (a model's
// largest activations) by 2⁻⁸. F32 weights never come here (f16 would
// round them). Rows past the step's end read its last row; their
// sums are never written. Cooperative operations need uniform control
// flow: every subgroup runs every round, the writes are guarded after.
//
// (`Params`, the bindings and `finish`: product_io.wgsl; `fetch_w`,
// `fetch_x`: tiled_io.wgsl; both prepended, the format's `unit` and
// `unit_cols` before them. The copies, the fragments' declarations,
// products and writes are generated: shaders.rs, `coop_blocks`.)

const BM: u32 = PRODUCT_ROWSu;
const F: u32 = FRAGu;
// Columns of a round.
const BK: u32 = ROUND_COLSu;
// The tiles' layout: with K_INNER each row's BK columns are consecutive
// (padded to LD = BK + 8 f16), else each column's BM rows (LD = BM + 8);
// KS and RS are the steps from a column to the next and a row to the next.
const K_INNER: bool = K_INNER_FLAG;
const LD: u32 = select(BM, BK, K_INNER) + 8u;
const KS: u32 = select(LD, 1u, K_INNER);
const RS: u32 = select(1u, LD, K_INNER);
// Subgroups across the output rows; each covers BM / 2 input rows and
// BM / SG_N output rows.
const SG_N: u32 = SG_COLSu;

var<workgroup> xt: array<f16, TILE_LEN>;
var<workgroup> wt: array<f16, TILE_LEN>;
// One fragment of each subgroup on its way out.
var<workgroup> cs: array<f32, 2u * SG_N * F * F>;

// Four values into consecutive columns of the tiles from index `at`.
// Two functions: WGSL passes no pointers to workgroup memory without an
// extension naga's validator refuses here.
fn put_w(v: vec4<f32>, at: u32) {
    for (var i = 0u; i < 4u; i++) {
        wt[at + i * KS] = f16(v[i]);
    }
}

fn put_x(v: vec4<f32>, at: u32, xs: f32) {
    for (var i = 0u; i < 4u; i++) {
        xt[at + i * KS] = f16(clamp(v[i] * xs, -65504.0, 65504.0));
    }
}

// Writes fragment sums staged in `cs` at `base`, times `back`: input
// rows t .. t + F - 1, output rows r .. r + F - 1 (those that exist),
// lane `lane` of 32.
fn write_out(base: u32, t: u32, r: u32, lane: u32, back: f32) {
    for (var e = lane; e < F * F; e += 32u) {
        let ti = t + e / F;
        let ri = r + e % F;
        if (ti < p.n && ri < p.rows) {
            finish(ri, ti, cs[base + e] * back);
        }
    }
}

@compute @workgroup_size(THREADS)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let r0 = (wid.x + wid.y * 65535u) * BM;
    let t0 = wid.z * BM;
    // What this thread copies: units un0 .. un0 + BK / 16 - 1 of the
    // round, of output row r0 + lr and input row t0 + lr.
    let lr = lid.x % BM;
    let un0 = (BK / 16u) * (lid.x / BM);
    let wrow = min(r0 + lr, p.rows - 1u) * p.row_bytes;
    let xrow = p.x_off / 4u + min(t0 + lr, p.n - 1u) * (p.x_stride / 4u);
    let nu = p.cols / 8u;
    let xs = select(p.x_scale, 1.0, p.x_scale == 0.0);
    // The subgroup's fragments: input rows m0 .., output rows n0 ..
    let sg = lid.x / 32u;
    let lane = lid.x % 32u;
    let m0 = (sg / SG_N) * (BM / 2u);
    let n0 = (sg % SG_N) * (BM / SG_N);
    // Unit j's columns are 8j .. 8j + 7 of the round.
    let at = 8u * un0 * KS + lr * RS;
    let un = un0;
COOP_FETCH
COOP_ACC
    for (var u0 = 0u; u0 < nu; u0 += BK / 8u) {
COOP_PUT
        workgroupBarrier();
        let un = u0 + BK / 8u + un0;
COOP_NEXT
        for (var k = 0u; k < BK; k += F) {
            let ka = k * KS + m0 * RS;
            let kb = k * KS + n0 * RS;
COOP_MMA
        }
        workgroupBarrier();
    }
    let base = sg * F * F;
COOP_OUT
}
