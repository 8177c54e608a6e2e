// Causal paged attention, one workgroup per (row, query head, key split):
// the row's query over its sequence's cached K/V at positions lo..=pos
// (lo = 0, or pos + 1 - window for a sliding-window layer), read in place
// from the blocks of its block table ([block][kv head][slot][hd], f16
// pairs), 64 positions at a time with an online softmax (each position's
// weight and V slot computed once per chunk, into workgroup memory; the
// K and V reads unrolled by four so that several are in flight); each
// thread keeps the output dimensions d ≡ thread (mod 64), up to 4 of them
// (hd ≤ 256). With `split` > 0 (steps of few rows: decode), workgroup z
// takes positions lo + z·split .. + split only and writes its maximum,
// sum and unnormalized output to `parts`, which attn_combine.wgsl merges;
// so a decode step runs on many workgroups instead of one per head.

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
@group(0) @binding(3) var<storage, read> k_cache: array<u32>;
@group(0) @binding(4) var<storage, read> v_cache: array<u32>;
@group(0) @binding(5) var<storage, read_write> out: array<f32>;
@group(0) @binding(6) var<storage, read_write> parts: array<f32>;

var<workgroup> q: array<f32, 256>;
var<workgroup> sc: array<f32, 64>;
var<workgroup> vbase: array<u32, 64>;
var<workgroup> red: array<f32, 64>;
var<workgroup> last_pos: u32;

const NEG: f32 = -3.0e38;

fn slot_base(table: u32, kvh: u32, j: u32) -> u32 {
    let block = step[table + j / p.block_size];
    return ((block * p.kv_heads + kvh) * p.block_size + j % p.block_size) * p.head_dim / 2u;
}

fn v_at(word: u32, odd: bool) -> f32 {
    let v = unpack2x16float(word);
    return select(v.x, v.y, odd);
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let h = wid.x;
    let t = wid.y;
    let hd = p.head_dim;
    let hd2 = hd / 2u;
    let kvh = h / (p.heads / p.kv_heads);
    let table = p.tables + step[p.seq_table + step[p.row_seq + t]];
    for (var d = lid.x; d < hd; d += 64u) {
        q[d] = qkv[t * p.stride + h * hd + d];
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
    var acc = array<f32, 4>(0.0, 0.0, 0.0, 0.0);
    for (var c0 = first; c0 <= last; c0 += 64u) {
        let j = c0 + lid.x;
        var s = NEG;
        if (j <= last) {
            let kb = slot_base(table, kvh, j);
            var s0 = 0.0;
            var s1 = 0.0;
            var d = 0u;
            for (; d + 4u <= hd2; d += 4u) {
                let k0 = unpack2x16float(k_cache[kb + d]);
                let k1 = unpack2x16float(k_cache[kb + d + 1u]);
                let k2 = unpack2x16float(k_cache[kb + d + 2u]);
                let k3 = unpack2x16float(k_cache[kb + d + 3u]);
                let e = 2u * d;
                s0 += q[e] * k0.x + q[e + 1u] * k0.y + q[e + 2u] * k1.x + q[e + 3u] * k1.y;
                s1 += q[e + 4u] * k2.x + q[e + 5u] * k2.y + q[e + 6u] * k3.x + q[e + 7u] * k3.y;
            }
            for (; d < hd2; d++) {
                let k = unpack2x16float(k_cache[kb + d]);
                s0 += q[2u * d] * k.x + q[2u * d + 1u] * k.y;
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
        for (var k = 0u; k < 4u; k++) {
            let d = lid.x + 64u * k;
            if (d < hd) {
                let w = d / 2u;
                let odd = (d & 1u) == 1u;
                var a0 = acc[k] * alpha;
                var a1 = 0.0;
                var jj = 0u;
                for (; jj + 4u <= n; jj += 4u) {
                    let v0 = v_at(v_cache[vbase[jj] + w], odd);
                    let v1 = v_at(v_cache[vbase[jj + 1u] + w], odd);
                    let v2 = v_at(v_cache[vbase[jj + 2u] + w], odd);
                    let v3 = v_at(v_cache[vbase[jj + 3u] + w], odd);
                    a0 += sc[jj] * v0 + sc[jj + 1u] * v1;
                    a1 += sc[jj + 2u] * v2 + sc[jj + 3u] * v3;
                }
                for (; jj < n; jj++) {
                    a0 += sc[jj] * v_at(v_cache[vbase[jj] + w], odd);
                }
                acc[k] = a0 + a1;
            }
        }
        workgroupBarrier();
    }
    if (p.split > 0u) {
        let base = ((t * p.heads + h) * p.nsplit + wid.z) * (hd + 2u);
        if (lid.x == 0u) {
            parts[base] = m;
            parts[base + 1u] = l;
        }
        for (var k = 0u; k < 4u; k++) {
            let d = lid.x + 64u * k;
            if (d < hd) {
                parts[base + 2u + d] = acc[k];
            }
        }
        return;
    }
    for (var k = 0u; k < 4u; k++) {
        let d = lid.x + 64u * k;
        if (d < hd) {
            out[t * p.heads * hd + h * hd + d] = acc[k] / l;
        }
    }
}
