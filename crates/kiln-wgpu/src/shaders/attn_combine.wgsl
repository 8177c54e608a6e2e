// Merges the key splits of attention.wgsl: per (row, query head), the
// splits' maxima m_z, sums l_z and unnormalized outputs o_z (in `parts`)
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

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let h = wid.x;
    let t = wid.y;
    let hd = p.head_dim;
    let first = (t * p.heads + h) * p.nsplit;
    var mx = -3.0e38;
    for (var z = 0u; z < p.nsplit; z++) {
        let b = (first + z) * (hd + 2u);
        if (parts[b + 1u] > 0.0) {
            mx = max(mx, parts[b]);
        }
    }
    var l = 0.0;
    for (var z = 0u; z < p.nsplit; z++) {
        let b = (first + z) * (hd + 2u);
        if (parts[b + 1u] > 0.0) {
            l += exp(parts[b] - mx) * parts[b + 1u];
        }
    }
    for (var d = lid.x; d < hd; d += 64u) {
        var o = 0.0;
        for (var z = 0u; z < p.nsplit; z++) {
            let b = (first + z) * (hd + 2u);
            if (parts[b + 1u] > 0.0) {
                o += exp(parts[b] - mx) * parts[b + 2u + d];
            }
        }
        out[t * p.heads * hd + h * hd + d] = o / l;
    }
}
