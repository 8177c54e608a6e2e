//! The KV memory of a model on the CPU: one K and one V pool per layer, in
//! blocks of `f16` values (layout in `kiln_kernels::ops::KvLayout`). Which block belongs to
//! which sequence is decided by `kiln_core::kv`; this is only the storage.

use kiln_kernels::ops::KvLayout;

use crate::config::ModelConfig;

/// K/V storage for every layer.
#[derive(Debug)]
pub struct KvCache {
    layout: KvLayout,
    num_blocks: usize,
    k: Vec<Vec<u16>>,
    v: Vec<Vec<u16>>,
}

impl KvCache {
    /// Allocates `num_blocks` blocks of `block_size` tokens per layer. Pages
    /// are committed by the OS only when first written.
    pub fn new(cfg: &ModelConfig, num_blocks: usize, block_size: usize) -> Self {
        let layout = KvLayout { block_size, n_kv_heads: cfg.num_kv_heads, head_dim: cfg.head_dim };
        let n = num_blocks * layout.block_len();
        Self {
            layout,
            num_blocks,
            k: (0..cfg.num_layers).map(|_| vec![0u16; n]).collect(),
            v: (0..cfg.num_layers).map(|_| vec![0u16; n]).collect(),
        }
    }
    /// Layout of one layer.
    pub fn layout(&self) -> KvLayout {
        self.layout
    }
    /// Blocks per layer.
    pub fn num_blocks(&self) -> usize {
        self.num_blocks
    }
    /// Tokens per block.
    pub fn block_size(&self) -> usize {
        self.layout.block_size
    }
    /// Bytes per token of context (all layers, K and V).
    pub fn bytes_per_token(&self) -> usize {
        2 * self.k.len() * self.layout.n_kv_heads * self.layout.head_dim * 2
    }
    /// Mutable K and V of one layer.
    pub fn layer_mut(&mut self, layer: usize) -> Option<(&mut [u16], &mut [u16])> {
        Some((self.k.get_mut(layer)?.as_mut_slice(), self.v.get_mut(layer)?.as_mut_slice()))
    }
}

/// Bytes one token of context costs for a configuration.
pub fn kv_bytes_per_token(cfg: &ModelConfig) -> usize {
    2 * cfg.num_layers * cfg.kv_dim() * 2
}
