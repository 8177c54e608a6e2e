// Merges the key splits of attention.wgsl: per (row, query head), the
// splits' unnormalized outputs o_z, maxima m_z and sums l_z (in `parts`,
// hd + 4 floats a split)
// become out = Σ e^(m_z − M) o_z / Σ e^(m_z − M) l_z with M = max m_z
// (an empty split has l_z = 0 and adds nothing).

struct Params {
    heads: u32,
    head_dim: u32,
    nsplit: u32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> parts: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

// The splits' scales e^(m_z − M) (0 for an empty split) and 1 / Σ e^(m_z
// − M) l_z, computed once per workgroup.
var<workgroup> scale: array<f32, 64>;
var<workgroup> ml: array<vec2<f32>, 64>;
var<workgroup> inv_l: f32;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let h = wid.x;
    let t = wid.y;
    let hd = p.head_dim;
    let ns = p.nsplit;
    let first = (t * p.heads + h) * ns;
    // Each split's maximum and sum, read once (one thread a split).
    if (lid.x < ns) {
        let b = (first + lid.x) * (hd + 4u) + hd;
        ml[lid.x] = vec2<f32>(parts[b], parts[b + 1u]);
    }
    workgroupBarrier();
    if (lid.x == 0u) {
        var mx = -3.0e38;
        for (var z = 0u; z < ns; z++) {
            if (ml[z].y > 0.0) {
                mx = max(mx, ml[z].x);
            }
        }
        var l = 0.0;
        for (var z = 0u; z < ns; z++) {
            let e = select(0.0, exp(ml[z].x - mx), ml[z].y > 0.0);
            scale[z] = e;
            l += e * ml[z].y;
        }
        inv_l = 1.0 / l;
    }
    workgroupBarrier();
    let il = inv_l;
    for (var d = lid.x; d < hd; d += 64u) {
        var o0 = 0.0;
        var o1 = 0.0;
        var z = 0u;
        // Four splits' reads in flight at a time.
        for (; z + 4u <= ns; z += 4u) {
            let b = (first + z) * (hd + 4u) + d;
            let v0 = parts[b];
            let v1 = parts[b + hd + 4u];
            let v2 = parts[b + 2u * (hd + 4u)];
            let v3 = parts[b + 3u * (hd + 4u)];
            o0 += scale[z] * v0 + scale[z + 1u] * v1;
            o1 += scale[z + 2u] * v2 + scale[z + 3u] * v3;
        }
        for (; z < ns; z++) {
            o0 += scale[z] * parts[(first + z) * (hd + 4u) + d];
        }
        out[t * p.heads * hd + h * hd + d] = (o0 + o1) * il;
    }
}
