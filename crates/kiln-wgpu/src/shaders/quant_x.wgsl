// The input row of a decode product quantized for integer dot products
// (product_dot.wgsl): each block of 32 inputs x (as INPUT says: as they
// are, RMS-normed, or a gated unit's act(gate)·up; product_input.wgsl)
// becomes two signed 8-bit digits per value and a scale dx = max|x| / 127:
// x ≈ dx·(h + l / 254), h = round(x / dx), l = round(254·(x / dx − h)),
// about 15 bits, so that products match f32 arithmetic to ~1e-5 of the
// block's largest input (one digit alone is ~1% off). Each run of 16
// inputs also keeps the sum of its values as the digits give them (sx),
// which the products' −min terms multiply. Row t of `xq` (XQ_VEC4S(cols)
// vec4s): the high digits [cols / 16 runs of 16 bytes], the low digits
// [the same], then per block (dx, sx of its first 16, sx of its second
// 16, 0) as f32 bits. A workgroup of 256 takes 1024 inputs, a thread four
// of them (eight threads a block, which share their largest magnitudes
// and sums through workgroup memory); with INPUT 1 every workgroup of a
// row sums the row's squares first (a few KiB from L2).
// (Params, the input binding 2, INPUT, norm_w binding 5 and `x_in`:
// product_io.wgsl and product_input.wgsl, prepended.)

@group(0) @binding(1) var<storage, read_write> xq: array<u32>;

const WG: u32 = 256u;
var<workgroup> red: array<f32, WG>;
var<workgroup> sums: array<f32, 16>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let t = wid.y;
    let xb = p.x_off / 4u + t * (p.x_stride / 4u);
    let gelu = (p.flags & 16u) != 0u;
    let n4 = p.cols / 4u;
    var inv = 1.0;
    if (INPUT == 1u) {
        var ss = 0.0;
        for (var c = lid.x; c < n4; c += WG) {
            let v = x[xb + c];
            ss += dot(v, v);
        }
        red[lid.x] = ss;
        workgroupBarrier();
        if (lid.x < 16u) {
            var s = 0.0;
            for (var j = 0u; j < 16u; j++) {
                s += red[lid.x * 16u + j];
            }
            sums[lid.x] = s;
        }
        workgroupBarrier();
        var s = 0.0;
        for (var k = 0u; k < 16u; k++) {
            s += sums[k];
        }
        inv = inverseSqrt(s / f32(p.cols) + p.eps);
        workgroupBarrier();
    }
    let c = wid.x * WG + lid.x;
    let live = c < n4;
    var v = vec4<f32>(0.0);
    if (live) {
        v = x_in(xb, c, n4, gelu) * inv;
    }
    // The block's largest magnitude, from its eight threads.
    let a = abs(v);
    red[lid.x] = max(max(a.x, a.y), max(a.z, a.w));
    workgroupBarrier();
    let first = lid.x & ~7u;
    var m = 0.0;
    for (var j = 0u; j < 8u; j++) {
        m = max(m, red[first + j]);
    }
    workgroupBarrier();
    let dx = m / 127.0;
    let s = v * select(0.0, 127.0 / m, m > 0.0);
    let h = round(s);
    let l = round(254.0 * (s - h));
    // The four values as the digits give them, summed per run of 16 below.
    red[lid.x] = dx * dot(h + l * (1.0 / 254.0), vec4<f32>(1.0));
    workgroupBarrier();
    if (!live) {
        return;
    }
    let row = t * (n4 * 2u + p.cols / 8u);
    xq[row + c] = pack4xI8(vec4<i32>(h));
    xq[row + n4 + c] = pack4xI8(vec4<i32>(l));
    if ((lid.x & 7u) == 0u) {
        let sa = red[first] + red[first + 1u] + red[first + 2u] + red[first + 3u];
        let sb = red[first + 4u] + red[first + 5u] + red[first + 6u] + red[first + 7u];
        let d = row + 2u * n4 + 4u * (c / 8u);
        xq[d] = bitcast<u32>(dx);
        xq[d + 1u] = bitcast<u32>(sa);
        xq[d + 2u] = bitcast<u32>(sb);
        xq[d + 3u] = 0u;
    }
}
