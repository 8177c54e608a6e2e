//! The KV memory of a model on the CPU: one K and one V pool per layer, in
//! blocks of 16-bit values, `f16` or bf16 pairs for the bf16 kernel
//! (layout in `kiln_kernels::ops::KvLayout`). Which block belongs to
//! which sequence is decided by `kiln_core::kv`; this is only the storage.

use kiln_kernels::ops::{AttnPath, KvFormat, KvLayout};

use crate::config::ModelConfig;

/// K/V storage for every layer.
#[derive(Debug)]
pub struct KvCache {
    layout: KvLayout,
    /// The kernel that reads it.
    path: AttnPath,
    num_blocks: usize,
    k: Vec<Vec<u16>>,
    v: Vec<Vec<u16>>,
}

impl KvCache {
    /// Allocates `num_blocks` blocks of `block_size` tokens per layer. Pages
    /// are committed by the OS only when first written.
    pub fn new(cfg: &ModelConfig, num_blocks: usize, block_size: usize) -> Self {
        let layout =
            KvLayout { block_size, n_kv_heads: cfg.num_kv_heads, head_dim: cfg.head_dim, format: KvFormat::F16 };
        let n = num_blocks * layout.block_len();
        Self {
            layout,
            path: AttnPath::detect(layout),
            num_blocks,
            k: (0..cfg.num_layers).map(|_| vec![0u16; n]).collect(),
            v: (0..cfg.num_layers).map(|_| vec![0u16; n]).collect(),
        }
    }
    /// Layout of one layer.
    pub fn layout(&self) -> KvLayout {
        self.layout
    }

    /// Stores bf16 pairs and reads them with bf16 dot products where this
    /// CPU has them ([`AttnPath::Avx512Bf16`], for prefill-sized tiles), or
    /// stores `f16` for the f32 kernels (`false`, the default of
    /// [`KvCache::new`]). Call before anything is written: the values
    /// already there are not converted.
    pub fn with_bf16_attention(mut self, on: bool) -> Self {
        let pairs = KvLayout { format: KvFormat::Bf16Pairs, ..self.layout };
        (self.layout, self.path) = if on && AttnPath::Avx512Bf16.supports(pairs) {
            (pairs, AttnPath::Avx512Bf16)
        } else {
            let f16 = KvLayout { format: KvFormat::F16, ..self.layout };
            (f16, AttnPath::detect(f16))
        };
        self
    }

    /// The attention kernel that reads this cache.
    pub fn attention_path(&self) -> AttnPath {
        self.path
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
    /// `u16` values one block holds over all layers, K and V (the size of
    /// one slot of a host tier store).
    pub fn block_elems(&self) -> usize {
        2 * self.k.len() * self.layout.block_len()
    }

    /// Copies block `block` of every layer into `dst` (`block_elems()` long).
    /// Returns false (copying nothing) when the block or `dst` is out of range.
    pub fn save_block(&self, block: usize, dst: &mut [u16]) -> bool {
        let n = self.layout.block_len();
        if block >= self.num_blocks || dst.len() != self.block_elems() {
            return false;
        }
        let src = self.k.iter().chain(&self.v).map(|pool| &pool[block * n..(block + 1) * n]);
        for (d, s) in dst.chunks_exact_mut(n).zip(src) {
            d.copy_from_slice(s);
        }
        true
    }

    /// Copies `src` (as written by [`KvCache::save_block`]) into block
    /// `block` of every layer. Returns false (copying nothing) when out of range.
    pub fn load_block(&mut self, block: usize, src: &[u16]) -> bool {
        let n = self.layout.block_len();
        if block >= self.num_blocks || src.len() != self.block_elems() {
            return false;
        }
        let dst = self.k.iter_mut().chain(self.v.iter_mut()).map(|pool| &mut pool[block * n..(block + 1) * n]);
        for (d, s) in dst.zip(src.chunks_exact(n)) {
            d.copy_from_slice(s);
        }
        true
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_saved_block_loads_back_into_another_block() {
        let cfg =
            crate::testing::TinySpec::llama(kiln_gguf::GgmlType::F32).config(kiln_kernels::ops::RopeStyle::Normal);
        let mut kv = KvCache::new(&cfg, 4, 4);
        let n = kv.layout().block_len();
        for l in 0..cfg.num_layers {
            let (k, v) = kv.layer_mut(l).unwrap();
            for (i, x) in k[n..2 * n].iter_mut().enumerate() {
                *x = (l * 1000 + i) as u16;
            }
            for (i, x) in v[n..2 * n].iter_mut().enumerate() {
                *x = (l * 1000 + i + 500) as u16;
            }
        }
        let mut buf = vec![0u16; kv.block_elems()];
        assert!(kv.save_block(1, &mut buf));
        assert!(kv.load_block(3, &buf));
        for l in 0..cfg.num_layers {
            let (k, v) = kv.layer_mut(l).unwrap();
            assert_eq!(k[n..2 * n], k[3 * n..4 * n]);
            assert_eq!(v[n..2 * n], v[3 * n..4 * n]);
            assert!(k[2 * n..3 * n].iter().all(|&x| x == 0));
        }
        assert!(!kv.save_block(4, &mut buf), "out of range");
        assert!(!kv.load_block(0, &buf[1..]), "wrong length");
    }
}
