//! The mixture-of-experts block on the CPU ([`kiln_backend::Backend::moe`]),
//! tokens grouped by expert: the router's logits for every row, each row's
//! top-k experts and weights, the rows gathered expert by expert, then one
//! grouped product for every picked expert's gate and up and one for their
//! down projections (`matmul_grouped`: one dispatch each, the quantized
//! weights read in place or as packed at load), and the weighted outputs
//! summed back per row. A decode step is the same with one row: its k
//! experts' matrix-vector products share one dispatch.

use kiln_backend::{BackendError, Moe, Result};

use super::{grow, CpuBackend, CpuBuffer, CpuMatrix, CpuStep};
use crate::matmul::{matmul_grouped, Group};

/// Scratch of the block, reused step to step (buffers only grow).
#[derive(Debug, Default)]
pub(crate) struct MoeScratch {
    /// Router logits, `n × experts`.
    logits: Vec<f32>,
    /// Each row's picks: `(expert, weight)`, `n × top_k`.
    picks: Vec<(u32, f32)>,
    /// Start of each expert's rows in the gathered order (`experts + 1`).
    starts: Vec<usize>,
    /// Gathered position of pick `t · top_k + j`.
    at: Vec<usize>,
    /// Normed rows gathered expert by expert, `n·k × d`.
    xg: Vec<f32>,
    /// Gate (then the gated unit) and up outputs, `n·k × ff`.
    gate: Vec<f32>,
    up: Vec<f32>,
    /// Down outputs, `n·k × d`.
    y: Vec<f32>,
}

/// Adds part `part`'s expert biases (if the matrix has them) to the
/// gathered rows of `out` (`cols` wide): expert `i`'s rows are
/// `starts[i]..starts[i + 1]`.
fn add_expert_bias(m: &CpuMatrix, part: usize, starts: &[usize], out: &mut [f32], cols: usize) {
    for (i, w) in starts.windows(2).enumerate() {
        if let Some(b) = m.expert_bias(part, i).filter(|b| b.len() == cols) {
            for row in out[w[0] * cols..w[1] * cols].chunks_exact_mut(cols) {
                crate::ops::add_inplace(row, b);
            }
        }
    }
}

fn bad(what: String) -> BackendError {
    BackendError::Batch(what)
}

impl CpuBackend {
    /// [`kiln_backend::Backend::moe`] (see the module documentation).
    pub(super) fn moe_block(&mut self, step: &CpuStep, x: &mut CpuBuffer, m: &Moe<'_, Self>) -> Result<()> {
        let (n, e, k) = (step.n, m.experts, m.top_k);
        let (gu, down): (&CpuMatrix, &CpuMatrix) = (m.gate_up, m.down);
        let ff = gu.expert(0, 0).map_or(0, |w| w.rows);
        let d = m.norm.len();
        if k == 0 || k > e || gu.experts() != e || down.experts() != e || gu.n_parts() != 2 * e {
            return Err(bad(format!("a mixture of {e} experts, top {k}, over mismatched expert matrices")));
        }
        let down_rows = down.expert(0, 0).map_or(0, |w| w.rows);
        if m.router.part_rows(0) != e || m.router.cols() != d || gu.cols() != d || down.cols() != ff || down_rows != d {
            return Err(bad("a mixture-of-experts router or expert of the wrong shape".into()));
        }
        x.input_of(d, "a mixture-of-experts block")?;
        Self::norm_into(&self.pool, x, m.norm, m.eps, n, &mut self.h);
        let s = &mut self.moe;
        let h = &self.h[..n * d];
        let logits = grow(&mut s.logits, n * e);
        m.router.forward(&self.pool, h, n, &mut [&mut *logits])?;
        m.routing.pick(logits, e, k, &mut s.picks);

        // Group the picks by expert: counting sort of pick slots.
        s.starts.clear();
        s.starts.resize(e + 1, 0);
        for &(ex, _) in &s.picks {
            s.starts[ex as usize + 1] += 1;
        }
        for i in 0..e {
            s.starts[i + 1] += s.starts[i];
        }
        s.at.clear();
        s.at.resize(n * k, 0);
        let mut next = s.starts.clone();
        let xg = grow(&mut s.xg, n * k * d);
        for (slot, &(ex, _)) in s.picks.iter().enumerate() {
            let at = next[ex as usize];
            next[ex as usize] += 1;
            s.at[slot] = at;
            let t = slot / k;
            xg[at * d..(at + 1) * d].copy_from_slice(&h[t * d..(t + 1) * d]);
        }

        // Gate and up of every picked expert over its rows, in one dispatch.
        let rows = |i: usize| s.starts[i]..s.starts[i + 1];
        let mut groups = Vec::with_capacity(2 * e);
        for i in (0..e).filter(|&i| !rows(i).is_empty()) {
            for part in 0..2 {
                let w = gu.expert(part, i).ok_or_else(|| bad(format!("expert {i} is missing")))?;
                groups.push(Group { w, rows: rows(i), out: part });
            }
        }
        let rk = n * k;
        let gate = grow(&mut s.gate, rk * ff);
        let up = grow(&mut s.up, rk * ff);
        matmul_grouped(&self.pool, &groups, xg, d, &mut [&mut *gate, &mut *up]).map_err(super::matrix::kernel_err)?;
        add_expert_bias(gu, 0, &s.starts, gate, ff);
        add_expert_bias(gu, 1, &s.starts, up, ff);
        super::glu(&self.pool, m.act, gate, up, rk);

        // Their down projections, in one dispatch.
        groups.clear();
        for i in (0..e).filter(|&i| !rows(i).is_empty()) {
            let w = down.expert(0, i).ok_or_else(|| bad(format!("expert {i} is missing")))?;
            groups.push(Group { w, rows: rows(i), out: 0 });
        }
        let y = grow(&mut s.y, rk * d);
        matmul_grouped(&self.pool, &groups, gate, ff, &mut [&mut *y]).map_err(super::matrix::kernel_err)?;
        add_expert_bias(down, 0, &s.starts, y, d);

        // Each row's weighted sum, pending in the residual like a projection.
        let out = grow(&mut x.pending, n * d);
        for (t, o) in out.chunks_exact_mut(d).enumerate() {
            o.fill(0.0);
            for j in 0..k {
                let (at, w) = (s.at[t * k + j], s.picks[t * k + j].1);
                for (a, b) in o.iter_mut().zip(&y[at * d..(at + 1) * d]) {
                    *a += w * b;
                }
            }
        }
        x.pending_len = n * d;
        x.has_pending = true;
        Ok(())
    }
}
