//! LoRA adapters on the GPU, unmerged and batched: each adapter's factors
//! per matrix part in device memory (f16: `A` rank-major, `B`
//! output-major with the rank padded to 8), uploaded when
//! it is attached; each attached adapter holds a slot, and each matrix a
//! device table of descriptors by part and slot. A step with adapters
//! uploads one slot and scale per row, and every product with adapters
//! attached adds its deltas in one shrink and one expand launch over all
//! its parts and rows (kernels/lora.cu); in a decode step the shrink rides
//! in the launch of the activation quantizer or of the 16-bit product
//! ([`CudaLora::shrink_blocks`]), and a [gate | up] product's expand runs
//! SwiGLU too ([`CudaLora::expand_silu`]). The launches depend only on the
//! step's size and on which matrices have adapters, so decode steps keep
//! the fused products and replay from CUDA graphs (their key tells steps
//! with adapters from steps without); attaching or detaching one drops the
//! graphs, since it can change which matrices launch.

use std::collections::HashMap;

use cudarc::driver::CudaSlice;
use kiln_backend::{BackendError, ForwardBatch, LoraFactors};

use crate::gpu::{drv_err, Gpu, LoraShrink};
use crate::{CudaError, Result};

/// Highest rank the kernels take.
pub(crate) const MAX_RANK: usize = 512;

/// u64 words of one descriptor (kernels/lora.cu `LoraDesc`: `A`, `Bᵀ`,
/// rank and rows, column offset).
const DESC_WORDS: usize = 4;

/// Parts one matrix may have (QKV's three).
const MAX_PARTS: usize = 3;

/// Slots of a new table.
const MIN_SLOTS: usize = 8;

struct DevFactors {
    rank: usize,
    a: CudaSlice<u16>,
    /// `B`, output-major (`rows × rank` padded to 8).
    bt: CudaSlice<u16>,
}

/// One matrix's adapters and its device table.
struct Table {
    part_rows: Vec<usize>,
    /// Factors per part, by adapter.
    by_adapter: HashMap<u32, Vec<Option<DevFactors>>>,
    /// `part_rows.len()` × slots descriptors.
    dev: CudaSlice<u64>,
}

/// The step's rows and buffers, and every matrix's adapters.
#[derive(Default)]
pub(crate) struct CudaLora {
    next_key: u32,
    tables: HashMap<u32, Table>,
    /// The adapter holding each slot.
    slots: Vec<Option<u32>>,
    /// Descriptors per part in every table.
    cap: usize,
    /// The largest rank attached (the shrink's grid and `t`'s row stride).
    rank_cap: usize,
    /// The step has rows with adapters.
    active: bool,
    /// Slot and scale bits per row of the step.
    host_rows: Vec<u32>,
    rows: Option<CudaSlice<u32>>,
    /// Shrink results (parts × rows × `rank_cap`).
    t: Option<CudaSlice<f32>>,
}

/// A product's input, as the shrink reads it.
#[derive(Clone, Copy)]
pub(crate) enum LoraIn {
    /// 16-bit rows (normed already where the product norms).
    Half(u64),
    /// The f32 residual rows, RMS-normed on the way in (the fused decode
    /// products norm inside the product).
    Normed { x: u64, norm: u64, eps: f32 },
}

/// f32 values as f16 bits, with half's slice conversion (F16C where the
/// CPU has it).
fn to_f16(v: &[f32]) -> Vec<u16> {
    use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};
    let mut out = vec![0u16; v.len()];
    out.reinterpret_cast_mut::<half::f16>().convert_from_f32_slice(v);
    out
}

impl CudaLora {
    /// A new matrix's key.
    pub(crate) fn next_key(&mut self) -> u32 {
        self.next_key += 1;
        self.next_key
    }

    fn slot_of(&self, adapter: u32) -> Option<usize> {
        self.slots.iter().position(|&s| s == Some(adapter))
    }

    /// The descriptors of `table` for every slot.
    fn descriptors(gpu: &Gpu, slots: &[Option<u32>], cap: usize, table: &Table) -> Vec<u64> {
        let mut host = vec![0u64; table.part_rows.len() * cap * DESC_WORDS];
        let mut off = 0;
        for (p, &rows) in table.part_rows.iter().enumerate() {
            for (slot, adapter) in slots.iter().enumerate() {
                let Some(f) = adapter.and_then(|a| table.by_adapter.get(&a)).and_then(|parts| parts[p].as_ref()) else {
                    continue;
                };
                let at = (p * cap + slot) * DESC_WORDS;
                host[at] = gpu.addr(&f.a);
                host[at + 1] = gpu.addr(&f.bt);
                host[at + 2] = f.rank as u64 | ((rows as u64) << 32);
                host[at + 3] = off as u64;
            }
            off += rows;
        }
        host
    }

    /// Writes every table's descriptors (after a slot changed hands or the
    /// slots grew).
    fn upload_tables(&mut self, gpu: &Gpu, only: Option<u32>) -> Result<()> {
        for (key, table) in self.tables.iter_mut() {
            if only.is_some_and(|k| k != *key) {
                continue;
            }
            let host = Self::descriptors(gpu, &self.slots, self.cap, table);
            if table.dev.len() < host.len() {
                table.dev = gpu.alloc(host.len())?;
            }
            gpu.stream.memcpy_htod(&host, &mut table.dev).map_err(drv_err)?;
        }
        Ok(())
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
        if part_rows.len() > MAX_PARTS {
            return Err(CudaError::Unsupported(format!("LoRA on a matrix of {} parts", part_rows.len())));
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
            let a = to_f16(&f.a);
            // B output-major (as it comes), the rank padded to 8 (the
            // expand's 16-byte loads).
            let rp = f.rank.next_multiple_of(8);
            let bo = if rp == f.rank {
                to_f16(&f.b)
            } else {
                let mut bo = vec![0u16; rp * rows];
                for (dst, src) in bo.chunks_exact_mut(rp).zip(f.b.chunks_exact(f.rank)) {
                    for (d, &v) in dst.iter_mut().zip(src) {
                        *d = half::f16::from_f32(v).to_bits();
                    }
                }
                bo
            };
            out.push(Some(DevFactors { rank: f.rank, a: gpu.upload(&a)?, bt: gpu.upload(&bo)? }));
        }
        if !out.iter().any(Option::is_some) {
            if let Some(t) = self.tables.get_mut(&key) {
                t.by_adapter.remove(&adapter);
            }
            self.tables.retain(|_, t| !t.by_adapter.is_empty());
            return self.upload_tables(gpu, Some(key));
        }
        self.rank_cap = self.rank_cap.max(out.iter().flatten().map(|f| f.rank).max().unwrap_or(0));
        let grew = match self.slot_of(adapter) {
            Some(_) => false,
            None => {
                match self.slots.iter().position(Option::is_none) {
                    Some(s) => self.slots[s] = Some(adapter),
                    None => self.slots.push(Some(adapter)),
                }
                let cap = self.slots.len().next_power_of_two().max(MIN_SLOTS);
                let grew = cap > self.cap;
                self.cap = cap;
                grew
            }
        };
        if !self.tables.contains_key(&key) {
            let dev = gpu.alloc(part_rows.len() * self.cap * DESC_WORDS)?;
            self.tables.insert(key, Table { part_rows: part_rows.to_vec(), by_adapter: HashMap::new(), dev });
        }
        if let Some(t) = self.tables.get_mut(&key) {
            t.by_adapter.insert(adapter, out);
        }
        self.upload_tables(gpu, (!grew).then_some(key))
    }

    /// Frees `adapter`'s factors and its slot.
    pub(crate) fn detach(&mut self, gpu: &Gpu, adapter: u32) -> Result<()> {
        for t in self.tables.values_mut() {
            t.by_adapter.remove(&adapter);
        }
        self.tables.retain(|_, t| !t.by_adapter.is_empty());
        if let Some(s) = self.slot_of(adapter) {
            self.slots[s] = None;
        }
        self.upload_tables(gpu, None)
    }

    /// Bytes of `adapter`'s factors.
    pub(crate) fn bytes(&self, adapter: u32) -> usize {
        let f = self.tables.values().filter_map(|t| t.by_adapter.get(&adapter)).flatten().flatten();
        f.map(|f| 2 * (f.a.len() + f.bt.len())).sum()
    }

    /// Takes the step's rows (slot and scale each) and uploads them; sizes
    /// the buffers for `max_tokens` rows. True when a buffer moved (the
    /// caller drops its captured graphs).
    pub(crate) fn begin(&mut self, gpu: &Gpu, batch: &ForwardBatch, max_tokens: usize) -> Result<bool> {
        self.active = batch.has_lora();
        if !self.active {
            return Ok(false);
        }
        self.host_rows.clear();
        self.host_rows.resize(2 * batch.len(), u32::MAX);
        for s in &batch.seqs {
            let Some(u) = s.lora else { continue };
            let slot = self
                .slot_of(u.adapter)
                .ok_or_else(|| BackendError::Batch(format!("LoRA adapter {} is not attached", u.adapter)))?;
            for r in s.start..s.start + s.len {
                self.host_rows[2 * r] = slot as u32;
                self.host_rows[2 * r + 1] = u.scale.to_bits();
            }
        }
        let mut moved = false;
        let rows_len = 2 * max_tokens.max(batch.len());
        if self.rows.as_ref().is_none_or(|b| b.len() < rows_len) {
            self.rows = Some(gpu.alloc(rows_len)?);
            moved = true;
        }
        let t_len = MAX_PARTS * max_tokens.max(batch.len()) * self.rank_cap.max(1);
        if self.t.as_ref().is_none_or(|b| b.len() < t_len) {
            self.t = Some(gpu.alloc(t_len)?);
            moved = true;
        }
        if let Some(rows) = self.rows.as_mut() {
            gpu.stream.memcpy_htod(&self.host_rows, rows).map_err(drv_err)?;
        }
        Ok(moved)
    }

    /// Whether the step adds deltas to matrix `key`: it has rows with
    /// adapters and the matrix has any attached (the launches then run for
    /// every such step, so a captured graph fits any mix of adapters).
    pub(crate) fn touches(&self, key: u32) -> bool {
        self.active && self.tables.contains_key(&key)
    }

    /// Device addresses of matrix `key`'s descriptor table, the step's rows
    /// and the shrink's results, with the table; `None` when the step adds
    /// no deltas to the matrix.
    fn step_bufs(&self, gpu: &Gpu, key: u32) -> Option<(&Table, u64, u64, u64)> {
        if !self.touches(key) {
            return None;
        }
        let (table, rows, t) = (self.tables.get(&key)?, self.rows.as_ref()?, self.t.as_ref()?);
        Some((table, gpu.addr(&table.dev), gpu.addr(rows), gpu.addr(t)))
    }

    /// The shrink of matrix `key` for a decode product's launch to run in
    /// extra blocks (the activation quantizer's, or a 16-bit product's);
    /// `None` when the step adds no deltas to the matrix. [`Self::expand`]
    /// follows the product.
    pub(crate) fn shrink_blocks(&self, gpu: &Gpu, key: u32, n: usize) -> Option<LoraShrink> {
        let (table, desc, rows, t) = self.step_bufs(gpu, key)?;
        let i = |v: usize| i32::try_from(v).ok();
        Some(LoraShrink {
            desc,
            rows,
            t,
            slots: i(self.cap)?,
            parts: i(table.part_rows.len())?,
            tr: i(self.rank_cap)?,
            n: i(n)?,
            first: 0,
            pad: 0,
        })
    }

    /// The shrink of matrix `key` in its own launch, for the step's `n`
    /// rows of input `x` (`cols` wide); [`Self::expand`] follows.
    pub(crate) fn shrink(&self, gpu: &Gpu, key: u32, x: LoraIn, cols: usize, n: usize) -> Result<()> {
        let Some((table, desc, rows, t)) = self.step_bufs(gpu, key) else { return Ok(()) };
        let input = match x {
            LoraIn::Half(x) => (x, 0, 0, 0.0),
            LoraIn::Normed { x, norm, eps } => (0, x, norm, eps),
        };
        let parts = table.part_rows.len();
        gpu.lora_shrink(input, (desc, self.cap, rows, t), (n, self.rank_cap, parts), cols, self.rank_cap)
    }

    /// Adds the deltas of matrix `key` into `y` (f32 rows of `ystride`,
    /// part `p` at its column offset) from the step's shrink.
    pub(crate) fn expand(&self, gpu: &Gpu, key: u32, y: u64, ystride: usize, n: usize) -> Result<()> {
        let Some((table, desc, rows, t)) = self.step_bufs(gpu, key) else { return Ok(()) };
        let out = table.part_rows.iter().copied().max().unwrap_or(0);
        let parts = table.part_rows.len();
        gpu.lora_expand(t, (desc, self.cap, rows), y, (n, out, parts), self.rank_cap, ystride)
    }

    /// Whether [`Self::expand_silu`] takes matrix `key`: two parts of `ff`
    /// rows each (gate, up).
    pub(crate) fn gate_up_parts(&self, key: u32, ff: usize) -> bool {
        self.tables.get(&key).is_some_and(|t| t.part_rows == [ff, ff])
    }

    /// The expand of a [gate | up] matrix `key` of two `ff`-row parts and
    /// SwiGLU in one launch: `out = silu(gate + Δ) · (up + Δ)` from the
    /// products in `gu` (rows of `2·ff`); see [`Self::gate_up_parts`].
    pub(crate) fn expand_silu(&self, gpu: &Gpu, key: u32, gu: u64, out: u64, ff: usize, n: usize) -> Result<()> {
        let Some((_, desc, rows, t)) = self.step_bufs(gpu, key) else {
            return Err(CudaError::Unsupported("the fused LoRA SwiGLU without adapters".into()));
        };
        gpu.lora_expand_silu(t, (desc, self.cap, rows), (gu, out), (n, ff), self.rank_cap)
    }

    /// Adds the step's deltas of matrix `key` into `y` (f32 rows of
    /// `ystride`, part `p` at its column offset) for the step's `n` rows
    /// of input `x` (`cols` wide): a shrink, then the expand.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn apply(
        &self,
        gpu: &Gpu,
        key: u32,
        x: LoraIn,
        cols: usize,
        y: u64,
        ystride: usize,
        n: usize,
    ) -> Result<()> {
        self.shrink(gpu, key, x, cols, n)?;
        self.expand(gpu, key, y, ystride, n)
    }
}
