//! How a GPU KV pool lays out its blocks (`kernels/kv_fmt.cuh` reads and
//! writes them): the bytes a block takes in each [`KvType`], the host
//! tier's per-block run, and the names of the kernels of a quantized cache.
//! Host-side arithmetic only, so it is tested without a GPU.
//!
//! A 16-bit pool block is `[kv head][slot][head_dim]` values of the model's
//! type. A quantized one (q8_0, q4_0) is the quants of its
//! `kv_heads · block_size` rows (`head_dim` bytes a row for q8_0,
//! `head_dim / 2` for q4_0) followed by their f16 scales (one per 32
//! values): the same bytes as GGML's blocks, split so that the kernels'
//! loads are aligned (see the header of `kv_fmt.cuh`).

use kiln_backend::KvType;

/// Bytes of one pool block of `kv_heads · block_size` rows of `head_dim`
/// values stored as `ty` (`head_dim` a multiple of [`KvType::block_values`]).
pub fn pool_block_bytes(ty: KvType, kv_heads: usize, block_size: usize, head_dim: usize) -> usize {
    kv_heads * block_size * ty.bytes(head_dim)
}

/// The suffix of the quantized-cache kernels for K stored as `k` and V as
/// `v` (`kernels/kv_quant.cu`: `attn_split_<hd>_<dtype><suffix>` and so on);
/// `None` for an f16/f16 cache, which the 16-bit kernels take.
pub fn kernel_suffix(k: KvType, v: KvType) -> Option<String> {
    (k != KvType::F16 || v != KvType::F16).then(|| format!("_{}_{}", k.name(), v.name()))
}

/// The host tier's copy of one block over every layer: the K pools' blocks
/// of `k_bytes` each, then the V pools' of `v_bytes`; a run must be whole
/// 16-byte words (the copy kernel moves `uint4`s).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TierRun {
    /// Bytes of one K pool block.
    pub k_bytes: usize,
    /// Bytes of one V pool block.
    pub v_bytes: usize,
    /// Layers (K pools, and as many V pools).
    pub layers: usize,
}

impl TierRun {
    /// Bytes of one block over every layer, K and V (one tier slot).
    pub fn bytes(&self) -> usize {
        self.layers * (self.k_bytes + self.v_bytes)
    }
    /// Whether the copy kernel can move it (16-byte words each side).
    pub fn copyable(&self) -> bool {
        self.k_bytes.is_multiple_of(16) && self.v_bytes.is_multiple_of(16)
    }
    /// Byte offset of pool `p` (every layer's K, then every layer's V)
    /// within a slot, as the copy kernel places it.
    pub fn offset(&self, p: usize) -> usize {
        if p < self.layers {
            p * self.k_bytes
        } else {
            self.layers * self.k_bytes + (p - self.layers) * self.v_bytes
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_bytes_match_the_ggml_block_sizes() {
        // 8 KV heads, 16 slots, 128 values: 2 bytes a value, 34 bytes per
        // 32 (q8_0), 18 per 32 (q4_0).
        assert_eq!(pool_block_bytes(KvType::F16, 8, 16, 128), 8 * 16 * 256);
        assert_eq!(pool_block_bytes(KvType::Q8_0, 8, 16, 128), 8 * 16 * (128 + 8));
        assert_eq!(pool_block_bytes(KvType::Q4_0, 8, 16, 128), 8 * 16 * (64 + 8));
        assert_eq!(pool_block_bytes(KvType::Q8_0, 1, 1, 64), 68);
        assert_eq!(pool_block_bytes(KvType::Q4_0, 1, 1, 64), 36);
    }

    #[test]
    fn kernel_suffixes_name_both_sides() {
        assert_eq!(kernel_suffix(KvType::F16, KvType::F16), None);
        assert_eq!(kernel_suffix(KvType::Q8_0, KvType::Q8_0).as_deref(), Some("_q8_0_q8_0"));
        assert_eq!(kernel_suffix(KvType::F16, KvType::Q4_0).as_deref(), Some("_f16_q4_0"));
        assert_eq!(kernel_suffix(KvType::Q4_0, KvType::F16).as_deref(), Some("_q4_0_f16"));
    }

    #[test]
    fn tier_runs_place_k_pools_then_v_pools() {
        let k = pool_block_bytes(KvType::Q8_0, 2, 16, 64);
        let v = pool_block_bytes(KvType::Q4_0, 2, 16, 64);
        let r = TierRun { k_bytes: k, v_bytes: v, layers: 3 };
        assert_eq!(r.bytes(), 3 * (k + v));
        assert_eq!((r.offset(0), r.offset(2), r.offset(3), r.offset(5)), (0, 2 * k, 3 * k, 3 * k + 2 * v));
        assert!(r.copyable());
        // One slot of one row of 64 q4_0 values is 36 bytes: not whole words.
        assert!(!TierRun { k_bytes: 36, v_bytes: 36, layers: 1 }.copyable());
        // An f16 run is the old layout: pool p at p blocks.
        let f = pool_block_bytes(KvType::F16, 2, 16, 64);
        let r = TierRun { k_bytes: f, v_bytes: f, layers: 3 };
        assert!((0..6).all(|p| r.offset(p) == p * f));
    }
}
