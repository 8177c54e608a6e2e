//! The [`Backend`] operations of [`CudaBackend`]: each in its fused
//! decode form (at most [`GEMV_MAX_ROWS`] rows) or its prompt form, and
//! the step's begin, run (CUDA graph capture and replay) and finish.

use cudarc::driver::CudaSlice;
use kiln_backend::{
    Act, AttnIn, AttnMask, AttnShape, Backend, BackendError, BufferKind, Draw, Feature, ForwardBatch, Glu, KvMemory,
    KvSpec, LayerNorm, LoraFactors, MatrixDesc, Result as BResult, RopeDesc, RopeStyle,
};

use super::lora::LoraIn;
use super::{too_small, AttnGrid, CudaBackend, CudaBuffer, CudaRope, CudaStep, Data, Graph, QActBufs, HEAD_ROWS};
use crate::gpu::{drv_err, AttnArgs, AttnMode, GemvKind, RopeArgs, WRef, GEMV_MAX_ROWS};
use crate::matrix::CudaMatrix;
use crate::{plan, CudaError, CudaKv, Result};

fn f32_of<'a>(b: &'a CudaBuffer, what: &str) -> Result<&'a CudaSlice<f32>> {
    match &b.data {
        Data::F32(s) => Ok(s),
        Data::Half(_) => Err(too_small(what)),
    }
}

impl Backend for CudaBackend {
    type Matrix = CudaMatrix;
    type Vector = CudaSlice<f32>;
    type Rope = CudaRope;
    type Buffer = CudaBuffer;
    type Kv = CudaKv;
    type Step = CudaStep;

    fn name(&self) -> String {
        format!("cuda:{}", self.opts.ordinal)
    }
    fn samples_on_device(&self) -> bool {
        true
    }
    fn supports(&self, f: Feature) -> bool {
        Self::supports_feature(f)
    }
    fn lora_attach(&mut self, m: &CudaMatrix, adapter: u32, parts: &[Option<&LoraFactors>]) -> BResult<()> {
        // Graphs hold the launches of the matrices that had adapters.
        self.graphs.clear();
        Ok(self.lora.attach(&self.gpu, m.lora_key, (&m.part_rows, m.cols), adapter, parts)?)
    }
    fn lora_detach(&mut self, adapter: u32) -> BResult<()> {
        self.graphs.clear();
        Ok(self.lora.detach(&self.gpu, adapter)?)
    }
    fn lora_bytes(&self, adapter: u32) -> usize {
        self.lora.bytes(adapter)
    }

    fn matrix(&mut self, desc: MatrixDesc) -> BResult<CudaMatrix> {
        let (linear, desc_usage) = (desc.usage == kiln_backend::MatrixUse::Linear, desc.usage);
        let mut m = CudaMatrix::load(&self.gpu, desc, self.quant, self.opts.ragged_quant)?;
        m.lora_key = self.lora.next_key();
        if let kiln_backend::MatrixUse::Experts { .. } = desc_usage {
            match m.uniform_experts(&self.gpu).filter(|_| self.gpu.has_quant()) {
                // Decode steps route on the device (backend/moe.rs): graphs stay.
                Some(ptrs) => {
                    let e = ptrs.len();
                    m.expert_ptrs = Some(self.gpu.upload(&ptrs)?);
                    let seg_rows = m.segs.first().map_or(0, |s| s.rows);
                    self.moe.reserve_decode(&self.gpu, e, m.cols, seg_rows)?;
                }
                // Every step routes on the host: no graphs.
                None => {
                    self.use_graphs = false;
                    self.graphs.clear();
                }
            }
            if m.has_quant() {
                let w = GEMV_MAX_ROWS * m.cols;
                if self.qact.as_ref().is_none_or(|q| q.xq.len() < w) {
                    let g = &self.gpu;
                    self.qact =
                        Some(QActBufs { xq: g.alloc(w)?, xl: g.alloc(w)?, dx: g.alloc(w / 32)?, sx: g.alloc(w / 16)? });
                }
            }
            return Ok(m);
        }
        let t = self.max_tokens;
        if m.has_quant() {
            let w = GEMV_MAX_ROWS * m.cols;
            if self.qact.as_ref().is_none_or(|q| q.xq.len() < w) {
                self.graphs.clear();
                let g = &self.gpu;
                self.qact =
                    Some(QActBufs { xq: g.alloc(w)?, xl: g.alloc(w)?, dx: g.alloc(w / 32)?, sx: g.alloc(w / 16)? });
            }
        }
        Self::reserve(&self.gpu, &mut self.scratch, m.scratch_len(), &mut self.graphs)?;
        let lookup_only = desc_usage == kiln_backend::MatrixUse::Embedding { tied_head: false };
        if !lookup_only && (m.rows == 2 * m.segs.first().map_or(0, |s| s.rows) || m.segs.len() == 1 || linear) {
            // A gated unit's GEMM form writes [gate | up] rows; a projection
            // normed before its residual add writes its rows there too.
            Self::reserve(&self.gpu, &mut self.gu, t * m.rows, &mut self.graphs)?;
        }
        Ok(m)
    }
    fn matrix_bytes(&self, m: &CudaMatrix) -> usize {
        m.bytes()
    }
    fn vector(&mut self, v: &[f32]) -> BResult<CudaSlice<f32>> {
        Ok(self.gpu.upload(v)?)
    }
    fn rope(&mut self, d: &RopeDesc) -> BResult<CudaRope> {
        let table = kiln_kernels::ops::Rope::from_desc(d);
        let (cos, sin) = table.tables();
        Ok(CudaRope {
            cos: self.gpu.upload(cos)?,
            sin: self.gpu.upload(sin)?,
            neox: d.style == RopeStyle::Neox,
            unscale: if d.attn_factor != 0.0 { 1.0 / d.attn_factor } else { 1.0 },
        })
    }
    fn kv_shift(
        &mut self,
        kv: &mut CudaKv,
        layer: usize,
        rope: &CudaRope,
        copies: &[kiln_backend::KvShift],
    ) -> BResult<()> {
        if copies.is_empty() {
            return Ok(());
        }
        if kv.in_window(layer) {
            return Err(BackendError::Batch(format!("KV copies in layer {layer}, which keeps only its window")));
        }
        if kv.is_quantized() {
            // Quantized keys cannot be rotated in place (the engine refuses
            // context shift and the segment cache with such a cache).
            return Err(BackendError::Unsupported {
                device: "CUDA",
                what: format!("re-rotated KV copies in a {} KV cache (they need f16)", kv.format_name()),
            });
        }
        let slots = (kv.num_blocks() * kv.block_size) as u32;
        if copies.iter().any(|c| c.src >= slots || c.dst >= slots) {
            return Err(BackendError::Batch("a KV copy names a slot outside the cache".into()));
        }
        let l =
            kv.layers.get(layer).ok_or_else(|| BackendError::Batch(format!("the KV cache has no layer {layer}")))?;
        // The shift as its two's-complement bits (the kernel reads it signed).
        let flat: Vec<u32> = copies.iter().flat_map(|c| [c.src, c.dst, c.shift as u32]).collect();
        let g = &self.gpu;
        // Freed in stream order, after the kernel that reads it.
        let dev = g.upload(&flat)?;
        let (hd, nkv) = (kv.head_dim, kv.kv_heads);
        g.kv_shift(&crate::gpu::KvShiftArgs {
            k: g.addr(&l.k),
            v: g.addr(&l.v),
            copies: g.addr(&dev),
            n: copies.len(),
            cos: g.addr(&rope.cos),
            sin: g.addr(&rope.sin),
            nkv,
            hd,
            neox: rope.neox,
            bs: kv.block_size,
            unscale: rope.unscale,
        })?;
        Ok(())
    }
    fn buffer(&mut self, kind: BufferKind, cols: usize) -> BResult<CudaBuffer> {
        if let BufferKind::Qkv(s) = kind {
            if !self.encoder {
                self.attention_grid(&s)?;
            }
        }
        let (g, t) = (&self.gpu, self.max_tokens);
        let data = match kind {
            BufferKind::Residual => {
                Self::reserve(g, &mut self.h, t.max(HEAD_ROWS) * cols, &mut self.graphs)?;
                Data::F32(g.alloc(t * cols)?)
            }
            BufferKind::Qkv(_) => Data::F32(g.alloc(t * cols)?),
            BufferKind::Hidden => Data::Half(g.alloc(t * cols)?),
            BufferKind::Logits => Data::F32(g.alloc(HEAD_ROWS * cols)?),
        };
        Ok(CudaBuffer { data, cols })
    }
    fn kv(&mut self, spec: &KvSpec) -> BResult<CudaKv> {
        self.max_ctx = spec.max_ctx;
        self.gpu.sync()?;
        Ok(CudaKv::new(self.gpu.clone(), spec, self.opts.reserve_bytes, self.opts.kv_companion_block_bytes)?)
    }

    fn begin(&mut self, batch: &ForwardBatch, kv: &CudaKv, draws: &[Option<Draw>]) -> BResult<CudaStep> {
        Ok(self.begin_inner(batch, kv, draws)?)
    }

    fn run(&mut self, step: &CudaStep, body: &mut dyn FnMut(&mut Self) -> BResult<()>) -> BResult<()> {
        if !step.graph {
            return body(self);
        }
        // A decode step: replay the graph captured for this size and
        // attention split (kernel arguments are fixed device addresses;
        // the step's data is in the metadata buffer just copied).
        let key = (step.l.n, step.l.nsplit, step.l.split_len, step.lora);
        if !self.graphs.contains_key(&key) {
            let mode = cudarc::driver::sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
            self.gpu.stream.begin_capture(mode).map_err(drv_err).map_err(BackendError::from)?;
            let r = body(self);
            let captured =
                self.gpu.stream.end_capture(cudarc::driver::sys::CUgraphInstantiate_flags(0)).map_err(drv_err);
            r?;
            let g = captured?.ok_or_else(|| CudaError::Driver("graph capture recorded nothing".into()))?;
            self.graphs.insert(key, Graph(g));
        }
        if let Some(g) = self.graphs.get(&key) {
            g.0.launch().map_err(drv_err)?;
        }
        Ok(())
    }

    fn finish(
        &mut self,
        step: &CudaStep,
        logits_buf: &mut CudaBuffer,
        tokens: &mut Vec<u32>,
        logits: &mut Vec<f32>,
    ) -> BResult<()> {
        let (m, vocab) = (step.l.m, logits_buf.cols);
        if m == 0 {
            tokens.clear();
            logits.clear();
            return Ok(self.gpu.sync()?);
        }
        if m <= HEAD_ROWS {
            logits.resize(m * vocab, 0.0);
            self.copy_logits(step, f32_of(logits_buf, "logits")?, vocab, 0, m, logits)?;
        } else {
            std::mem::swap(logits, &mut self.host_logits);
        }
        tokens.clear();
        if step.on_device {
            tokens.resize(m, 0);
            let src = self.picks.slice(..m);
            self.gpu.stream.memcpy_dtoh(&src, &mut tokens[..]).map_err(drv_err)?;
        }
        Ok(self.gpu.sync()?)
    }

    fn embed(&mut self, step: &CudaStep, table: &CudaMatrix, scale: f32, x: &mut CudaBuffer) -> BResult<()> {
        let g = &self.gpu;
        x.input_of(table.cols, "an embedding")?;
        let at = g.addr(&self.meta) + 4 * step.l.tokens as u64;
        g.embed(table.whole(g), at, x.addr(g), step.l.n, table.cols)?;
        if scale != 1.0 {
            g.scale_rows(x.addr(g), scale, step.l.n, table.cols)?;
        }
        Ok(())
    }

    fn attn_in(
        &mut self,
        step: &CudaStep,
        x: &mut CudaBuffer,
        a: &AttnIn<'_, Self>,
        kv: &mut CudaKv,
        layer: usize,
        qkv: &mut CudaBuffer,
    ) -> BResult<()> {
        Ok(self.attn_in_inner(step, x, a, kv, layer, qkv)?)
    }

    fn attention(
        &mut self,
        step: &CudaStep,
        qkv: &CudaBuffer,
        kv: &CudaKv,
        layer: usize,
        s: &AttnShape,
        out: &mut CudaBuffer,
    ) -> BResult<()> {
        self.attend(step, qkv, kv, layer, s, 0, None, out)
    }

    fn attention_masked(
        &mut self,
        step: &CudaStep,
        qkv: &CudaBuffer,
        kv: &CudaKv,
        layer: usize,
        s: &AttnShape,
        mask: &AttnMask<'_, Self>,
        out: &mut CudaBuffer,
    ) -> BResult<()> {
        if let Some(sk) = mask.sinks.filter(|sk| sk.len() != s.num_heads) {
            return Err(BackendError::Batch(format!("{} attention sinks for {} heads", sk.len(), s.num_heads)));
        }
        match mask.window {
            Some(0) => Err(BackendError::Batch("a sliding window of 0 positions".into())),
            w => self.attend(step, qkv, kv, layer, s, w.unwrap_or(0), mask.sinks, out),
        }
    }

    fn linear_add(
        &mut self,
        step: &CudaStep,
        a: &CudaBuffer,
        w: &CudaMatrix,
        post_norm: Option<(&CudaSlice<f32>, f32)>,
        x: &mut CudaBuffer,
    ) -> BResult<()> {
        let g = &self.gpu;
        let (n, rows, cols) = (step.l.n, w.rows, w.cols);
        a.input_of(cols, "a projection")?;
        x.input_of(rows, "a residual add")?;
        let (a, x) = (a.addr(g), x.addr(g));
        if let Some((norm, eps)) = post_norm {
            // Gemma: the projection into its own rows, normed, then added.
            let y = self.gu.as_ref().map(|b| g.addr(b)).ok_or_else(|| too_small("projection output"))?;
            self.project(step, w, a, y)?;
            self.lora.apply(g, w.lora_key, LoraIn::Half(a), cols, y, rows, n)?;
            if let Some(b) = &w.bias {
                g.bias_add(y, g.addr(b), n, rows)?;
            }
            g.norm_add(x, y, g.addr(norm), n, rows, eps)?;
            return Ok(());
        }
        // A bias (gpt-oss's output projection) joins the residual too.
        let bias = w.bias.as_ref().map(|b| g.addr(b));
        if step.fused {
            let wr = w.whole(g);
            match (wr.fmt, self.qa()) {
                (Some(_), Some(qa)) => {
                    // The deltas' shrink rides in the quantizer's launch.
                    let lo = self.lora.shrink_blocks(g, w.lora_key, n);
                    g.quant_act_lora(a, None, n, cols, &qa, lo.unwrap_or_default())?;
                    g.gemvq(GemvKind::Add, wr, &qa, 0, x, rows, cols, rows, n)?;
                }
                _ => {
                    // Or in the 16-bit product's, except on the tensor cores.
                    let lo = self.lora.shrink_blocks(g, w.lora_key, n);
                    if !g.gemv_add(a, wr.addr, rows, cols, x, n, lo.unwrap_or_default())? {
                        self.lora.shrink(g, w.lora_key, LoraIn::Half(a), cols, n)?;
                    }
                }
            }
            self.lora.expand(g, w.lora_key, x, rows, n)?;
            if let Some(b) = bias {
                g.bias_add(x, b, n, rows)?;
            }
            return Ok(());
        }
        if !self.mmq(step, w, a, x, rows, true)?
            && !self.pass(step, w, GemvKind::Add, &[(w.whole(g), 0, 0, rows)], a, x, rows, 4)?
        {
            g.gemm(a, w.as_dense(g, self.scratch.as_ref())?, rows, cols, x, n, true)?;
        }
        // The deltas add into the residual like the product.
        self.lora.apply(g, w.lora_key, LoraIn::Half(a), cols, x, rows, n)?;
        if let Some(b) = bias {
            g.bias_add(x, b, n, rows)?;
        }
        Ok(())
    }

    fn norm_glu(
        &mut self,
        step: &CudaStep,
        x: &mut CudaBuffer,
        norm: &CudaSlice<f32>,
        eps: f32,
        gate_up: &CudaMatrix,
        act: Glu,
        out: &mut CudaBuffer,
    ) -> BResult<()> {
        let g = &self.gpu;
        let (n, d, ff) = (step.l.n, gate_up.cols, gate_up.rows / 2);
        let (xa, norm, outa) = (x.addr(g), g.addr(norm), out.addr(g));
        let lora = self.lora.touches(gate_up.lora_key);
        if act != Glu::Swiglu || lora {
            // Gemma's GeGLU, gpt-oss's clamped SwiGLU, and any step with
            // adapter deltas: norm, [gate | up] rows (plus the deltas),
            // then the gated unit.
            let gu = self.gu.as_ref().map(|b| g.addr(b)).ok_or_else(|| too_small("gate/up output"))?;
            if step.fused && lora {
                // The decode products norm on the way in; so does the shrink.
                self.store_normed(step, gate_up, xa, norm, eps, 0, gu, 2 * ff)?;
                if act == Glu::Swiglu && self.lora.gate_up_parts(gate_up.lora_key, ff) {
                    return Ok(self.lora.expand_silu(g, gate_up.lora_key, gu, outa, ff, n)?);
                }
                self.lora.expand(g, gate_up.lora_key, gu, 2 * ff, n)?;
            } else {
                let h = self.h()?;
                g.rms_norm(xa, 0, norm, h, 0, n, d, eps)?;
                self.project(step, gate_up, h, gu)?;
                self.lora.apply(g, gate_up.lora_key, LoraIn::Half(h), d, gu, 2 * ff, n)?;
            }
            g.glu(act, gu, outa, n, ff)?;
            return Ok(());
        }
        if step.fused {
            let w = gate_up.whole(g);
            match (w.fmt, self.qa()) {
                (Some(_), Some(qa)) => {
                    g.quant_act(xa, Some((norm, 0, eps)), n, d, &qa)?;
                    g.gemvq(GemvKind::Swiglu, w, &qa, 0, outa, ff, d, ff, n)?;
                }
                _ => g.gemv_swiglu(xa, norm, w.addr, ff, d, outa, n, eps, self.h()?)?,
            }
            return Ok(());
        }
        let h = self.h()?;
        g.rms_norm(xa, 0, norm, h, 0, n, d, eps)?;
        let gu = self.gu.as_ref().map(|b| g.addr(b)).ok_or_else(|| too_small("gate/up output"))?;
        if self.mmq(step, gate_up, h, gu, 2 * ff, false)? {
            g.silu_mul(gu, outa, n, ff)?;
        } else if !self.pass(step, gate_up, GemvKind::Swiglu, &[(gate_up.whole(g), 0, 0, ff)], h, outa, ff, 2)? {
            g.gemm(h, gate_up.as_dense(g, self.scratch.as_ref())?, 2 * ff, d, gu, n, false)?;
            g.silu_mul(gu, outa, n, ff)?;
        }
        Ok(())
    }

    fn head(
        &mut self,
        step: &CudaStep,
        x: &mut CudaBuffer,
        norm: &CudaSlice<f32>,
        eps: f32,
        w: &CudaMatrix,
        logits: &mut CudaBuffer,
    ) -> BResult<()> {
        let g = self.gpu.clone();
        let (m, vocab) = (step.l.m, w.rows);
        if m == 0 {
            // A step of prompt chunks that want no logits (cuBLAS refuses
            // a product of no rows).
            return Ok(());
        }
        let (xa, norm) = (x.addr(&g), g.addr(norm));
        let buf = f32_of(logits, "logits")?;
        let la = g.addr(buf);
        if m <= HEAD_ROWS {
            // Copied back by `finish` (a graph records no host copies).
            self.head_rows(step, xa, norm, eps, w, la, 0, m)?;
            if step.graph || step.on_device {
                self.sample_rows(step, la, vocab, 0, m)?;
            }
            return Ok(());
        }
        let mut host = std::mem::take(&mut self.host_logits);
        host.resize(m * vocab, 0.0);
        for c in (0..m).step_by(HEAD_ROWS) {
            let mc = HEAD_ROWS.min(m - c);
            self.head_rows(step, xa, norm, eps, w, la, c, mc)?;
            if step.on_device {
                self.sample_rows(step, la, vocab, c, mc)?;
            }
            self.copy_logits(step, buf, vocab, c, mc, &mut host)?;
        }
        self.host_logits = host;
        Ok(())
    }

    fn moe(&mut self, step: &CudaStep, x: &mut CudaBuffer, m: &kiln_backend::Moe<'_, Self>) -> BResult<()> {
        Ok(self.moe_inner(step, x, m)?)
    }

    fn begin_encoder(&mut self, batch: &ForwardBatch) -> BResult<CudaStep> {
        Ok(self.begin_encoder_inner(batch)?)
    }
    fn embed_sum(
        &mut self,
        step: &CudaStep,
        table: &CudaMatrix,
        positions: &CudaMatrix,
        norm: LayerNorm<'_, CudaSlice<f32>>,
        x: &mut CudaBuffer,
    ) -> BResult<()> {
        Ok(self.embed_sum_inner(step, table, positions, norm, x)?)
    }
    fn linear(
        &mut self,
        step: &CudaStep,
        a: &CudaBuffer,
        w: &CudaMatrix,
        act: Act,
        out: &mut CudaBuffer,
    ) -> BResult<()> {
        Ok(self.linear_inner(step, a, w, act, out)?)
    }
    fn attention_within(
        &mut self,
        step: &CudaStep,
        qkv: &mut CudaBuffer,
        rope: Option<&CudaRope>,
        shape: &AttnShape,
        out: &mut CudaBuffer,
    ) -> BResult<()> {
        Ok(self.attention_within_inner(step, qkv, rope, shape, out)?)
    }
    fn linear_add_norm(
        &mut self,
        step: &CudaStep,
        a: &CudaBuffer,
        w: &CudaMatrix,
        norm: LayerNorm<'_, CudaSlice<f32>>,
        x: &mut CudaBuffer,
    ) -> BResult<()> {
        Ok(self.linear_add_norm_inner(step, a, w, norm, x)?)
    }
    fn read_rows(&mut self, step: &CudaStep, x: &mut CudaBuffer, out: &mut Vec<f32>) -> BResult<()> {
        Ok(self.read_rows_inner(step, x, out)?)
    }
}

impl CudaBackend {
    /// Paged attention of a step's rows; `window` > 0: each query sees its
    /// last `window` positions only; `sinks`: one logit per query head in
    /// each softmax's denominator.
    #[allow(clippy::too_many_arguments)]
    fn attend(
        &mut self,
        step: &CudaStep,
        qkv: &CudaBuffer,
        kv: &CudaKv,
        layer: usize,
        s: &AttnShape,
        window: usize,
        sinks: Option<&CudaSlice<f32>>,
        out: &mut CudaBuffer,
    ) -> BResult<()> {
        let g = &self.gpu;
        let grid = self.attn.ok_or_else(|| too_small("attention before its buffer"))?;
        let lkv =
            kv.layers.get(layer).ok_or_else(|| BackendError::Batch(format!("the KV cache has no layer {layer}")))?;
        let (part_o, part_ml, counters, part_rows) = match (&self.part_o, &self.part_ml, &self.counters) {
            (Some(a), Some(b), Some(c)) => (g.addr(a), g.addr(b), g.addr(c), a.len() / s.head_dim.max(1)),
            _ => return Err(too_small("attention partials").into()),
        };
        let l = &step.l;
        // Tiles' key splits write one partial per (row, head, split).
        let room = if self.opts.tile_split { part_rows / (l.n * s.num_heads).max(1) } else { 1 };
        let (tile_split, tile_split_len) = plan::tile_split(l.n_tiles, s.num_heads, l.tile_keys, grid.sms, room);
        let meta = g.addr(&self.meta);
        let at = |off: usize| meta + 4 * off as u64;
        Ok(g.attention(&AttnArgs {
            qkv: qkv.addr(g),
            kc: g.addr(&lkv.k),
            vc: g.addr(&lkv.v),
            pos: at(l.positions),
            tab: at(if kv.in_window(layer) { l.wtab } else { l.tab }),
            tables: meta,
            split_rows: at(l.split_rows),
            n_split_rows: l.n_split_rows,
            tiles: at(l.tiles),
            n_tiles: l.n_tiles,
            part_o,
            part_ml,
            counters,
            out: out.addr(g),
            nh: s.num_heads,
            nkv: s.num_kv_heads,
            bs: kv.block_size,
            nsplit: l.nsplit,
            split_len: l.split_len,
            tile_split,
            tile_split_len,
            scale: s.scale,
            head_dim: s.head_dim,
            window,
            sinks: sinks.map_or(0, |sk| g.addr(sk)),
            mode: match grid.mode {
                _ if quant_per_head(kv) => AttnMode::Head,
                AttnMode::Cluster if !l.clustered => AttnMode::Group,
                m => m,
            },
            quant: kv.quant.as_ref(),
        })?)
    }

    /// Whether this backend implements `f` (any GPU).
    pub fn supports_feature(f: Feature) -> bool {
        match f {
            Feature::EmbedScale | Feature::PostNorm | Feature::GeluTanh | Feature::Encoder => true,
            Feature::Moe => true,
            Feature::Lora => true,
            Feature::KvShift => true,
            Feature::SlidingWindow | Feature::AttentionSinks | Feature::SwigluOai | Feature::ExpertBias => true,
        }
    }

    /// `y = a·Wᵀ` into f32 rows of `w.rows` (`a`: the step's 16-bit
    /// activations): quantized decode products where they run, else a GEMM
    /// (over a dense copy of quantized weights).
    pub(super) fn project(&self, step: &CudaStep, w: &CudaMatrix, a: u64, y: u64) -> Result<()> {
        let g = &self.gpu;
        let (n, rows, cols) = (step.l.n, w.rows, w.cols);
        if step.fused {
            if let (Some(_), Some(qa)) = (w.whole(g).fmt, self.qa()) {
                g.quant_act(a, None, n, cols, &qa)?;
                return g.gemvq(GemvKind::Store, w.whole(g), &qa, 0, y, rows, cols, rows, n);
            }
        } else if self.mmq(step, w, a, y, rows, false)?
            || self.pass(step, w, GemvKind::Store, &[(w.whole(g), 0, 0, rows)], a, y, rows, 4)?
        {
            return Ok(());
        }
        g.gemm(a, w.as_dense(g, self.scratch.as_ref())?, rows, cols, y, n, false)
    }

    /// Sets the split-K grid and sizes its partial results for attention
    /// layers of shape `s` (once per model).
    fn attention_grid(&mut self, s: &AttnShape) -> Result<()> {
        let (nh, nkv, hd) = (s.num_heads, s.num_kv_heads, s.head_dim);
        let sms = self.gpu.sms * self.opts.attention_fill.clamp(1, 8);
        let mode = if self.opts.attention_tiles {
            self.gpu.attn_mode(nh, nkv, hd, self.opts.attention)
        } else {
            AttnMode::Head
        };
        let heads = plan::attention_blocks(nh, nkv, mode != AttnMode::Head);
        let t = self.max_tokens;
        let part_rows = plan::partial_rows(nh, heads, sms, t, GEMV_MAX_ROWS);
        let g = &self.gpu;
        Self::reserve(g, &mut self.counters, t * nh, &mut self.graphs)?;
        Self::reserve(g, &mut self.part_o, part_rows * hd, &mut self.graphs)?;
        Self::reserve(g, &mut self.part_ml, part_rows * 2, &mut self.graphs)?;
        let cluster_max_keys = self.gpu.cluster_max_keys(hd, self.opts.attention);
        self.attn = Some(AttnGrid { mode, heads, query_heads: nh, sms, cluster_max_keys });
        Ok(())
    }

    fn begin_inner(&mut self, batch: &ForwardBatch, kv: &CudaKv, draws: &[Option<Draw>]) -> Result<CudaStep> {
        let bad = |m: String| Err(CudaError::Backend(BackendError::Batch(m)));
        if batch.len() > self.max_tokens {
            return bad(format!("{} tokens in one step; the GPU buffers hold {}", batch.len(), self.max_tokens));
        }
        if let Some(&b) = batch.seqs.iter().flat_map(|s| s.block_table.iter()).find(|&&b| b as usize >= kv.num_blocks())
        {
            return bad(format!("block {b} is outside the KV cache ({} blocks)", kv.num_blocks()));
        }
        kiln_backend::check_window_batch(batch, kv.window)?;
        let grid = self.attn.ok_or_else(|| too_small("a step before the model's buffers"))?;
        let tiles = self.gpu.has_tiles() && self.opts.attention_tiles;
        let mut l = plan::pack(batch, grid.heads, grid.sms, tiles, draws, &mut self.host_meta)?;
        // A quantized cache without a grouped kernel takes the per-head
        // one, with splits planned for a block per query head.
        let heads = if quant_per_head(kv) {
            l.split_for(grid.query_heads, grid.sms);
            grid.query_heads
        } else {
            grid.heads
        };
        // Graphs address the adapters' row table and shrink buffer.
        if self.lora.begin(&self.gpu, batch, self.max_tokens)? {
            self.graphs.clear();
        }
        let fused = self.fuse && l.n <= GEMV_MAX_ROWS;
        let graph = self.use_graphs && fused && l.is_graphable(GEMV_MAX_ROWS);
        let cluster = if kv.is_quantized() { None } else { self.cluster_step(grid, &l) };
        if let Some(kmax) = cluster {
            l.cluster_split(kmax, graph.then_some(self.max_ctx));
        } else if graph {
            l.bucket_split(heads, grid.sms, self.max_ctx);
        }
        if l.len > self.meta.len() {
            // Captured graphs address the old buffer.
            self.graphs.clear();
            self.meta = self.gpu.alloc(l.len.next_power_of_two())?;
        }
        self.gpu.stream.memcpy_htod(&self.host_meta, &mut self.meta).map_err(drv_err)?;
        let host_rows = draws.iter().map(Option::is_none).collect();
        Ok(CudaStep { l, fused, graph, on_device: !draws.is_empty(), host_rows, lora: batch.has_lora() })
    }

    fn attn_in_inner(
        &mut self,
        step: &CudaStep,
        x: &mut CudaBuffer,
        a: &AttnIn<'_, Self>,
        kv: &mut CudaKv,
        layer: usize,
        qkv_buf: &mut CudaBuffer,
    ) -> Result<()> {
        let g = &self.gpu;
        let s = a.shape;
        let (nh, nkv, hd) = (s.num_heads, s.num_kv_heads, s.head_dim);
        let mat = a.qkv;
        let (d, qkv_rows) = (mat.cols, mat.rows);
        let n = step.l.n;
        let (x, qkv) = (x.addr(g), qkv_buf.addr(g));
        let lkv =
            kv.layers.get(layer).ok_or_else(|| BackendError::Batch(format!("the KV cache has no layer {layer}")))?;
        let meta = g.addr(&self.meta);
        let at = |off: usize| meta + 4 * off as u64;
        let rope = RopeArgs {
            qkv,
            pos: at(step.l.positions),
            slots: at(if kv.in_window(layer) { step.l.wslots } else { step.l.slots }),
            cos: g.addr(&a.rope.cos),
            sin: g.addr(&a.rope.sin),
            qn: a.qk_norm.map_or(0, |(q, _)| g.addr(q)),
            kn: a.qk_norm.map_or(0, |(_, k)| g.addr(k)),
            kc: g.addr(&lkv.k),
            vc: g.addr(&lkv.v),
            n,
            nh,
            nkv,
            hd,
            neox: a.rope.neox,
            bs: kv.block_size,
            eps: a.eps,
            quant: kv.quant.as_ref(),
        };
        let bias_at = |row: usize| mat.bias.as_ref().map_or(0, |b| g.addr(b) + 4 * row as u64);
        let attn_norm = g.addr(a.norm);
        // RoPE and the KV write ride on the QKV product when it is one
        // 16-bit matrix, there are no Q/K norms (Qwen3's need the whole
        // head first) and the cache is 16-bit (quantizing needs 32 values).
        let lora = self.lora.touches(mat.lora_key);
        let rope_in_qkv = step.fused
            && !lora
            && rope.quant.is_none()
            && self.opts.fuse_rope
            && rope.qn == 0
            && rope.kn == 0
            && mat.segs.len() == 1
            && !mat.has_quant();
        if rope_in_qkv {
            let w = mat.whole(g);
            return g.gemv_rope(x, attn_norm, w.addr, qkv_rows, d, bias_at(0), n, &rope, self.h()?);
        }
        if step.fused {
            // One product per segment (format) of the fused QKV.
            self.store_normed(step, mat, x, attn_norm, a.eps, bias_at(0), qkv, qkv_rows)?;
            self.lora.expand(g, mat.lora_key, qkv, qkv_rows, n)?;
        } else {
            let h = self.h()?;
            g.rms_norm(x, 0, attn_norm, h, 0, n, d, a.eps)?;
            // One part per segment (format) of the fused QKV.
            let parts: Vec<(WRef, u64, usize, usize)> =
                mat.segs.iter().map(|sg| (mat.wref(g, sg), bias_at(sg.row), sg.row, sg.rows)).collect();
            // The passes add the bias themselves.
            let mmq = self.mmq(step, mat, h, qkv, qkv_rows, false)?;
            let passed = !mmq && self.pass(step, mat, GemvKind::Store, &parts, h, qkv, qkv_rows, 4)?;
            if !mmq && !passed {
                g.gemm(h, mat.as_dense(g, self.scratch.as_ref())?, qkv_rows, d, qkv, n, false)?;
            }
            if let (false, Some(bias)) = (passed, &mat.bias) {
                g.bias_add(qkv, g.addr(bias), n, qkv_rows)?;
            }
            self.lora.apply(g, mat.lora_key, LoraIn::Half(h), d, qkv, qkv_rows, n)?;
        }
        g.rope_store(&rope)
    }
}

/// Whether a step over `kv` takes the per-head decode attention because
/// its cache is quantized and its kernels have no grouped one (head
/// dimensions other than 64 and 128). Where they have, it is the faster at
/// every depth (H200, 8B shape, q8_0, decode tok/s grouped / per head: 128
/// keys 230.4 / 225.7, 2048 219.4 / 212.6, 32000 152.3 / 91.3;
/// docs/bench-data/cuda/kv-quant-stage/).
fn quant_per_head(kv: &CudaKv) -> bool {
    kv.quant.as_ref().is_some_and(|q| q.attn_group.is_none())
}
