//! The mixture-of-experts block on the GPU ([`kiln_backend::Backend::moe`]),
//! a first version: the router's logits for every row on the device, the
//! routing on the host (one copy back per layer, so a model with experts
//! runs without CUDA graphs), the rows normed and gathered expert by expert
//! in one kernel, then each picked expert's products over its rows (its
//! weights read in place: the decode products up to 8 rows, the
//! tensor-core quantized products beyond, cuBLAS for 16-bit experts), one
//! gated unit over every gathered row, and one kernel that adds each row's
//! weighted expert outputs into the residual. gpt-oss's form adds the
//! router's bias to its logits and each expert's biases to its products'
//! rows, and gates with the clamped SwiGLU.

use cudarc::driver::{CudaSlice, DeviceRepr, ValidAsZeroBits};
use kiln_backend::{BackendError, Glu, Moe};

use super::{CudaBackend, CudaBuffer, CudaStep, Graph};
use crate::gpu::{drv_err, GemvKind, Gpu, WRef, GEMV_MAX_ROWS};
use crate::matrix::CudaMatrix;
use crate::{CudaError, Result};

/// Device buffers of the block (grown to the largest step seen) and the
/// host side of its routing.
#[derive(Default)]
pub(crate) struct MoeBufs {
    /// Router logits, `n × experts` f32.
    logits: Option<CudaSlice<f32>>,
    /// Normed rows gathered expert by expert, `n·k × d` 16-bit.
    hg: Option<CudaSlice<u16>>,
    /// `[gate | up]` outputs, `n·k × 2ff` f32.
    gu: Option<CudaSlice<f32>>,
    /// The gated unit, `n·k × ff` 16-bit.
    act: Option<CudaSlice<u16>>,
    /// Down outputs, `n·k × d` f32.
    y: Option<CudaSlice<f32>>,
    /// Token of each gathered row, and gathered row of each pick (u32).
    order: Option<CudaSlice<u32>>,
    at: Option<CudaSlice<u32>>,
    /// Weight of each pick (f32).
    weights: Option<CudaSlice<f32>>,
    host_logits: Vec<f32>,
    picks: Vec<(u32, f32)>,
    starts: Vec<usize>,
    host_order: Vec<u32>,
    host_at: Vec<u32>,
    host_weights: Vec<f32>,
}

fn bad(what: String) -> CudaError {
    CudaError::Backend(BackendError::Batch(what))
}

fn grown<T: DeviceRepr + ValidAsZeroBits>(
    gpu: &Gpu,
    slot: &mut Option<CudaSlice<T>>,
    len: usize,
    graphs: &mut std::collections::HashMap<(usize, usize, usize), Graph>,
) -> Result<u64> {
    CudaBackend::reserve(gpu, slot, len, graphs)?;
    slot.as_ref().map(|b| gpu.addr(b)).ok_or_else(|| bad("a mixture-of-experts buffer".into()))
}

impl CudaBackend {
    /// `y` (`c` rows of `rows` f32) `= a` (`c` rows of `cols`, 16-bit) `· Wᵀ`
    /// for one expert's segment `w`.
    fn expert_product(&self, w: WRef, rows: usize, cols: usize, a: u64, y: u64, c: usize) -> Result<()> {
        let g = &self.gpu;
        if w.fmt.is_none() {
            return g.gemm(a, w.addr, rows, cols, y, c, false);
        }
        if c > GEMV_MAX_ROWS && g.has_quant() {
            return g.mmq(w, a, y, rows, cols, c, rows, false);
        }
        let qa = self.qa().ok_or_else(|| bad("quantized experts without decode buffers".into()))?;
        for c0 in (0..c).step_by(GEMV_MAX_ROWS) {
            let k = GEMV_MAX_ROWS.min(c - c0);
            g.quant_act(a + 2 * (c0 * cols) as u64, None, k, cols, &qa)?;
            g.gemvq(GemvKind::Store, w, &qa, 0, y + 4 * (c0 * rows) as u64, rows, cols, rows, k)?;
        }
        Ok(())
    }

    /// [`kiln_backend::Backend::moe`] (see the module documentation).
    pub(super) fn moe_inner(&mut self, step: &CudaStep, x: &mut CudaBuffer, m: &Moe<'_, Self>) -> Result<()> {
        let g = self.gpu.clone();
        let (n, e, k) = (step.l.n, m.experts, m.top_k);
        let (gu_m, down_m, router): (&CudaMatrix, &CudaMatrix, &CudaMatrix) = (m.gate_up, m.down, m.router);
        let d = router.cols;
        let ff = gu_m.segs.first().map_or(0, |s| s.rows / 2);
        if k == 0 || k > e || gu_m.segs.len() != e || down_m.segs.len() != e || router.rows != e {
            return Err(bad(format!("a mixture of {e} experts, top {k}, over mismatched expert matrices")));
        }
        if gu_m.cols != d || down_m.cols != ff || down_m.segs.first().map_or(0, |s| s.rows) != d {
            return Err(bad("a mixture-of-experts expert of the wrong shape".into()));
        }
        if m.act == Glu::GeluTanh {
            return Err(CudaError::Unsupported(format!("{:?} experts", m.act)));
        }
        x.input_of(d, "a mixture-of-experts block")?;
        let rk = n * k;
        let b = &mut self.moe;
        let gs = &mut self.graphs;
        let logits = grown(&g, &mut b.logits, n * e, gs)?;
        let hg = grown(&g, &mut b.hg, rk * d, gs)?;
        let gu = grown(&g, &mut b.gu, rk * 2 * ff, gs)?;
        let act = grown(&g, &mut b.act, rk * ff, gs)?;
        let y = grown(&g, &mut b.y, rk * d, gs)?;
        let order = grown(&g, &mut b.order, rk, gs)?;
        let at = grown(&g, &mut b.at, rk, gs)?;
        let weights = grown(&g, &mut b.weights, rk, gs)?;
        let (xa, norm) = (x.addr(&g), g.addr(m.norm));

        // Router logits of every row, to the host, routed there.
        let h = self.h()?;
        g.rms_norm(xa, 0, norm, h, 0, n, d, m.eps)?;
        self.expert_product(router.whole(&g), e, d, h, logits, n)?;
        if let Some(bias) = &router.bias {
            g.bias_add(logits, g.addr(bias), n, e)?;
        }
        let b = &mut self.moe;
        b.host_logits.resize(n * e, 0.0);
        let src = b.logits.as_ref().ok_or_else(|| bad("router logits".into()))?.slice(..n * e);
        g.stream.memcpy_dtoh(&src, &mut b.host_logits[..]).map_err(drv_err)?;
        m.routing.pick(&b.host_logits, e, k, &mut b.picks);

        // Group the picks by expert (counting sort).
        b.starts.clear();
        b.starts.resize(e + 1, 0);
        for &(ex, _) in &b.picks {
            b.starts[ex as usize + 1] += 1;
        }
        for i in 0..e {
            b.starts[i + 1] += b.starts[i];
        }
        let mut next = b.starts.clone();
        b.host_order.resize(rk, 0);
        b.host_at.resize(rk, 0);
        b.host_weights.clear();
        for (slot, &(ex, w)) in b.picks.iter().enumerate() {
            let row = next[ex as usize];
            next[ex as usize] += 1;
            b.host_order[row] = (slot / k) as u32;
            b.host_at[slot] = row as u32;
            b.host_weights.push(w);
        }
        for (host, dev) in [(&b.host_order, &mut b.order), (&b.host_at, &mut b.at)] {
            let dev = dev.as_mut().ok_or_else(|| bad("routing buffers".into()))?;
            g.stream.memcpy_htod(&host[..], &mut dev.slice_mut(..rk)).map_err(drv_err)?;
        }
        let dev = b.weights.as_mut().ok_or_else(|| bad("routing weights".into()))?;
        g.stream.memcpy_htod(&b.host_weights[..], &mut dev.slice_mut(..rk)).map_err(drv_err)?;
        let starts = b.starts.clone();

        // The normed rows gathered by expert; each expert's products.
        g.rms_norm(xa, 0, norm, hg, order, rk, d, m.eps)?;
        for (i, sg) in gu_m.segs.iter().enumerate() {
            let (s, c) = (starts[i], starts[i + 1] - starts[i]);
            if c > 0 {
                let a = hg + 2 * (s * d) as u64;
                let y = gu + 4 * (s * 2 * ff) as u64;
                self.expert_product(gu_m.wref(&g, sg), 2 * ff, d, a, y, c)?;
                if let Some(bias) = &gu_m.bias {
                    g.bias_add(y, g.addr(bias) + 4 * sg.row as u64, c, 2 * ff)?;
                }
            }
        }
        g.glu(m.act, gu, act, rk, ff)?;
        for (i, sg) in down_m.segs.iter().enumerate() {
            let (s, c) = (starts[i], starts[i + 1] - starts[i]);
            if c > 0 {
                let a = act + 2 * (s * ff) as u64;
                let ys = y + 4 * (s * d) as u64;
                self.expert_product(down_m.wref(&g, sg), d, ff, a, ys, c)?;
                if let Some(bias) = &down_m.bias {
                    g.bias_add(ys, g.addr(bias) + 4 * sg.row as u64, c, d)?;
                }
            }
        }
        g.moe_combine(xa, y, at, weights, n, k, d)
    }
}
