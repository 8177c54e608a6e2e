// RMSNorm of rows: out[i] = x[src]·g / rms(x[src]) (flags & 2: out[i] +=
// it, a post-norm's residual add). flags & 1: src = step[gather + i] (the
// step's logit rows), else src = i. One workgroup per row.

struct Params {
    cols: u32,
    eps: f32,
    flags: u32,
    gather: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> g: array<f32>;
@group(0) @binding(3) var<storage, read> step: array<u32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;

var<workgroup> red: array<f32, 64>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let i = wid.x;
    var src = i;
    if ((p.flags & 1u) != 0u) {
        src = step[p.gather + i];
    }
    var ss = 0.0;
    for (var c = lid.x; c < p.cols; c += 64u) {
        let v = x[src * p.cols + c];
        ss += v * v;
    }
    red[lid.x] = ss;
    workgroupBarrier();
    for (var half = 32u; half > 0u; half >>= 1u) {
        if (lid.x < half) {
            red[lid.x] += red[lid.x + half];
        }
        workgroupBarrier();
    }
    let s = inverseSqrt(red[0] / f32(p.cols) + p.eps);
    for (var c = lid.x; c < p.cols; c += 64u) {
        var v = x[src * p.cols + c] * s * g[c];
        if ((p.flags & 2u) != 0u) {
            v += out[i * p.cols + c];
        }
        out[i * p.cols + c] = v;
    }
}
