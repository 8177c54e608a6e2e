//! The KV memory on the device: per layer one K and one V buffer of f16
//! values laid out `[block][kv head][slot][hd]`, each checked against the
//! adapter's binding limit. The sliding-window layers of a KV memory with
//! a window pool ([`KvSpec::window`]) hold that pool's blocks instead (the
//! step's window slots and tables address them). No host tier yet.

use kiln_backend::{BackendError, KvMemory, KvSpec, KvType, WindowKv};

use crate::gpu::Gpu;
use crate::{Result, WgpuError};

/// Longest head the attention kernel takes (4 dimensions per thread of 64).
pub(crate) const MAX_HEAD_DIM: usize = 256;

/// The KV memory of a model on a wgpu device.
pub struct WgpuKv {
    pub(crate) k: Vec<wgpu::Buffer>,
    pub(crate) v: Vec<wgpu::Buffer>,
    pub(crate) num_blocks: usize,
    pub(crate) block_size: usize,
    pub(crate) kv_heads: usize,
    pub(crate) head_dim: usize,
    /// The sliding-window layers' pool, if there is one.
    pub(crate) window: Option<WindowKv>,
}

fn unsupported(what: String) -> WgpuError {
    WgpuError::Unsupported(what)
}

impl WgpuKv {
    pub(crate) fn new(gpu: &Gpu, spec: &KvSpec) -> Result<Self> {
        if spec.type_k != KvType::F16 || spec.type_v != KvType::F16 {
            return Err(unsupported(format!(
                "a {}/{} KV cache (this backend stores K and V as f16; use --cache-type-k f16 --cache-type-v f16)",
                spec.type_k, spec.type_v
            )));
        }
        if spec.tier_slots > 0 {
            return Err(unsupported("the host KV tier (--kv-tier-mib): not implemented on wgpu yet".into()));
        }
        if spec.head_dim == 0 || !spec.head_dim.is_multiple_of(8) || spec.head_dim > MAX_HEAD_DIM {
            return Err(unsupported(format!(
                "attention heads of {} values (a multiple of 8, at most {MAX_HEAD_DIM})",
                spec.head_dim
            )));
        }
        if spec.block_size == 0 || spec.layers == 0 || spec.kv_heads == 0 {
            return Err(BackendError::Batch(format!("an empty KV cache: {spec:?}")).into());
        }
        let block_bytes = (spec.block_size * spec.kv_heads * spec.head_dim * 2) as u64;
        let fit = (gpu.max_binding() / block_bytes) as usize;
        let ctx_blocks = spec.max_ctx.max(1).div_ceil(spec.block_size);
        // Four full contexts by default, as many as one binding holds.
        let num_blocks = spec.num_blocks.unwrap_or_else(|| fit.min(4 * ctx_blocks));
        if num_blocks < ctx_blocks || num_blocks > fit {
            return Err(WgpuError::OutOfMemory(format!(
                "a KV cache of {num_blocks} blocks of {} tokens per layer ({} bytes a layer and side); \
                 one context needs {ctx_blocks} blocks and adapter '{}' binds at most {fit} \
                 (lower --ctx-size or --kv-cache-tokens)",
                spec.block_size,
                num_blocks as u64 * block_bytes,
                gpu.summary.name
            )));
        }
        if let Some(w) = spec.window.filter(|w| w.num_blocks == 0 || w.num_blocks > fit) {
            return Err(WgpuError::OutOfMemory(format!(
                "a window pool of {} blocks per layer (adapter '{}' binds 1 to {fit})",
                w.num_blocks, gpu.summary.name
            )));
        }
        let (mut k, mut v) = (Vec::new(), Vec::new());
        for l in 0..spec.layers {
            let blocks = match spec.window {
                Some(w) if w.layers.contains(l) => w.num_blocks,
                _ => num_blocks,
            };
            let bytes = blocks as u64 * block_bytes;
            k.push(gpu.storage(bytes, &format!("K cache of layer {l}"))?);
            v.push(gpu.storage(bytes, &format!("V cache of layer {l}"))?);
        }
        Ok(Self {
            k,
            v,
            num_blocks,
            block_size: spec.block_size,
            kv_heads: spec.kv_heads,
            head_dim: spec.head_dim,
            window: spec.window,
        })
    }

    /// Layer `layer`'s K and V buffers.
    pub(crate) fn layer(&self, layer: usize) -> kiln_backend::Result<(wgpu::Buffer, wgpu::Buffer)> {
        match (self.k.get(layer), self.v.get(layer)) {
            (Some(k), Some(v)) => Ok((k.clone(), v.clone())),
            _ => Err(BackendError::Batch(format!("the KV cache has no layer {layer}"))),
        }
    }

    /// Whether `layer` keeps its K/V in the window pool.
    pub(crate) fn in_window(&self, layer: usize) -> bool {
        self.window.is_some_and(|w| w.layers.contains(layer))
    }
}

fn no_tier() -> BackendError {
    BackendError::Unsupported { device: "wgpu", what: "the host KV tier".into() }
}

impl KvMemory for WgpuKv {
    fn num_blocks(&self) -> usize {
        self.num_blocks
    }
    fn block_size(&self) -> usize {
        self.block_size
    }
    fn tier_slots(&self) -> usize {
        0
    }
    fn tier_batch(&self) -> usize {
        usize::MAX
    }
    fn tier_save(&mut self, blocks: &[u32], _slots: &[u32]) -> kiln_backend::Result<()> {
        if blocks.is_empty() {
            Ok(())
        } else {
            Err(no_tier())
        }
    }
    fn tier_load(&mut self, slots: &[u32], _blocks: &[u32]) -> kiln_backend::Result<()> {
        if slots.is_empty() {
            Ok(())
        } else {
            Err(no_tier())
        }
    }
    fn tier_slot(&mut self, _i: usize) -> kiln_backend::Result<Vec<u16>> {
        Err(no_tier())
    }
    fn format_name(&self) -> &'static str {
        "f16"
    }
}
