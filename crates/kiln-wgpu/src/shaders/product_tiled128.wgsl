// y = x·Wᵀ (+ bias) (+ y) for steps of many input rows (prompts), in
// tiles of 128 input rows × 128 output rows: product_tiled.wgsl's scheme
// (units and their input values copied into workgroup memory as f32,
// the next round read into registers meanwhile) with each of the 256
// threads multiplying 8 input rows × 8 output rows, so that a column of
// the tiles costs a thread four 16-byte reads of workgroup memory for 64
// multiply-adds (the 64-row tile's two for 16 left those reads nearly
// as busy as the multiply-adds). A round is 16 columns (2 units of each
// output row), so the two tiles are 16 KiB, WebGPU's least limit. A
// thread's rows are 4tx .. 4tx + 3 and 64 + 4tx .. + 3 of the output tile,
// 4ty .. + 3 and 64 + 4ty .. + 3 of the input tile: each read of a tile is
// 16 consecutive vec4s across a half-warp.

// (`Params`, the bindings and `finish`: product_io.wgsl; `finish4`,
// `fetch_w`, `fetch_x`, `put_w`, `put_x`: tiled_io.wgsl; both prepended,
// the format's `unit` and `unit_cols` before them.)

const BM: u32 = TILE_ROWSu;
const_assert BM == 128u;
const BN: u32 = PRODUCT_ROWSu;
const_assert BN == 128u;
const BU: u32 = 2u;
const BK: u32 = 16u;
// Vec4s per column of a tile.
const Q: u32 = 32u;
const H: u32 = 16u;

// [column of the round][row / 4].
var<workgroup> xt: array<vec4<f32>, BK * Q>;
var<workgroup> wt: array<vec4<f32>, BK * Q>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let r0 = (wid.x + wid.y * 65535u) * BN;
    let t0 = wid.z * BM;
    let tx = lid.x % H;
    let ty = lid.x / H;
    // What it copies each round: unit lq of the round of output row r0 +
    // lr, and the input values of the same unit of input row t0 + lr (rows
    // past the end read the last one; their sums are never written).
    let lr = lid.x % BN;
    let lq = lid.x / BN;
    let wrow = min(r0 + lr, p.rows - 1u) * p.row_bytes;
    let xrow = p.x_off / 4u + min(t0 + lr, p.n - 1u) * (p.x_stride / 4u);
    let busy = t0 + 4u * ty < p.n;
    let nu = p.cols / 8u;
    // Unit lq's columns are 8lq .. 8lq + 3 (`a`) and 8lq + 4 .. + 7 (`b`)
    // of the round.
    let kw = 8u * lq * Q + lr / 4u;
    let c = lr % 4u;
    var v = fetch_w(wrow, lq, nu);
    var xa = fetch_x(xrow, lq, false, nu);
    var xb = fetch_x(xrow, lq, true, nu);
    // s{i}{j}: input row i of the thread's 8 (0-3: 4ty + i, 4-7: 64 + 4ty
    // + i - 4) × output rows 4tx .. + 3 (j = 0) or 64 + 4tx .. + 3 (j = 1).
    var s00 = vec4<f32>(0.0);
    var s01 = vec4<f32>(0.0);
    var s10 = vec4<f32>(0.0);
    var s11 = vec4<f32>(0.0);
    var s20 = vec4<f32>(0.0);
    var s21 = vec4<f32>(0.0);
    var s30 = vec4<f32>(0.0);
    var s31 = vec4<f32>(0.0);
    var s40 = vec4<f32>(0.0);
    var s41 = vec4<f32>(0.0);
    var s50 = vec4<f32>(0.0);
    var s51 = vec4<f32>(0.0);
    var s60 = vec4<f32>(0.0);
    var s61 = vec4<f32>(0.0);
    var s70 = vec4<f32>(0.0);
    var s71 = vec4<f32>(0.0);
    for (var u0 = 0u; u0 < nu; u0 += BU) {
        put_w(kw, c, v.a);
        put_w(kw + 4u * Q, c, v.b);
        put_x(kw, c, xa);
        put_x(kw + 4u * Q, c, xb);
        workgroupBarrier();
        let un = u0 + BU + lq;
        v = fetch_w(wrow, un, nu);
        xa = fetch_x(xrow, un, false, nu);
        xb = fetch_x(xrow, un, true, nu);
        if (busy) {
            for (var k = 0u; k < BK; k++) {
                let a0 = xt[k * Q + ty];
                let a1 = xt[k * Q + H + ty];
                let b0 = wt[k * Q + tx];
                let b1 = wt[k * Q + H + tx];
                s00 += a0.x * b0;
                s01 += a0.x * b1;
                s10 += a0.y * b0;
                s11 += a0.y * b1;
                s20 += a0.z * b0;
                s21 += a0.z * b1;
                s30 += a0.w * b0;
                s31 += a0.w * b1;
                s40 += a1.x * b0;
                s41 += a1.x * b1;
                s50 += a1.y * b0;
                s51 += a1.y * b1;
                s60 += a1.z * b0;
                s61 += a1.z * b1;
                s70 += a1.w * b0;
                s71 += a1.w * b1;
            }
        }
        workgroupBarrier();
    }
    let r = r0 + 4u * tx;
    let t = t0 + 4u * ty;
    finish4(r, t, s00);
    finish4(r + 64u, t, s01);
    finish4(r, t + 1u, s10);
    finish4(r + 64u, t + 1u, s11);
    finish4(r, t + 2u, s20);
    finish4(r + 64u, t + 2u, s21);
    finish4(r, t + 3u, s30);
    finish4(r + 64u, t + 3u, s31);
    finish4(r, t + 64u, s40);
    finish4(r + 64u, t + 64u, s41);
    finish4(r, t + 65u, s50);
    finish4(r + 64u, t + 65u, s51);
    finish4(r, t + 66u, s60);
    finish4(r + 64u, t + 66u, s61);
    finish4(r, t + 67u, s70);
    finish4(r + 64u, t + 67u, s71);
}
