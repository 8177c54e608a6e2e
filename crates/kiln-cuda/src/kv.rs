//! The KV memory on a GPU: one K and one V pool per layer in device
//! memory, `[block][kv head][slot][head_dim]` in the model's 16-bit type
//! or quantized (q8_0, q4_0; the layout in [`crate::kv_layout`]), K and V
//! each in their own type, and the host tier in page-locked memory.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, PinnedHostSlice};
use kiln_backend::{BackendError, KvMemory, KvSpec, KvType, Result as BResult, WindowKv};

use crate::gpu::{drv_err, Gpu};
use crate::kv_layout::{pool_block_bytes, TierRun};
use crate::kv_quant::KvQuantKernels;
use crate::{CudaError, Result};

/// Most bytes the tier's staging buffer takes.
const TIER_STAGE_BYTES: usize = 64 << 20;
/// Most blocks one staged copy holds.
const TIER_STAGE_BLOCKS: usize = 64;

/// One layer's K and V pools (16-bit words; a quantized pool's bytes as
/// such).
pub(crate) struct LayerKv {
    pub(crate) k: CudaSlice<u16>,
    pub(crate) v: CudaSlice<u16>,
}

/// The host KV tier of a GPU: `num_slots` block slots in page-locked host
/// memory, so that copies are DMA both ways with no CPU copy in between. A
/// run of blocks is gathered from every layer's pools into `stage` by one
/// kernel and each block goes to its slot with one asynchronous copy (and
/// the reverse), instead of one copy per layer and block through pageable
/// memory.
struct TierStage {
    /// Addresses of every layer's K pool, then every layer's V pool.
    pools: CudaSlice<u64>,
    /// Block ids of the current copy.
    ids: CudaSlice<u32>,
    /// `capacity` slots of [`TierRun::bytes`].
    stage: CudaSlice<u16>,
    capacity: usize,
    /// `num_slots` slots of [`TierRun::bytes`].
    slots: PinnedHostSlice<u16>,
    num_slots: usize,
}

/// The KV memory of a model on a GPU.
pub struct CudaKv {
    gpu: Arc<Gpu>,
    pub(crate) layers: Vec<LayerKv>,
    pub(crate) block_size: usize,
    /// Key/value heads.
    pub(crate) kv_heads: usize,
    /// Values per head.
    pub(crate) head_dim: usize,
    num_blocks: usize,
    /// One block over every layer, K and V, as the tier copies it.
    run: TierRun,
    /// How K and V are stored.
    types: (KvType, KvType),
    /// The sliding-window layers' pool (`KvSpec::window`).
    pub(crate) window: Option<WindowKv>,
    /// The kernels that read and write a quantized cache (`None`: f16).
    pub(crate) quant: Option<KvQuantKernels>,
    tier: Option<TierStage>,
}

impl Drop for CudaKv {
    /// Waits for the stream first: the tier's copies to and from host
    /// memory are asynchronous, and that memory is freed with the pools.
    fn drop(&mut self) {
        let _ = self.gpu.sync();
    }
}

impl CudaKv {
    /// Allocates the tier's staging first, then the pools from what device
    /// memory is left less `reserve` bytes (at most `spec.num_blocks`),
    /// leaving `companion` bytes per block for a second pool of as many
    /// blocks (a draft model's).
    pub(crate) fn new(gpu: Arc<Gpu>, spec: &KvSpec, reserve: usize, companion: usize) -> Result<Self> {
        spec.check_types()?;
        let quant = match spec.is_f16() {
            true => None,
            false => Some(KvQuantKernels::load(&gpu, spec.type_k, spec.type_v, spec.head_dim)?),
        };
        let bs = spec.block_size.max(1);
        let pool = |ty| pool_block_bytes(ty, spec.kv_heads, bs, spec.head_dim);
        // The tier (and each block of `num_blocks`) covers the layers
        // outside the window pool.
        let run = TierRun { k_bytes: pool(spec.type_k), v_bytes: pool(spec.type_v), layers: spec.full_layers() };
        if quant.is_some() && !run.copyable() {
            // The kernels load a row's quants 8 bytes at a time, and the
            // grouped decode kernel copies them 16 at a time (cp.async),
            // from each pool block's start.
            return Err(CudaError::Unsupported(format!(
                "a {}/{} KV cache with {}-token blocks of {} KV heads (a pool block must be a multiple of 16 bytes)",
                spec.type_k, spec.type_v, bs, spec.kv_heads
            )));
        }
        let block_bytes = run.bytes();
        let tier_cap = (TIER_STAGE_BYTES / block_bytes.max(1)).clamp(1, TIER_STAGE_BLOCKS);
        let tier_stage = if spec.tier_slots > 0 {
            if !run.copyable() {
                return Err(CudaError::Unsupported(format!(
                    "a host KV tier with pool blocks of {} and {} bytes (multiples of 16 are copied)",
                    run.k_bytes, run.v_bytes
                )));
            }
            Some((gpu.alloc::<u32>(tier_cap)?, gpu.alloc::<u16>(tier_cap * block_bytes / 2)?))
        } else {
            None
        };
        let (free, total) = gpu.mem_info()?;
        // The window pool's size is fixed; the other layers take what is left.
        let window_bytes = spec.window.map_or(0, |w| w.layers.len() * w.num_blocks * (run.k_bytes + run.v_bytes));
        let fit = free.saturating_sub(reserve).saturating_sub(window_bytes) / (block_bytes + companion).max(1);
        let want = spec.num_blocks.unwrap_or(usize::MAX);
        let num_blocks = fit.min(want).min(u32::MAX as usize / 2);
        if num_blocks * bs < spec.max_ctx {
            return Err(CudaError::OutOfMemory(format!(
                "the KV cache for one {}-token context needs {} MiB; {} MiB of {} MiB are free after the weights",
                spec.max_ctx,
                (spec.max_ctx.div_ceil(bs) * block_bytes) >> 20,
                free >> 20,
                total >> 20
            )));
        }
        let layers = (0..spec.layers)
            .map(|l| {
                let blocks = spec.layer_blocks(l, num_blocks);
                Ok(LayerKv { k: gpu.alloc(blocks * run.k_bytes / 2)?, v: gpu.alloc(blocks * run.v_bytes / 2)? })
            })
            .collect::<Result<Vec<_>>>()?;
        let tier = match tier_stage {
            Some((ids, stage)) => {
                // The tier keeps the layers outside the window pool.
                let full = || layers.iter().enumerate().filter(|(l, _)| !spec.in_window(*l)).map(|(_, kv)| kv);
                let pools: Vec<u64> = full().map(|l| gpu.addr(&l.k)).chain(full().map(|l| gpu.addr(&l.v))).collect();
                let slots = gpu.alloc_pinned(spec.tier_slots.saturating_mul(block_bytes / 2))?;
                Some(TierStage {
                    pools: gpu.upload(&pools)?,
                    ids,
                    stage,
                    capacity: tier_cap,
                    slots,
                    num_slots: spec.tier_slots,
                })
            }
            None => None,
        };
        gpu.sync()?;
        tracing::info!(
            kv_tokens = num_blocks * bs,
            kv_mib = (num_blocks * block_bytes) >> 20,
            window_pool_mib = window_bytes >> 20,
            k = %spec.type_k,
            v = %spec.type_v,
            "KV cache on the GPU"
        );
        Ok(Self {
            gpu,
            layers,
            block_size: bs,
            kv_heads: spec.kv_heads,
            head_dim: spec.head_dim,
            num_blocks,
            run,
            types: (spec.type_k, spec.type_v),
            window: spec.window,
            quant,
            tier,
        })
    }

    /// Whether `layer` keeps its K/V in the window pool.
    pub(crate) fn in_window(&self, layer: usize) -> bool {
        self.window.is_some_and(|w| w.layers.contains(layer))
    }

    /// Whether K or V is quantized.
    pub(crate) fn is_quantized(&self) -> bool {
        self.quant.is_some()
    }

    /// Checks one tier copy: at most [`KvMemory::tier_batch`] blocks, one
    /// slot each, all in range, and for a load no block named twice (the
    /// scatter writes them in parallel).
    fn check_run(&self, blocks: &[u32], slots: &[u32], load: bool) -> Result<()> {
        let t = self.tier.as_ref().ok_or_else(|| CudaError::Unsupported("no host KV tier was set up".into()))?;
        let mut seen = blocks.to_vec();
        seen.sort_unstable();
        seen.dedup();
        let bad = blocks.is_empty()
            || blocks.len() > t.capacity
            || blocks.len() != slots.len()
            || blocks.iter().any(|&b| b as usize >= self.num_blocks)
            || slots.iter().any(|&s| s as usize >= t.num_slots)
            || (load && seen.len() != blocks.len());
        if bad {
            return Err(CudaError::Backend(BackendError::Batch(format!(
                "bad tier copy: {} blocks {} {} slots (at most {}, distinct when loading), ids below {}, slots below {}",
                blocks.len(),
                if load { "from" } else { "to" },
                slots.len(),
                t.capacity,
                self.num_blocks,
                t.num_slots
            ))));
        }
        Ok(())
    }

    /// Uploads a checked run's block ids and runs the gather (`save`) or
    /// scatter kernel over the staging buffer.
    fn launch(&mut self, blocks: &[u32], save: bool) -> Result<()> {
        let g = &self.gpu;
        let t = self.tier.as_mut().ok_or_else(|| CudaError::Unsupported("no host KV tier was set up".into()))?;
        g.stream.memcpy_htod(blocks, &mut t.ids.slice_mut(..blocks.len())).map_err(drv_err)?;
        g.kv_blocks(g.addr(&t.pools), t.pools.len(), g.addr(&t.ids), blocks.len(), &self.run, g.addr(&t.stage), save)
    }

    fn save(&mut self, blocks: &[u32], slots: &[u32]) -> Result<()> {
        self.check_run(blocks, slots, false)?;
        self.launch(blocks, true)?;
        let be = self.run.bytes() / 2;
        let g = &self.gpu;
        let Some(t) = self.tier.as_mut() else { return Err(CudaError::Unsupported("no host KV tier".into())) };
        let host = t.slots.as_mut_slice().map_err(drv_err)?;
        for (j, &s) in slots.iter().enumerate() {
            let s = s as usize;
            // Page-locked destination: an asynchronous DMA.
            g.stream
                .memcpy_dtoh(&t.stage.slice(j * be..(j + 1) * be), &mut host[s * be..(s + 1) * be])
                .map_err(drv_err)?;
        }
        Ok(())
    }

    fn load(&mut self, slots: &[u32], blocks: &[u32]) -> Result<()> {
        self.check_run(blocks, slots, true)?;
        let be = self.run.bytes() / 2;
        let g = &self.gpu;
        let Some(t) = self.tier.as_mut() else { return Err(CudaError::Unsupported("no host KV tier".into())) };
        let host = t.slots.as_slice().map_err(drv_err)?;
        for (j, &s) in slots.iter().enumerate() {
            let s = s as usize;
            g.stream
                .memcpy_htod(&host[s * be..(s + 1) * be], &mut t.stage.slice_mut(j * be..(j + 1) * be))
                .map_err(drv_err)?;
        }
        self.launch(blocks, false)
    }

    fn slot(&mut self, i: usize) -> Result<Vec<u16>> {
        self.gpu.sync()?;
        let be = self.run.bytes() / 2;
        let t = self.tier.as_ref().ok_or_else(|| CudaError::Unsupported("no host KV tier".into()))?;
        let host = t.slots.as_slice().map_err(drv_err)?;
        host.get(i * be..(i + 1) * be)
            .map(<[u16]>::to_vec)
            .ok_or_else(|| CudaError::Driver(format!("no tier slot {i} (there are {})", t.num_slots)))
    }
}

impl KvMemory for CudaKv {
    fn num_blocks(&self) -> usize {
        self.num_blocks
    }
    fn block_size(&self) -> usize {
        self.block_size
    }
    fn tier_slots(&self) -> usize {
        self.tier.as_ref().map_or(0, |t| t.num_slots)
    }
    fn tier_batch(&self) -> usize {
        self.tier.as_ref().map_or(0, |t| t.capacity)
    }
    fn tier_save(&mut self, blocks: &[u32], slots: &[u32]) -> BResult<()> {
        Ok(self.save(blocks, slots)?)
    }
    fn tier_load(&mut self, slots: &[u32], blocks: &[u32]) -> BResult<()> {
        Ok(self.load(slots, blocks)?)
    }
    fn tier_slot(&mut self, i: usize) -> BResult<Vec<u16>> {
        Ok(self.slot(i)?)
    }
    fn format_name(&self) -> &'static str {
        match (self.types, self.gpu.dtype) {
            ((KvType::F16, KvType::F16), crate::convert::DType::Bf16) => "bf16",
            ((k, v), _) => kiln_backend::kv_pair_name(k, v),
        }
    }
}
