// Sampling on the device: one workgroup of SB threads per logit row picks
// the row's token, so that only token ids travel to the host.
//
// The stages are kiln's CPU sampler's (kiln-core/src/sample): temperature
// 0 is argmax (ties → lowest id; sample_max.wgsl's candidates, merged
// here); otherwise temperature → top-k → softmax → top-p → min-p → a draw
// with the host's uniform number. Nothing is sorted: top-k and top-p find
// their cut by a radix select (four rounds of 8 bits over the logits'
// keys), counting tokens for top-k and summing probability mass for top-p.
//
// Thread t takes the ids t, t + SB, t + 2·SB, ... in that order. Ties at a
// cut and the draw's walk go in thread order, then id order, and every
// mass is summed in fixed point (2^-32 units, 64 bits as vec2<u32>: lo,
// hi), so a row, its parameters and its uniform number always give the
// same token. The logits' row and the draw are the same for the whole
// workgroup; values that steer control flow around barriers are read
// through `workgroupUniformLoad` or from the read-only buffers.

// (`Params`, `logits`, the keys: sample_key.wgsl, prepended.)
@group(0) @binding(2) var<storage, read> best_of: array<vec2<u32>>;
@group(0) @binding(3) var<storage, read> step_meta: array<u32>;
@group(0) @binding(4) var<storage, read_write> picks: array<u32>;

const SB: u32 = SAMPLE_THREADSu;

// Reductions and scans (one entry a thread), the radix histogram (its
// 64-bit bins as two words), and what thread 0 hands the others.
var<workgroup> red: array<vec2<u32>, SB>;
var<workgroup> hlo: array<atomic<u32>, 256>;
var<workgroup> hhi: array<atomic<u32>, 256>;
var<workgroup> bcast: vec4<u32>;

// The row and its draw (the same in every thread).
var<private> row_base: u32;
var<private> inv_temp: f32;
var<private> maxl: f32;
var<private> inf_max: bool;
// The top-k and top-p cuts: keep keys above `key`, and of the tokens at
// `key` the first `ties` in thread-then-id order, of which `base` are
// before this thread's. `tk`/`tp` count this thread's ties at each cut so
// far in the current walk (reset at its start).
var<private> k_on: bool;
var<private> k_key: u32;
var<private> k_ties: u32;
var<private> k_base: u32;
var<private> p_on: bool;
var<private> p_key: u32;
var<private> p_ties: u32;
var<private> p_base: u32;
var<private> tk: u32;
var<private> tp: u32;
// Weight above a radix select's key (set by `radix_select`).
var<private> above: vec2<u32>;

fn add64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
    let lo = a.x + b.x;
    return vec2<u32>(lo, a.y + b.y + select(0u, 1u, lo < a.x));
}

fn sub64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
    return vec2<u32>(a.x - b.x, a.y - b.y - select(0u, 1u, a.x < b.x));
}

fn lt64(a: vec2<u32>, b: vec2<u32>) -> bool {
    return a.y < b.y || (a.y == b.y && a.x < b.x);
}

fn f64of(a: vec2<u32>) -> f32 {
    return f32(a.y) * 4294967296.0 + f32(a.x);
}

// a · b as 64 bits.
fn mul32(a: u32, b: u32) -> vec2<u32> {
    let al = a & 0xffffu;
    let ah = a >> 16u;
    let bl = b & 0xffffu;
    let bh = b >> 16u;
    let ll = al * bl;
    let mid = vec2<u32>(al * bh, 0u);
    let mid2 = vec2<u32>(ah * bl, 0u);
    var r = vec2<u32>(ll, ah * bh);
    let m = add64(mid, mid2);
    // (m << 16) as 64 bits.
    r = add64(r, vec2<u32>(m.x << 16u, (m.x >> 16u) | (m.y << 16u)));
    return r;
}

// A weight in [0, 1] in 2^-32 units.
fn fixed(w: f32) -> vec2<u32> {
    if (w >= 1.0) {
        return vec2<u32>(0u, 1u);
    }
    return vec2<u32>(u32(max(w, 0.0) * 4294967296.0), 0u);
}

// Softmax weight relative to the best token (which weighs 1).
fn weight_of(x: f32) -> f32 {
    let s = x * inv_temp;
    if (inf_max) {
        return select(0.0, 1.0, s == maxl);
    }
    return exp(s - maxl);
}

// Whether the token of key k is drawable (not NaN, not -inf) and passes
// the top-k cut (stage ≥ 1) and the top-p cut (stage ≥ 2). Called in this
// thread's id order within a walk, with `tk` and `tp` reset at its start.
fn survives(k: u32, stage: u32) -> bool {
    if (k <= KEY_NEG_INF) {
        return false;
    }
    if (stage >= 1u && k_on) {
        if (k < k_key) {
            return false;
        }
        if (k == k_key) {
            let j = tk;
            tk += 1u;
            if (k_base + j >= k_ties) {
                return false;
            }
        }
    }
    if (stage >= 2u && p_on) {
        if (k < p_key) {
            return false;
        }
        if (k == p_key) {
            let j = tp;
            tp += 1u;
            if (p_base + j >= p_ties) {
                return false;
            }
        }
    }
    return true;
}

// The exclusive prefix of `v` over the threads before t (in thread order)
// as .xy, and the workgroup's total as .zw.
fn scan64(v: vec2<u32>, t: u32) -> vec4<u32> {
    red[t] = v;
    workgroupBarrier();
    for (var o = 1u; o < SB; o <<= 1u) {
        var y = vec2<u32>(0u);
        if (t >= o) {
            y = red[t - o];
        }
        workgroupBarrier();
        red[t] = add64(red[t], y);
        workgroupBarrier();
    }
    let inc = red[t];
    let total = workgroupUniformLoad(&red[SB - 1u]);
    workgroupBarrier();
    return vec4<u32>(sub64(inc, v), total);
}

fn hist_add(b: u32, w: vec2<u32>) {
    let old = atomicAdd(&hlo[b], w.x);
    let carry = select(0u, 1u, old + w.x < old);
    if (w.y + carry != 0u) {
        atomicAdd(&hhi[b], w.y + carry);
    }
}

// The largest key K such that weight(key > K) < goal ≤ weight(key ≥ K)
// over the tokens surviving `stage`, a token weighing 1 (`mass` false:
// counting) or its fixed-point mass; weight(key > K) goes to `above`.
fn radix_select(stage: u32, mass: bool, goal: vec2<u32>, t: u32) -> u32 {
    var prefix = 0u;
    var mask = 0u;
    var acc = vec2<u32>(0u);
    for (var round = 0u; round < 4u; round++) {
        let shift = 24u - 8u * round;
        for (var b = t; b < 256u; b += SB) {
            atomicStore(&hlo[b], 0u);
            atomicStore(&hhi[b], 0u);
        }
        workgroupBarrier();
        tk = 0u;
        tp = 0u;
        for (var i = t; i < p.vocab; i += SB) {
            let x = logits[row_base + i];
            let k = fkey(x);
            if (survives(k, stage) && (k & mask) == prefix) {
                var w = vec2<u32>(1u, 0u);
                if (mass) {
                    w = fixed(weight_of(x));
                }
                hist_add((k >> shift) & 255u, w);
            }
        }
        workgroupBarrier();
        if (t == 0u) {
            var b = 255u;
            loop {
                if (b == 0u) {
                    break;
                }
                let h = vec2<u32>(atomicLoad(&hlo[b]), atomicLoad(&hhi[b]));
                let next = add64(acc, h);
                if (!lt64(next, goal)) {
                    break;
                }
                acc = next;
                b -= 1u;
            }
            bcast = vec4<u32>(b, acc.x, acc.y, 0u);
        }
        let got = workgroupUniformLoad(&bcast);
        prefix |= got.x << shift;
        mask |= 255u << shift;
        acc = got.yz;
    }
    above = acc;
    return prefix;
}

// This thread's tokens at key `key` among those surviving `stage`.
fn count_at(key: u32, stage: u32, t: u32) -> u32 {
    var eq = 0u;
    tk = 0u;
    tp = 0u;
    for (var i = t; i < p.vocab; i += SB) {
        let k = fkey(logits[row_base + i]);
        if (survives(k, stage) && k == key) {
            eq += 1u;
        }
    }
    return eq;
}

// This thread's mass among the tokens surviving `stage` (and, at stage 3,
// min-p: a weight below `min_p` of the best's drops out).
fn mass_of(stage: u32, min_p: f32, t: u32) -> vec2<u32> {
    var mine = vec2<u32>(0u);
    tk = 0u;
    tp = 0u;
    for (var i = t; i < p.vocab; i += SB) {
        let x = logits[row_base + i];
        if (survives(fkey(x), min(stage, 2u))) {
            let w = weight_of(x);
            if (stage < 3u || !(min_p > 0.0 && w < min_p)) {
                mine = add64(mine, fixed(w));
            }
        }
    }
    return mine;
}

@compute @workgroup_size(SB)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let t = lid.x;
    let row = wid.x;
    row_base = row * p.vocab;
    // Argmax: the best of sample_max's candidates.
    var best = vec2<u32>(0u);
    for (var c = t; c < p.chunks; c += SB) {
        best = better(best, best_of[row * p.chunks + c]);
    }
    red[t] = best;
    workgroupBarrier();
    for (var s = SB / 2u; s > 0u; s >>= 1u) {
        if (t < s) {
            red[t] = better(red[t], red[t + s]);
        }
        workgroupBarrier();
    }
    let top = workgroupUniformLoad(&red[0]);
    let argmax = select(0u, ~top.y, p.vocab > 0u);
    let o = p.draws + 8u * row;
    if (step_meta[o] != 0u || top.x <= KEY_NEG_INF) {
        // Greedy, or nothing drawable (the CPU sampler takes the argmax too).
        if (t == 0u) {
            picks[row] = argmax;
        }
        return;
    }
    let top_k = step_meta[o + 1u];
    inv_temp = bitcast<f32>(step_meta[o + 2u]);
    let top_p = bitcast<f32>(step_meta[o + 3u]);
    let min_p = bitcast<f32>(step_meta[o + 4u]);
    let uniform = step_meta[o + 5u];
    maxl = logits[row_base + argmax] * inv_temp;
    inf_max = (bitcast<u32>(maxl) & 0x7fffffffu) == 0x7f800000u;

    // Top-k: the cut is the k-th largest key; its ties go in the fixed order.
    let use_k = top_k > 0u && top_k < p.vocab;
    k_on = use_k;
    p_on = false;
    if (use_k) {
        k_key = radix_select(0u, false, vec2<u32>(top_k, 0u), t);
        k_ties = top_k - above.x;
        k_base = scan64(vec2<u32>(count_at(k_key, 0u, t), 0u), t).x;
    }

    // Top-p over the top-k survivors: the cut where their mass, largest
    // first, reaches top_p of their total.
    if (top_p < 1.0) {
        let total = scan64(mass_of(1u, 0.0, t), t).zw;
        let tf = top_p * f64of(total);
        let hi = u32(tf / 4294967296.0);
        var goal = vec2<u32>(u32(tf - f32(hi) * 4294967296.0), hi);
        if (goal.x == 0u && goal.y == 0u) {
            goal = vec2<u32>(1u, 0u);
        }
        p_key = radix_select(1u, true, goal, t);
        // The tokens at the cut weigh the same: keep as many as the
        // missing mass needs, at least one.
        let wt = fixed(weight_of(unkey(p_key)));
        var need = 0xffffffffu;
        if (wt.x != 0u || wt.y != 0u) {
            need = u32(min(ceil(f64of(sub64(goal, above)) / f64of(wt)), 4294967040.0));
        }
        p_ties = max(need, 1u);
        p_base = scan64(vec2<u32>(count_at(p_key, 1u, t), 0u), t).x;
        p_on = true;
    }

    // Min-p, then the draw: this thread's surviving mass, the workgroup's
    // prefix, and the thread holding the target walks its own tokens.
    let mine = mass_of(3u, min_p, t);
    let s = scan64(mine, t);
    let before = s.xy;
    let total = s.zw;
    if (total.x == 0u && total.y == 0u) {
        if (t == 0u) {
            picks[row] = argmax;
        }
        return;
    }
    // The target in [0, total): total times the uniform 32-bit fraction.
    let goal = add64(mul32(total.y, uniform), vec2<u32>(mul32(total.x, uniform).y, 0u));
    if (!lt64(goal, before) && lt64(goal, add64(before, mine))) {
        var cum = before;
        var pick = 0xffffffffu;
        tk = 0u;
        tp = 0u;
        for (var i = t; i < p.vocab; i += SB) {
            let x = logits[row_base + i];
            if (!survives(fkey(x), 2u)) {
                continue;
            }
            let w = weight_of(x);
            if (min_p > 0.0 && w < min_p) {
                continue;
            }
            let f = fixed(w);
            cum = add64(cum, f);
            if (pick == 0xffffffffu && (f.x != 0u || f.y != 0u) && lt64(goal, cum)) {
                pick = i;
            }
        }
        picks[row] = select(argmax, pick, pick != 0xffffffffu);
    }
}
