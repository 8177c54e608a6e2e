//! The mixture-of-experts block in the float64 reference forward
//! ([`super::reference_forward`]), written from the model cards: the
//! router's softmax over every expert, the `top_k` largest (ties to the
//! lower index), renormalized to sum to 1 when the family does, and the
//! weighted sum of those experts' SwiGLU units.

use std::cell::RefCell;

use super::{matvec, reference_hidden, TinyWeights};
use crate::config::{ModelConfig, MoeConfig};

/// While recording: the last layer's index, and per position the smallest
/// routing margin of the earlier layers and of the last one.
type Recording = Option<(usize, Vec<(f32, f32)>)>;

thread_local! {
    static MARGINS: RefCell<Recording> = const { RefCell::new(None) };
}

/// Per position of `tokens`, the smallest gap (in router logits) between
/// the last expert the reference picks and the first it leaves out: over
/// the layers before the last, and in the last layer (infinite for a dense
/// model). Another engine's rounding may route a position whose gap is
/// within its error differently: in the last layer that changes only the
/// position's own output; in an earlier one also every later position's
/// (attention carries it).
pub fn reference_routing_margins(cfg: &ModelConfig, w: &TinyWeights, tokens: &[u32]) -> Vec<(f32, f32)> {
    let last = cfg.num_layers.saturating_sub(1);
    MARGINS.with(|m| *m.borrow_mut() = Some((last, vec![(f32::INFINITY, f32::INFINITY); tokens.len()])));
    reference_hidden(cfg, w, tokens);
    MARGINS.with(|m| m.borrow_mut().take()).map(|(_, v)| v).unwrap_or_default()
}

/// Records position `pos`'s routing margin in layer `layer` while
/// [`reference_routing_margins`] runs.
pub(super) fn record_margin(pos: usize, layer: usize, margin: f32) {
    MARGINS.with(|m| {
        if let Some((last, v)) = m.borrow_mut().as_mut() {
            if let Some(p) = v.get_mut(pos) {
                if layer == *last {
                    p.1 = p.1.min(margin);
                } else {
                    p.0 = p.0.min(margin);
                }
            }
        }
    });
}

/// Whether `name` is a router (written as f32 whatever the model's type).
pub(crate) fn is_router(name: &str) -> bool {
    name.ends_with("ffn_gate_inp.weight")
}

/// Layer `l`'s mixture-of-experts output for the normed row `h` (`d` wide)
/// at position `pos`.
pub(crate) fn reference_moe(m: &MoeConfig, d: usize, w: &TinyWeights, l: usize, pos: usize, h: &[f32]) -> Vec<f32> {
    let g = |n: &str| &w[&format!("blk.{l}.{n}")].1;
    let (e, ff) = (m.experts, m.expert_ff);
    let logits = matvec(g("ffn_gate_inp.weight"), e, d, h);
    let max = logits.iter().map(|&v| f64::from(v)).fold(f64::MIN, f64::max);
    let z: f64 = logits.iter().map(|&v| (f64::from(v) - max).exp()).sum();
    let probs: Vec<f64> = logits.iter().map(|&v| (f64::from(v) - max).exp() / z).collect();
    let mut order: Vec<usize> = (0..e).collect();
    // Stable: equal probabilities keep the lower index first.
    order.sort_by(|&a, &b| probs[b].total_cmp(&probs[a]));
    let picked = &order[..m.top_k];
    if let Some(&out) = order.get(m.top_k) {
        record_margin(pos, l, logits[picked[m.top_k - 1]] - logits[out]);
    }
    let sum: f64 = if m.norm_topk { picked.iter().map(|&i| probs[i]).sum() } else { 1.0 };
    let mut out = vec![0f64; d];
    for &x in picked {
        let expert = |name: &str, rows: usize, cols: usize| {
            let all = g(name);
            all[x * rows * cols..(x + 1) * rows * cols].to_vec()
        };
        let gate = matvec(&expert("ffn_gate_exps.weight", ff, d), ff, d, h);
        let up = matvec(&expert("ffn_up_exps.weight", ff, d), ff, d, h);
        let act: Vec<f32> = gate
            .iter()
            .zip(&up)
            .map(|(&a, &b)| {
                let a = f64::from(a);
                (a / (1.0 + (-a).exp()) * f64::from(b)) as f32
            })
            .collect();
        let y = matvec(&expert("ffn_down_exps.weight", d, ff), d, ff, &act);
        let wt = probs[x] / sum;
        for (o, v) in out.iter_mut().zip(&y) {
            *o += wt * f64::from(*v);
        }
    }
    out.into_iter().map(|v| v as f32).collect()
}
