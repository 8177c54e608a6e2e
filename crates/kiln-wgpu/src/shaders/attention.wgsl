// Causal paged attention, one workgroup per (row, query head, key split):
// the row's query over its sequence's cached K/V at positions lo..=pos
// (lo = 0, or pos + 1 - window for a sliding-window layer), read in place
// from the blocks of its block table ([block][kv head][slot][hd], f16
// pairs), 64 positions at a time with an online softmax: each thread
// scores one position, reading its key 16 bytes at a time (four reads in
// flight), and the position's weight and V slot go to workgroup memory;
// then for V each thread takes 8 dimensions (one 16-byte read of a slot)
// of every G-th position of the chunk, G = 64 / (hd / 8) groups of
// threads side by side (8 positions a thread at hd 64, four reads in
// flight), and the groups' sums are added at the end (hd a multiple of 8,
// at most 256). With `split` > 0 (steps of few rows: decode), workgroup z
// takes positions lo + z·split .. + split only and writes its
// unnormalized output, maximum and sum to `parts` (hd + 4 floats), which
// attn_combine.wgsl merges, or a decode step's output product as it reads
// them (product.wgsl, INPUT 3); so a decode step runs on many workgroups
// instead of one per head.

struct Params {
    heads: u32,
    kv_heads: u32,
    head_dim: u32,
    stride: u32,     // floats per qkv row (Q is first)
    block_size: u32,
    scale: f32,
    positions: u32,  // offsets into `step`: each row's position,
    row_seq: u32,    // its sequence,
    seq_table: u32,  // each sequence's first entry in the block tables,
    tables: u32,     // the block tables
    window: u32,     // positions a sliding-window layer attends to (0: all)
    split: u32,      // positions per workgroup z (0: all, output to `out`)
    nsplit: u32,     // workgroups along z
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> qkv: array<f32>;
@group(0) @binding(2) var<storage, read> step: array<u32>;
@group(0) @binding(3) var<storage, read> k_cache: array<vec4<u32>>;
@group(0) @binding(4) var<storage, read> v_cache: array<vec4<u32>>;
@group(0) @binding(5) var<storage, read_write> out: array<f32>;
@group(0) @binding(6) var<storage, read_write> parts: array<f32>;

var<workgroup> q: array<vec4<f32>, 64>;
// Each thread's 8 output sums (two vec4s), added over the groups at the end.
var<workgroup> vsum: array<vec4<f32>, 128>;
var<workgroup> sc: array<f32, 64>;
var<workgroup> vbase: array<u32, 64>;
var<workgroup> red: array<f32, 64>;
var<workgroup> last_pos: u32;

const NEG: f32 = -3.0e38;

// The 16-byte index of position j's slot of kv head kvh.
fn slot_base(table: u32, kvh: u32, j: u32) -> u32 {
    let block = step[table + j / p.block_size];
    return ((block * p.kv_heads + kvh) * p.block_size + j % p.block_size) * p.head_dim / 8u;
}

// Eight f16 values as two vec4s' dot with q's vec4s 2i and 2i + 1.
fn dot8(k: vec4<u32>, i: u32) -> f32 {
    let a = vec4<f32>(unpack2x16float(k.x), unpack2x16float(k.y));
    let b = vec4<f32>(unpack2x16float(k.z), unpack2x16float(k.w));
    return dot(a, q[2u * i]) + dot(b, q[2u * i + 1u]);
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let h = wid.x;
    let t = wid.y;
    let hd = p.head_dim;
    // 16-byte words per K/V slot, the V groups, and this thread's V word
    // and group (threads past the groups only score positions).
    let v4 = hd / 8u;
    let ng = 64u / v4;
    let vc = lid.x % v4;
    let vg = lid.x / v4;
    let kvh = h / (p.heads / p.kv_heads);
    let table = p.tables + step[p.seq_table + step[p.row_seq + t]];
    for (var d = lid.x; d < hd / 4u; d += 64u) {
        let o = t * p.stride + h * hd + 4u * d;
        q[d] = vec4<f32>(qkv[o], qkv[o + 1u], qkv[o + 2u], qkv[o + 3u]);
    }
    if (lid.x == 0u) {
        last_pos = step[p.positions + t];
    }
    let pos = workgroupUniformLoad(&last_pos);
    var lo = 0u;
    if (p.window > 0u && pos + 1u > p.window) {
        lo = pos + 1u - p.window;
    }
    // This workgroup's positions: first..=last (none when first > last).
    var first = lo;
    var last = pos;
    if (p.split > 0u) {
        first = lo + wid.z * p.split;
        last = min(pos, first + p.split - 1u);
    }
    var m = NEG;
    var l = 0.0;
    var acc_a = vec4<f32>(0.0);
    var acc_b = vec4<f32>(0.0);
    for (var c0 = first; c0 <= last; c0 += 64u) {
        let j = c0 + lid.x;
        var s = NEG;
        if (j <= last) {
            let kb = slot_base(table, kvh, j);
            var s0 = 0.0;
            var s1 = 0.0;
            var i = 0u;
            for (; i + 4u <= v4; i += 4u) {
                let k0 = k_cache[kb + i];
                let k1 = k_cache[kb + i + 1u];
                let k2 = k_cache[kb + i + 2u];
                let k3 = k_cache[kb + i + 3u];
                s0 += dot8(k0, i) + dot8(k1, i + 1u);
                s1 += dot8(k2, i + 2u) + dot8(k3, i + 3u);
            }
            for (; i < v4; i++) {
                s0 += dot8(k_cache[kb + i], i);
            }
            s = (s0 + s1) * p.scale;
        }
        red[lid.x] = s;
        workgroupBarrier();
        for (var half = 32u; half > 0u; half >>= 1u) {
            if (lid.x < half) {
                red[lid.x] = max(red[lid.x], red[lid.x + half]);
            }
            workgroupBarrier();
        }
        let m_new = max(m, red[0]);
        workgroupBarrier();
        let e = select(0.0, exp(s - m_new), j <= last);
        red[lid.x] = e;
        // Each position's weight and V slot, once for every dimension.
        sc[lid.x] = e;
        if (j <= last) {
            vbase[lid.x] = slot_base(table, kvh, j);
        }
        workgroupBarrier();
        for (var half = 32u; half > 0u; half >>= 1u) {
            if (lid.x < half) {
                red[lid.x] += red[lid.x + half];
            }
            workgroupBarrier();
        }
        let alpha = exp(m - m_new);
        l = l * alpha + red[0];
        m = m_new;
        let n = min(64u, last + 1u - c0);
        acc_a *= alpha;
        acc_b *= alpha;
        if (vg < ng) {
            var jj = vg;
            for (; jj + 3u * ng < n; jj += 4u * ng) {
                let w0 = v_cache[vbase[jj] + vc];
                let w1 = v_cache[vbase[jj + ng] + vc];
                let w2 = v_cache[vbase[jj + 2u * ng] + vc];
                let w3 = v_cache[vbase[jj + 3u * ng] + vc];
                acc_a += sc[jj] * vec4<f32>(unpack2x16float(w0.x), unpack2x16float(w0.y))
                    + sc[jj + ng] * vec4<f32>(unpack2x16float(w1.x), unpack2x16float(w1.y))
                    + sc[jj + 2u * ng] * vec4<f32>(unpack2x16float(w2.x), unpack2x16float(w2.y))
                    + sc[jj + 3u * ng] * vec4<f32>(unpack2x16float(w3.x), unpack2x16float(w3.y));
                acc_b += sc[jj] * vec4<f32>(unpack2x16float(w0.z), unpack2x16float(w0.w))
                    + sc[jj + ng] * vec4<f32>(unpack2x16float(w1.z), unpack2x16float(w1.w))
                    + sc[jj + 2u * ng] * vec4<f32>(unpack2x16float(w2.z), unpack2x16float(w2.w))
                    + sc[jj + 3u * ng] * vec4<f32>(unpack2x16float(w3.z), unpack2x16float(w3.w));
            }
            for (; jj < n; jj += ng) {
                let w0 = v_cache[vbase[jj] + vc];
                acc_a += sc[jj] * vec4<f32>(unpack2x16float(w0.x), unpack2x16float(w0.y));
                acc_b += sc[jj] * vec4<f32>(unpack2x16float(w0.z), unpack2x16float(w0.w));
            }
        }
        workgroupBarrier();
    }
    // The groups' sums: group 0's threads add them up (dims 8·vc .. + 7).
    vsum[2u * lid.x] = acc_a;
    vsum[2u * lid.x + 1u] = acc_b;
    workgroupBarrier();
    if (lid.x >= v4) {
        return;
    }
    for (var g = 1u; g < ng; g++) {
        acc_a += vsum[2u * (g * v4 + vc)];
        acc_b += vsum[2u * (g * v4 + vc) + 1u];
    }
    let d0 = 8u * vc;
    if (p.split > 0u) {
        // [unnormalized output (hd) | maximum, sum, 2 unused]: the
        // output 16-byte aligned, as the combining product reads it.
        let base = ((t * p.heads + h) * p.nsplit + wid.z) * (hd + 4u);
        if (lid.x == 0u) {
            parts[base + hd] = m;
            parts[base + hd + 1u] = l;
        }
        for (var k = 0u; k < 4u; k++) {
            parts[base + d0 + k] = acc_a[k];
            parts[base + 4u + d0 + k] = acc_b[k];
        }
        return;
    }
    let o = t * p.heads * hd + h * hd + d0;
    for (var k = 0u; k < 4u; k++) {
        out[o + k] = acc_a[k] / l;
        out[o + 4u + k] = acc_b[k] / l;
    }
}
