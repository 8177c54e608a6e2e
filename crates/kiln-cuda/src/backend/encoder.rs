//! The encoder operations of [`CudaBackend`] (BERT and kin): a step's
//! metadata without KV (token ids, positions, and each row's sequence),
//! cuBLAS products over the 16-bit copy of the residual stream that
//! every LayerNorm writes, bias + activation, LayerNorm with the residual
//! add, and attention within each sequence.

use kiln_backend::{Act, AttnShape, ForwardBatch, LayerNorm};

use super::{too_small, CudaBackend, CudaBuffer, CudaRope, CudaStep, Data};
use crate::gpu::drv_err;
use crate::matrix::CudaMatrix;
use crate::plan::StepLayout;
use crate::{CudaError, Result};

impl CudaBackend {
    /// Uploads an encoder step's metadata: token ids, positions, and per
    /// row its sequence's first row and length (in the layout's `slots`
    /// and `tab` places, which an encoder step has no other use for).
    pub(super) fn begin_encoder_inner(&mut self, batch: &ForwardBatch) -> Result<CudaStep> {
        let n = batch.len();
        if n > self.max_tokens {
            return Err(CudaError::Backend(kiln_backend::BackendError::Batch(format!(
                "{n} tokens in one step; the GPU buffers hold {}",
                self.max_tokens
            ))));
        }
        let buf = &mut self.host_meta;
        buf.clear();
        buf.extend_from_slice(&batch.tokens);
        buf.extend_from_slice(&batch.positions);
        buf.resize(4 * n, 0);
        let mut max_len = 0;
        for s in &batch.seqs {
            for r in s.start..(s.start + s.len).min(n) {
                buf[2 * n + r] = s.start as u32;
                buf[3 * n + r] = s.len as u32;
            }
            max_len = max_len.max(s.len);
        }
        if buf.len() > self.meta.len() {
            self.graphs.clear();
            self.meta = self.gpu.alloc(buf.len().next_power_of_two())?;
        }
        self.gpu.stream.memcpy_htod(&self.host_meta, &mut self.meta).map_err(drv_err)?;
        let l = StepLayout {
            n,
            tokens: 0,
            positions: n,
            slots: 2 * n,
            wslots: 2 * n,
            tab: 3 * n,
            wtab: 3 * n,
            logit_rows: 4 * n,
            m: 0,
            sample: 4 * n,
            split_rows: 4 * n,
            n_split_rows: 0,
            tiles: 4 * n,
            n_tiles: 0,
            len: 4 * n,
            nsplit: 1,
            split_len: max_len,
            clustered: false,
            max_keys: max_len,
            tile_keys: 0,
        };
        Ok(CudaStep { l, fused: false, graph: false, on_device: false, host_rows: Vec::new(), lora: false })
    }

    fn gu(&self) -> Result<u64> {
        self.gu.as_ref().map(|b| self.gpu.addr(b)).ok_or_else(|| too_small("product output"))
    }

    /// The 16-bit input of a product: a hidden buffer as it is, or for the
    /// residual stream its copy that the last LayerNorm wrote.
    fn input16(&self, a: &CudaBuffer) -> Result<u64> {
        match &a.data {
            Data::Half(b) => Ok(self.gpu.addr(b)),
            Data::F32(_) => self.h(),
        }
    }

    pub(super) fn embed_sum_inner(
        &mut self,
        step: &CudaStep,
        table: &CudaMatrix,
        positions: &CudaMatrix,
        norm: LayerNorm<'_, cudarc::driver::CudaSlice<f32>>,
        x: &mut CudaBuffer,
    ) -> Result<()> {
        let g = &self.gpu;
        let (n, d) = (step.l.n, table.cols);
        x.input_of(d, "an embedding")?;
        kiln_backend::check_width(positions.cols, d, "a position table")?;
        let meta = g.addr(&self.meta);
        let y = self.gu()?;
        g.embed(table.whole(g), meta, x.addr(g), n, d)?;
        g.embed(positions.whole(g), meta + 4 * step.l.positions as u64, y, n, d)?;
        g.add_ln(x.addr(g), y, 0, g.addr(norm.weight), g.addr(norm.bias), self.h()?, n, d, norm.eps)
    }

    pub(super) fn linear_inner(
        &mut self,
        step: &CudaStep,
        a: &CudaBuffer,
        w: &CudaMatrix,
        act: Act,
        out: &mut CudaBuffer,
    ) -> Result<()> {
        let g = &self.gpu;
        let (n, rows, cols) = (step.l.n, w.rows, w.cols);
        a.input_of(cols, "a projection")?;
        let input = self.input16(a)?;
        let bias = w.bias.as_ref().map_or(0, |b| g.addr(b));
        match (act, &out.data) {
            (Act::None, Data::F32(o)) => {
                // Q, K and V (f32 rows for the attention), with their bias.
                kiln_backend::check_width(out.cols, rows, "a product's output")?;
                let y = g.addr(o);
                self.project(step, w, input, y)?;
                if bias != 0 {
                    g.bias_add(y, bias, n, rows)?;
                }
                Ok(())
            }
            (Act::Swiglu, Data::Half(o)) => {
                let gu = self.gu()?;
                self.project(step, w, input, gu)?;
                g.silu_mul(gu, g.addr(o), n, rows / 2)
            }
            (Act::None | Act::GeluErf | Act::GeluTanh, Data::Half(o)) => {
                let gu = self.gu()?;
                self.project(step, w, input, gu)?;
                let code = match act {
                    Act::GeluErf => 1,
                    Act::GeluTanh => 2,
                    _ => 0,
                };
                g.bias_act(gu, bias, g.addr(o), n, rows, code)
            }
            _ => Err(too_small("a product's output of the wrong kind")),
        }
    }

    pub(super) fn attention_within_inner(
        &mut self,
        step: &CudaStep,
        qkv: &mut CudaBuffer,
        rope: Option<&CudaRope>,
        s: &AttnShape,
        out: &mut CudaBuffer,
    ) -> Result<()> {
        let g = &self.gpu;
        let meta = g.addr(&self.meta);
        let at = |off: usize| meta + 4 * off as u64;
        let l = &step.l;
        let rope = rope.map(|r| (at(l.positions), g.addr(&r.cos), g.addr(&r.sin), r.neox));
        g.attn_within(
            qkv.addr(g),
            (at(l.slots), at(l.tab)),
            rope,
            out.addr(g),
            l.n,
            (s.num_heads, s.num_kv_heads, s.head_dim),
            s.scale,
            l.max_keys,
        )
    }

    pub(super) fn linear_add_norm_inner(
        &mut self,
        step: &CudaStep,
        a: &CudaBuffer,
        w: &CudaMatrix,
        norm: LayerNorm<'_, cudarc::driver::CudaSlice<f32>>,
        x: &mut CudaBuffer,
    ) -> Result<()> {
        let (n, rows, cols) = (step.l.n, w.rows, w.cols);
        a.input_of(cols, "a projection")?;
        x.input_of(rows, "a residual add")?;
        let input = self.input16(a)?;
        let y = self.gu()?;
        self.project(step, w, input, y)?;
        let g = &self.gpu;
        let bias = w.bias.as_ref().map_or(0, |b| g.addr(b));
        g.add_ln(x.addr(g), y, bias, g.addr(norm.weight), g.addr(norm.bias), self.h()?, n, rows, norm.eps)
    }

    pub(super) fn read_rows_inner(&mut self, step: &CudaStep, x: &mut CudaBuffer, out: &mut Vec<f32>) -> Result<()> {
        let Data::F32(b) = &x.data else { return Err(too_small("reading a 16-bit buffer")) };
        let len = step.l.n * x.cols;
        out.resize(len, 0.0);
        let src = b.slice(..len);
        self.gpu.stream.memcpy_dtoh(&src, &mut out[..]).map_err(drv_err)?;
        self.gpu.sync()
    }
}
