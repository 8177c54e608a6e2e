//! The mixture-of-experts block on the GPU ([`kiln_backend::Backend::moe`]).
//!
//! Decode steps (at most [`GEMV_MAX_ROWS`] rows) whose experts are all
//! quantized alike, with SwiGLU or gpt-oss's clamped form, stay on the
//! device (and in CUDA graphs): the router's logits (its bias added), the
//! top-k and weights (`moe_route`), the rows quantized once, one
//! expert-batched product for every pick's `[gate; up]` with its biases and
//! the gated unit fused (`gemvq_ids`: each pick reads its expert through a
//! table of base addresses), the gated rows quantized, and one launch for
//! the picks' down projections, their biases and their weighted sum into
//! the residual (`gemvq_moe_down`).
//!
//! Larger steps of such experts route on the device too: the router's
//! logits, `moe_route`, then `moe_sort` groups the
//! picks by expert (each expert's rows, the token of each gathered row, the
//! row of each pick, and the list of row tiles of the grouped products),
//! so a prompt chunk never waits for the host; the rows are normed and
//! gathered expert by expert in one kernel, every expert's `[gate; up]`
//! and down rows go through one grouped tensor-core launch each
//! (`mmq_ids`, tile by tile of the list; each expert's biases added to its
//! rows after each, `moe_bias_rows`), one gated unit over every gathered
//! row, and one kernel adds each row's weighted expert outputs into the
//! residual. (`--cuda moe-route=host` routes these steps on the host
//! instead, for A/B runs and checks: the same grouping, copied up.)
//!
//! Other models (16-bit or mixed experts) route on the host: the router's logits for every row on
//! the device, the routing on the host (one copy back per layer; such a
//! model runs without CUDA graphs), the rows normed and gathered expert by
//! expert, then each picked expert's products over its rows (its weights
//! read in place: the decode products up to 8 rows, the tensor-core
//! quantized products beyond, cuBLAS for 16-bit experts), the gated unit
//! and the weighted sum as above, each expert's biases added to its
//! products' rows.

use cudarc::driver::{CudaSlice, DeviceRepr, ValidAsZeroBits};
use kiln_backend::{BackendError, Glu, Moe};

use super::{CudaBackend, CudaBuffer, CudaStep, Graph, QActBufs};
use crate::gpu::{drv_err, GemvKind, Gpu, QAct, WRef, GEMV_MAX_ROWS};
use crate::matrix::CudaMatrix;
use crate::moe_plan::{self, tile_form, tiles_max, Grouping, TILE_ROWS};
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
    /// Each expert's first gathered row, and the end (`experts + 1`, u32).
    starts_dev: Option<CudaSlice<u32>>,
    /// Each pick's expert, for steps routed on the device (u32).
    ids: Option<CudaSlice<u32>>,
    /// The grouped products' tiles: their count, then expert << 16 | index.
    tiles: Option<CudaSlice<u32>>,
    host_logits: Vec<f32>,
    picks: Vec<(u32, f32)>,
    /// The host's routing: each pick's expert and weight, and their grouping.
    host_experts: Vec<u32>,
    host_weights: Vec<f32>,
    grouping: Grouping,
    /// The device path's buffers, allocated when the experts are placed
    /// (never while a graph is captured).
    decode: Option<DecodeBufs>,
}

/// Device addresses of a grouped expert block's buffers: the gathered
/// normed rows, `[gate | up]` outputs, gated units and down outputs, and the
/// grouping (each expert's first row, the tile list with its form and most
/// tiles, the token of each row, the row of each pick, the picks' weights).
struct GroupedBufs {
    hg: u64,
    gu: u64,
    act: u64,
    y: u64,
    starts: u64,
    tiles: (u64, usize, usize),
    order: u64,
    at: u64,
    weights: u64,
}

/// Buffers of the device-routed decode path, for [`GEMV_MAX_ROWS`] rows of
/// `experts` picks each, `width` the widest of the model dimension and the
/// experts' widths.
struct DecodeBufs {
    experts: usize,
    width: usize,
    /// Router logits, `GEMV_MAX_ROWS × experts` f32.
    logits: CudaSlice<f32>,
    /// Each pick's expert (u32) and weight (f32).
    ids: CudaSlice<u32>,
    weights: CudaSlice<f32>,
    /// The normed rows, quantized.
    qin: QActBufs,
    /// The picks' gated units (16-bit), and quantized.
    act: CudaSlice<u16>,
    qact: QActBufs,
}

impl DecodeBufs {
    fn new(gpu: &Gpu, experts: usize, width: usize) -> Result<Self> {
        let r = GEMV_MAX_ROWS * experts;
        let qbufs = |rows: usize| -> Result<QActBufs> {
            let w = rows * width;
            Ok(QActBufs { xq: gpu.alloc(w)?, xl: gpu.alloc(w)?, dx: gpu.alloc(w / 32)?, sx: gpu.alloc(w / 16)? })
        };
        Ok(Self {
            experts,
            width,
            logits: gpu.alloc(r)?,
            ids: gpu.alloc(r)?,
            weights: gpu.alloc(r)?,
            qin: qbufs(GEMV_MAX_ROWS)?,
            act: gpu.alloc(r * width)?,
            qact: qbufs(r)?,
        })
    }
}

impl MoeBufs {
    /// Makes the device path's buffers hold an experts matrix of `experts`
    /// experts of `rows × cols` each.
    pub(crate) fn reserve_decode(&mut self, gpu: &Gpu, experts: usize, cols: usize, rows: usize) -> Result<()> {
        let width = cols.max(rows);
        if self.decode.as_ref().is_some_and(|d| d.experts >= experts && d.width >= width) {
            return Ok(());
        }
        let (e, w) = self.decode.as_ref().map_or((experts, width), |d| (d.experts.max(experts), d.width.max(width)));
        self.decode = Some(DecodeBufs::new(gpu, e, w)?);
        Ok(())
    }
}

fn qact(g: &Gpu, b: &QActBufs) -> QAct {
    QAct { xq: g.addr(&b.xq), xl: g.addr(&b.xl), dx: g.addr(&b.dx), sx: g.addr(&b.sx) }
}

fn bad(what: String) -> CudaError {
    CudaError::Backend(BackendError::Batch(what))
}

fn grown<T: DeviceRepr + ValidAsZeroBits>(
    gpu: &Gpu,
    slot: &mut Option<CudaSlice<T>>,
    len: usize,
    graphs: &mut std::collections::HashMap<super::GraphKey, Graph>,
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
        let glu_fused = matches!(m.act, Glu::Swiglu | Glu::SwigluOai);
        if n <= GEMV_MAX_ROWS && glu_fused && k <= moe_plan::ROUTE_MAX_K {
            if let (Some(gp), Some(dp)) = (&gu_m.expert_ptrs, &down_m.expert_ptrs) {
                return self.moe_decode(n, x, m, (g.addr(gp), g.addr(dp)), ff);
            }
        }
        // (Placed experts are in a format whose kernels take their widths.)
        let grouped = match (&gu_m.expert_ptrs, &down_m.expert_ptrs) {
            (Some(gp), Some(dp)) => Some((g.addr(gp), g.addr(dp))),
            _ => None,
        };
        let on_device = grouped.is_some()
            && self.opts.moe_device_route
            && e <= moe_plan::SORT_MAX_EXPERTS
            && k <= moe_plan::ROUTE_MAX_K;
        if step.graph && !on_device {
            return Err(bad("a mixture-of-experts block routed on the host in a captured step".into()));
        }
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
        let sd = grown(&g, &mut b.starts_dev, e + 1, gs)?;
        let form = tile_form(rk, e, self.opts.moe_tile);
        let max_tiles = tiles_max(rk, e, TILE_ROWS[form]);
        let tiles = grown(&g, &mut b.tiles, max_tiles + 1, gs)?;
        let (xa, norm) = (x.addr(&g), g.addr(m.norm));
        let grouping = GroupedBufs { hg, gu, act, y, starts: sd, tiles: (tiles, form, max_tiles), order, at, weights };

        // Router logits of every row.
        let h = self.h()?;
        g.rms_norm(xa, 0, norm, h, 0, n, d, m.eps)?;
        self.expert_product(router.whole(&g), e, d, h, logits, n)?;
        if let Some(bias) = &router.bias {
            g.bias_add(logits, g.addr(bias), n, e)?;
        }
        if let (true, Some(ptrs)) = (on_device, grouped) {
            // Routed and grouped by expert here: no copy to the host.
            let ids = grown(&g, &mut self.moe.ids, rk, &mut self.graphs)?;
            let kiln_backend::Routing::SoftmaxTopK { renormalize } = m.routing;
            g.moe_route(logits, n, e, k, renormalize, ids, weights)?;
            g.moe_sort(ids, rk, k, e, TILE_ROWS[form], (sd, order, at, tiles))?;
            return self.grouped_experts(m, ptrs, xa, &grouping, n);
        }
        let b = &mut self.moe;
        b.host_logits.resize(n * e, 0.0);
        let src = b.logits.as_ref().ok_or_else(|| bad("router logits".into()))?.slice(..n * e);
        g.stream.memcpy_dtoh(&src, &mut b.host_logits[..]).map_err(drv_err)?;
        m.routing.pick(&b.host_logits, e, k, &mut b.picks);

        // Group the picks by expert (counting sort), as `moe_sort` does.
        b.host_experts.clear();
        b.host_experts.extend(b.picks.iter().map(|p| p.0));
        b.host_weights.clear();
        b.host_weights.extend(b.picks.iter().map(|p| p.1));
        b.grouping.group(&b.host_experts, k, e, TILE_ROWS[form]).map_err(bad)?;
        let hgr = &b.grouping;
        // The grouped products read each expert's rows and the tile list;
        // the per-expert products take the starts from the host.
        let tiles_up = if grouped.is_some() { hgr.tiles.len() } else { 0 };
        let starts_up = if grouped.is_some() { e + 1 } else { 0 };
        for (host, dev, len) in [
            (&hgr.order, &mut b.order, rk),
            (&hgr.at, &mut b.at, rk),
            (&hgr.starts, &mut b.starts_dev, starts_up),
            (&hgr.tiles, &mut b.tiles, tiles_up),
        ] {
            if len == 0 {
                continue;
            }
            let dev = dev.as_mut().ok_or_else(|| bad("routing buffers".into()))?;
            g.stream.memcpy_htod(&host[..len], &mut dev.slice_mut(..len)).map_err(drv_err)?;
        }
        let dev = b.weights.as_mut().ok_or_else(|| bad("routing weights".into()))?;
        g.stream.memcpy_htod(&b.host_weights[..], &mut dev.slice_mut(..rk)).map_err(drv_err)?;
        if let Some(ptrs) = grouped {
            return self.grouped_experts(m, ptrs, xa, &grouping, n);
        }
        // Taken out of the buffers while `self` is borrowed whole below, put
        // back at the end (an error leaves it empty: the next step resizes).
        let starts = std::mem::take(&mut b.grouping.starts);

        // The normed rows gathered by expert; each expert's products.
        g.rms_norm(xa, 0, norm, hg, order, rk, d, m.eps)?;
        for (i, sg) in gu_m.segs.iter().enumerate() {
            let (s, c) = (starts[i] as usize, (starts[i + 1] - starts[i]) as usize);
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
            let (s, c) = (starts[i] as usize, (starts[i + 1] - starts[i]) as usize);
            if c > 0 {
                let a = act + 2 * (s * ff) as u64;
                let ys = y + 4 * (s * d) as u64;
                self.expert_product(down_m.wref(&g, sg), d, ff, a, ys, c)?;
                if let Some(bias) = &down_m.bias {
                    g.bias_add(ys, g.addr(bias) + 4 * sg.row as u64, c, d)?;
                }
            }
        }
        self.moe.grouping.starts = starts;
        g.moe_combine(xa, y, at, weights, n, k, d)
    }

    /// Every expert's rows in one launch per projection (`mmq_ids`), the
    /// picks grouped by expert in `r` (on the device), then the weighted sum
    /// into the residual row `xa`.
    fn grouped_experts(&self, m: &Moe<'_, Self>, ptrs: (u64, u64), xa: u64, r: &GroupedBufs, n: usize) -> Result<()> {
        let g = &self.gpu;
        let (gu_m, down_m) = (m.gate_up, m.down);
        let (d, k, rk) = (m.router.cols, m.top_k, n * m.top_k);
        let ff = gu_m.segs.first().map_or(0, |s| s.rows / 2);
        let (gseg, dseg) = match (gu_m.segs.first(), down_m.segs.first()) {
            (Some(a), Some(b)) => (gu_m.wref(g, a), down_m.wref(g, b)),
            _ => return Err(bad("experts without segments".into())),
        };
        let (Some(gf), Some(df)) = (gseg.fmt, dseg.fmt) else {
            return Err(bad("16-bit experts in a grouped quantized product".into()));
        };
        let e = m.experts;
        g.rms_norm(xa, 0, g.addr(m.norm), r.hg, r.order, rk, d, m.eps)?;
        g.mmq_ids(gf, gseg.superblocks, ptrs.0, r.starts, r.tiles, r.hg, r.gu, 2 * ff, d)?;
        if let Some(b) = &gu_m.bias {
            g.moe_bias_rows(r.gu, g.addr(b), r.starts, e, rk, 2 * ff)?;
        }
        g.glu(m.act, r.gu, r.act, rk, ff)?;
        g.mmq_ids(df, dseg.superblocks, ptrs.1, r.starts, r.tiles, r.act, r.y, d, ff)?;
        if let Some(b) = &down_m.bias {
            g.moe_bias_rows(r.y, g.addr(b), r.starts, e, rk, d)?;
        }
        g.moe_combine(xa, r.y, r.at, r.weights, n, k, d)
    }

    /// The device-routed decode path (see the module documentation) for
    /// `n` rows; `ptrs`: the `[gate; up]` and down experts' address tables.
    fn moe_decode(
        &mut self,
        n: usize,
        x: &mut CudaBuffer,
        m: &Moe<'_, Self>,
        ptrs: (u64, u64),
        ff: usize,
    ) -> Result<()> {
        let g = self.gpu.clone();
        let (e, k, d) = (m.experts, m.top_k, m.router.cols);
        let rk = n * k;
        let b = self.moe.decode.as_ref().ok_or_else(|| bad("no mixture-of-experts decode buffers".into()))?;
        if b.experts < e || b.width < d.max(2 * ff) {
            return Err(bad("mixture-of-experts decode buffers smaller than the block".into()));
        }
        let (xa, norm) = (x.addr(&g), g.addr(m.norm));
        let (logits, ids, weights) = (g.addr(&b.logits), g.addr(&b.ids), g.addr(&b.weights));
        let (qin, qa, act) = (qact(&g, &b.qin), qact(&g, &b.qact), g.addr(&b.act));
        // The rows normed and quantized once: the router's and the experts' input.
        g.quant_act(xa, Some((norm, 0, m.eps)), n, d, &qin)?;
        let router = m.router.whole(&g);
        match router.fmt {
            Some(_) => g.gemvq(GemvKind::Store, router, &qin, 0, logits, e, d, e, n)?,
            None => g.gemv_norm(xa, norm, 0, router.addr, e, d, 0, logits, e, n, m.eps, self.h()?)?,
        }
        if let Some(bias) = &m.router.bias {
            g.bias_add(logits, g.addr(bias), n, e)?;
        }
        let kiln_backend::Routing::SoftmaxTopK { renormalize } = m.routing;
        g.moe_route(logits, n, e, k, renormalize, ids, weights)?;
        let (gu_m, down_m) = (m.gate_up, m.down);
        let (gseg, dseg) = match (gu_m.segs.first(), down_m.segs.first()) {
            (Some(a), Some(b)) => (gu_m.wref(&g, a), down_m.wref(&g, b)),
            _ => return Err(bad("experts without segments".into())),
        };
        let (gf, df) = match (gseg.fmt, dseg.fmt) {
            (Some(a), Some(b)) => (a, b),
            _ => return Err(bad("16-bit experts on the quantized decode path".into())),
        };
        let bias = |mat: &CudaMatrix| mat.bias.as_ref().map_or(0, |b| g.addr(b));
        g.gemvq_ids(gf, m.act, gseg.superblocks, (ptrs.0, bias(gu_m)), ids, k, &qin, act, ff, d, rk)?;
        g.quant_act(act, None, rk, ff, &qa)?;
        g.gemvq_moe_down(df, dseg.superblocks, (ptrs.1, bias(down_m)), (ids, weights, k), &qa, xa, d, ff, n)
    }
}
