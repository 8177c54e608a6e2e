//! LoRA adapters on the GPU, unmerged: each matrix's factors by adapter in
//! device memory (`A` and `Bᵀ` in f32), uploaded when an adapter is
//! attached, and the step's rows grouped by adapter (kernels/lora.cu: a
//! shrink and an expand launch per group and part). A step with adapters
//! runs the products' unfused form, where each output is in hand before
//! RoPE, the activation or the residual add, and is never captured in a
//! CUDA graph (its launches depend on the groups).

use std::collections::HashMap;

use cudarc::driver::CudaSlice;
use kiln_backend::{BackendError, ForwardBatch, LoraFactors, LoraGroup};

use crate::gpu::{drv_err, Gpu};
use crate::{CudaError, Result};

/// Highest rank the kernels take.
pub(crate) const MAX_RANK: usize = 512;

struct DevFactors {
    rank: usize,
    rows: usize,
    a: CudaSlice<f32>,
    bt: CudaSlice<f32>,
}

struct Attached {
    adapter: u32,
    parts: Vec<Option<DevFactors>>,
}

/// Every matrix's adapters and the step's groups of rows.
#[derive(Default)]
pub(crate) struct CudaLora {
    next_key: u32,
    tables: HashMap<u32, Vec<Attached>>,
    groups: Vec<LoraGroup>,
    /// Per group: where its rows start in `rows`, and how many.
    spans: Vec<(usize, usize)>,
    host_rows: Vec<u32>,
    rows: Option<CudaSlice<u32>>,
    /// Shrink results of one group (rows × rank).
    t: Option<CudaSlice<f32>>,
}

impl CudaLora {
    /// A new matrix's key.
    pub(crate) fn next_key(&mut self) -> u32 {
        self.next_key += 1;
        self.next_key
    }

    /// Uploads `adapter`'s factors of the matrix `key` (parts of `part_rows`
    /// rows of `cols`).
    pub(crate) fn attach(
        &mut self,
        gpu: &Gpu,
        key: u32,
        (part_rows, cols): (&[usize], usize),
        adapter: u32,
        parts: &[Option<&LoraFactors>],
    ) -> Result<()> {
        if parts.len() != part_rows.len() {
            return Err(
                BackendError::Weight(format!("LoRA factors for {} of {} parts", parts.len(), part_rows.len())).into()
            );
        }
        let mut out = Vec::with_capacity(parts.len());
        for (f, &rows) in parts.iter().zip(part_rows) {
            let Some(f) = f else {
                out.push(None);
                continue;
            };
            f.check(rows, cols)?;
            if f.rank > MAX_RANK {
                return Err(CudaError::Unsupported(format!("LoRA rank {} (at most {MAX_RANK})", f.rank)));
            }
            let mut bt = vec![0f32; f.rank * rows];
            for o in 0..rows {
                for r in 0..f.rank {
                    bt[r * rows + o] = f.b[o * f.rank + r];
                }
            }
            out.push(Some(DevFactors { rank: f.rank, rows, a: gpu.upload(&f.a)?, bt: gpu.upload(&bt)? }));
        }
        let list = self.tables.entry(key).or_default();
        list.retain(|a| a.adapter != adapter);
        if out.iter().any(Option::is_some) {
            list.push(Attached { adapter, parts: out });
        }
        Ok(())
    }

    /// Frees `adapter`'s factors.
    pub(crate) fn detach(&mut self, adapter: u32) {
        for list in self.tables.values_mut() {
            list.retain(|a| a.adapter != adapter);
        }
        self.tables.retain(|_, l| !l.is_empty());
    }

    /// Bytes of `adapter`'s factors.
    pub(crate) fn bytes(&self, adapter: u32) -> usize {
        let f = self.tables.values().flatten().filter(|a| a.adapter == adapter).flat_map(|a| a.parts.iter().flatten());
        f.map(|f| 4 * (f.a.len() + f.bt.len())).sum()
    }

    /// Takes the step's groups and uploads their rows.
    pub(crate) fn begin(&mut self, gpu: &Gpu, batch: &ForwardBatch) -> Result<()> {
        self.groups.clear();
        self.spans.clear();
        if !batch.has_lora() {
            return Ok(());
        }
        kiln_backend::lora_groups(batch, &mut self.groups);
        self.host_rows.clear();
        let mut most = 0;
        for g in &self.groups {
            if !self.tables.values().flatten().any(|a| a.adapter == g.adapter) {
                return Err(BackendError::Batch(format!("LoRA adapter {} is not attached", g.adapter)).into());
            }
            let start = self.host_rows.len();
            for &(s, n) in &g.runs {
                self.host_rows.extend((s..s + n).map(|r| r as u32));
            }
            self.spans.push((start, self.host_rows.len() - start));
            most = most.max(self.host_rows.len() - start);
        }
        if self.rows.as_ref().is_none_or(|b| b.len() < self.host_rows.len()) {
            self.rows = Some(gpu.alloc(self.host_rows.len().next_power_of_two())?);
        }
        if let Some(rows) = self.rows.as_mut() {
            gpu.stream.memcpy_htod(&self.host_rows, rows).map_err(drv_err)?;
        }
        let rank = self.tables.values().flatten().flat_map(|a| a.parts.iter().flatten()).map(|f| f.rank).max();
        let need = most * rank.unwrap_or(1);
        if self.t.as_ref().is_none_or(|b| b.len() < need) {
            self.t = Some(gpu.alloc(need.next_power_of_two())?);
        }
        Ok(())
    }

    /// Whether the step has rows whose adapter has factors on matrix `key`.
    pub(crate) fn touches(&self, key: u32) -> bool {
        !self.groups.is_empty()
            && self
                .tables
                .get(&key)
                .is_some_and(|l| self.groups.iter().any(|g| l.iter().any(|a| a.adapter == g.adapter)))
    }

    /// Adds the step's deltas of matrix `key`: `x` is the product's 16-bit
    /// input (rows of `cols`), `y` its f32 output (rows of `ystride`),
    /// part `p` at column `offsets[p]`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn apply(
        &self,
        gpu: &Gpu,
        key: u32,
        x: u64,
        cols: usize,
        y: u64,
        ystride: usize,
        offsets: &[usize],
    ) -> Result<()> {
        if !self.touches(key) {
            return Ok(());
        }
        let (Some(list), Some(rows), Some(t)) = (self.tables.get(&key), &self.rows, &self.t) else { return Ok(()) };
        let (rows, t) = (gpu.addr(rows), gpu.addr(t));
        for (g, &(start, n)) in self.groups.iter().zip(&self.spans) {
            let Some(att) = list.iter().find(|a| a.adapter == g.adapter) else { continue };
            let rows = rows + 4 * start as u64;
            for (f, &off) in att.parts.iter().zip(offsets) {
                let Some(f) = f else { continue };
                gpu.lora_shrink(x, gpu.addr(&f.a), t, rows, n, cols, f.rank)?;
                gpu.lora_expand(t, gpu.addr(&f.bt), y, rows, (n, f.rank, f.rows), (ystride, off), g.scale)?;
            }
        }
        Ok(())
    }
}

/// Column offsets of a matrix's parts in its output rows.
pub(crate) fn part_offsets(part_rows: &[usize]) -> Vec<usize> {
    let mut at = 0;
    part_rows
        .iter()
        .map(|r| {
            let o = at;
            at += r;
            o
        })
        .collect()
}
