//! gpt-oss in the tiny-model tools: its extra tensors and metadata, and its
//! float64 reference forward, written from the model card and OpenAI's
//! reference code rather than from kiln's graph: attention with a learned
//! sink logit per head in every softmax and a sliding window on even
//! layers, Q/K/V/O biases, a biased router (top-k by logit, then a softmax
//! over the picked), experts with biases and the clamped SwiGLU.

use kiln_backend::RopeDesc;
use kiln_gguf::GgufWriter;
use kiln_kernels::ops::Rope;

use super::{matvec, moe::record_margin, rms, Rng, TinySpec, TinyWeights};
use crate::config::{ModelConfig, RopeScaling};

/// The tiny files' YaRN: a factor of 4 over an original context of 32.
pub const TINY_YARN: RopeScaling = RopeScaling::Yarn {
    factor: 4.0,
    original_max_position: 32,
    beta_fast: 32.0,
    beta_slow: 1.0,
    // 0.1 ln 4 + 1, YaRN's default for the factor.
    attn_factor: 1.138_629_4,
};

/// gpt-oss's clamp and slope of the gated unit.
const LIMIT: f64 = 7.0;
const ALPHA: f64 = 1.702;

/// gpt-oss's metadata beyond the common keys: the window, YaRN.
pub(crate) fn write_metadata(spec: &TinySpec, g: &mut GgufWriter) -> Result<(), kiln_gguf::GgufError> {
    let RopeScaling::Yarn { factor, original_max_position, .. } = TINY_YARN else { unreachable!() };
    g.add_metadata("gpt-oss.attention.sliding_window", spec.window as u32)?;
    g.add_metadata("gpt-oss.rope.scaling.type", "yarn")?;
    g.add_metadata("gpt-oss.rope.scaling.factor", factor)?;
    g.add_metadata("gpt-oss.rope.scaling.original_context_length", original_max_position as u32)?;
    Ok(())
}

/// The biases and sinks of every layer (f32, as the converter writes them).
pub(crate) fn extra_weights(spec: &TinySpec, w: &mut TinyWeights) {
    let mut rng = Rng::new(spec.seed ^ 0x0067_7074_2d6f_7373);
    let (d, ff) = (spec.hidden, spec.ff);
    let e = spec.moe.map_or(0, |m| m.0);
    let mut put = |name: String, shape: Vec<usize>, base: f32, spread: f32| {
        let n: usize = shape.iter().product();
        let vals = (0..n).map(|_| base + spread * rng.uniform()).collect();
        w.insert(name, (shape, vals));
    };
    for i in 0..spec.layers {
        let p = |s: &str| format!("blk.{i}.{s}");
        put(p("attn_output.bias"), vec![d], 0.0, 0.2);
        // Sinks of the order of the scores, so that they matter.
        put(p("attn_sinks.weight"), vec![spec.heads], 0.5, 2.0);
        put(p("ffn_gate_inp.bias"), vec![e], 0.0, 0.5);
        put(p("ffn_gate_exps.bias"), vec![e, ff], 0.0, 0.5);
        put(p("ffn_up_exps.bias"), vec![e, ff], 0.0, 0.5);
        put(p("ffn_down_exps.bias"), vec![e, d], 0.0, 0.2);
    }
}

fn add(a: &mut [f32], b: &[f32]) {
    for (x, y) in a.iter_mut().zip(b) {
        *x += y;
    }
}

/// Every position's normed last-layer row (see [`super::reference_hidden`]).
pub(crate) fn reference_hidden(cfg: &ModelConfig, w: &TinyWeights, tokens: &[u32]) -> Vec<Vec<f32>> {
    let g = |n: &str| &w[n].1;
    let (d, hd, nh, nkv) = (cfg.hidden_size, cfg.head_dim, cfg.num_heads, cfg.num_kv_heads);
    let rope = Rope::from_desc(&RopeDesc {
        style: cfg.rope_style,
        rot_dim: hd,
        theta: cfg.rope_theta,
        max_pos: tokens.len() + 1,
        freq_factors: cfg.rope_scaling.freq_factors(cfg.rope_theta, hd),
        scale: cfg.rope_scaling.position_scale(),
        attn_factor: cfg.rope_scaling.attn_factor(),
    });
    let pool = kiln_kernels::ThreadPool::new(1);
    let mut xs: Vec<Vec<f32>> =
        tokens.iter().map(|&t| g("token_embd.weight")[t as usize * d..(t as usize + 1) * d].to_vec()).collect();
    for l in 0..cfg.num_layers {
        let p = |s: &str| format!("blk.{l}.{s}");
        // Even layers are local (llama.cpp's pattern: layer % 2 == 0).
        let window = if l % 2 == 0 { cfg.sliding_window.unwrap_or(usize::MAX) } else { usize::MAX };
        let (mut qs, mut ks, mut vs) = (Vec::new(), Vec::new(), Vec::new());
        for (pos, x) in xs.iter().enumerate() {
            let h = rms(x, g(&p("attn_norm.weight")), cfg.rms_norm_eps);
            let mut q = matvec(g(&p("attn_q.weight")), nh * hd, d, &h);
            let mut k = matvec(g(&p("attn_k.weight")), nkv * hd, d, &h);
            let mut v = matvec(g(&p("attn_v.weight")), nkv * hd, d, &h);
            add(&mut q, g(&p("attn_q.bias")));
            add(&mut k, g(&p("attn_k.bias")));
            add(&mut v, g(&p("attn_v.bias")));
            rope.apply(&pool, &mut q, &[pos as u32], nh, hd);
            rope.apply(&pool, &mut k, &[pos as u32], nkv, hd);
            // The KV cache stores f16: the reference rounds K and V the same way.
            let f16 = |x: Vec<f32>| x.into_iter().map(|v| half::f16::from_f32(v).to_f32()).collect::<Vec<f32>>();
            qs.push(q);
            ks.push(f16(k));
            vs.push(f16(v));
        }
        for (pos, x) in xs.iter_mut().enumerate() {
            let first = (pos + 1).saturating_sub(window);
            let mut attn = vec![0f32; nh * hd];
            for h in 0..nh {
                let kvh = h / (nh / nkv);
                let q = &qs[pos][h * hd..(h + 1) * hd];
                let sc: Vec<f64> = (first..=pos)
                    .map(|j| {
                        let dot: f64 =
                            q.iter().zip(&ks[j][kvh * hd..]).map(|(a, b)| f64::from(*a) * f64::from(*b)).sum();
                        dot / (hd as f64).sqrt()
                    })
                    .collect();
                let sink = f64::from(g(&p("attn_sinks.weight"))[h]);
                let m = sc.iter().copied().fold(sink, f64::max);
                let z: f64 = sc.iter().map(|s| (s - m).exp()).sum::<f64>() + (sink - m).exp();
                for (j, s) in (first..=pos).zip(&sc) {
                    let pj = (s - m).exp() / z;
                    for e in 0..hd {
                        attn[h * hd + e] += (pj * f64::from(vs[j][kvh * hd + e])) as f32;
                    }
                }
            }
            let mut o = matvec(g(&p("attn_output.weight")), d, nh * hd, &attn);
            add(&mut o, g(&p("attn_output.bias")));
            add(x, &o);
            let h = rms(x, g(&p("post_attention_norm.weight")), cfg.rms_norm_eps);
            let out = experts(cfg, w, l, pos, &h);
            add(x, &out);
        }
    }
    xs.iter().map(|x| rms(x, g("output_norm.weight"), cfg.rms_norm_eps)).collect()
}

/// Layer `l`'s experts for the normed row `h` at position `pos`.
fn experts(cfg: &ModelConfig, w: &TinyWeights, l: usize, pos: usize, h: &[f32]) -> Vec<f32> {
    let g = |n: &str| &w[&format!("blk.{l}.{n}")].1;
    let Some(m) = cfg.moe else { return vec![0.0; h.len()] };
    let (d, e, ff, k) = (cfg.hidden_size, m.experts, m.expert_ff, m.top_k);
    let mut logits = matvec(g("ffn_gate_inp.weight"), e, d, h);
    add(&mut logits, g("ffn_gate_inp.bias"));
    let mut order: Vec<usize> = (0..e).collect();
    // Stable: equal logits keep the lower index first.
    order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
    if let Some(&out) = order.get(k) {
        record_margin(pos, l, logits[order[k - 1]] - logits[out]);
    }
    let picked = &order[..k];
    let max = picked.iter().map(|&i| f64::from(logits[i])).fold(f64::MIN, f64::max);
    let z: f64 = picked.iter().map(|&i| (f64::from(logits[i]) - max).exp()).sum();
    let mut out = vec![0f64; d];
    for &x in picked {
        let slice = |name: &str, rows: usize, cols: usize| g(name)[x * rows * cols..(x + 1) * rows * cols].to_vec();
        let mut gate = matvec(&slice("ffn_gate_exps.weight", ff, d), ff, d, h);
        let mut up = matvec(&slice("ffn_up_exps.weight", ff, d), ff, d, h);
        add(&mut gate, &slice("ffn_gate_exps.bias", 1, ff));
        add(&mut up, &slice("ffn_up_exps.bias", 1, ff));
        let act: Vec<f32> = gate
            .iter()
            .zip(&up)
            .map(|(&a, &b)| {
                let a = f64::from(a).min(LIMIT);
                let b = f64::from(b).clamp(-LIMIT, LIMIT);
                (a / (1.0 + (-ALPHA * a).exp()) * (b + 1.0)) as f32
            })
            .collect();
        let mut y = matvec(&slice("ffn_down_exps.weight", d, ff), d, ff, &act);
        add(&mut y, &slice("ffn_down_exps.bias", 1, d));
        let wt = (f64::from(logits[x]) - max).exp() / z;
        for (o, v) in out.iter_mut().zip(&y) {
            *o += wt * f64::from(*v);
        }
    }
    out.into_iter().map(|v| v as f32).collect()
}
