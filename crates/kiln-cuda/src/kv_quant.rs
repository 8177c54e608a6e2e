//! The kernels of a quantized KV cache (`kernels/kv_quant.cu`), loaded
//! when a [`crate::kv::CudaKv`] with a q8_0 or q4_0 side is made: the KV
//! write and the split-K, grouped and tensor-core attention over pools laid out as
//! [`crate::kv_layout`] says. An f16 cache never loads this module and its
//! kernels are the 16-bit ones, unchanged.

use cudarc::driver::CudaFunction;
use kiln_backend::KvType;

use crate::gpu::{drv_err, Gpu};
use crate::Result;

/// One module per (K, V) pair (build.rs compiles `kernels/kv_quant.cu` once
/// for each), so that a cache loads only its own pair's kernels.
macro_rules! pair_image {
    ($($k:ident $v:ident $name:literal),* $(,)?) => {
        fn pair_image(k: KvType, v: KvType) -> Option<&'static [u8]> {
            match (k, v) {
                $((KvType::$k, KvType::$v) => Some(include_bytes!(concat!(env!("OUT_DIR"), "/kv_quant_", $name, ".fatbin"))),)*
                _ => None,
            }
        }
    };
}
pair_image!(
    F16 Q8_0 "f16_q8_0",
    F16 Q4_0 "f16_q4_0",
    Q8_0 F16 "q8_0_f16",
    Q8_0 Q8_0 "q8_0_q8_0",
    Q8_0 Q4_0 "q8_0_q4_0",
    Q4_0 F16 "q4_0_f16",
    Q4_0 Q8_0 "q4_0_q8_0",
    Q4_0 Q4_0 "q4_0_q4_0",
);

/// The kernels of one (K type, V type) pair for one head dimension.
pub(crate) struct KvQuantKernels {
    /// `rope_store_<dtype>_<k>_<v>`: RoPE, then K and V quantized into the pools.
    pub(crate) rope_store: CudaFunction,
    /// `attn_split_<hd>_<dtype>_<k>_<v>`: the split-K decode attention.
    pub(crate) attn_split: CudaFunction,
    /// `attn_tile_<hd>_<dtype>_<k>_<v>`: the tensor-core prompt tiles
    /// (head dimensions 64 and 128, as the 16-bit ones).
    pub(crate) attn_tile: Option<CudaFunction>,
    /// `attn_group_<hd>_<dtype>_<k>_<v>`: the decode attention by KV
    /// group (head dimensions 64 and 128, as the 16-bit one).
    pub(crate) attn_group: Option<CudaFunction>,
    /// `attn_group8_<hd>_f16_<k>_<v>`: the same with the keys as the
    /// products' rows (attention_swap.cuh), for both sides quantized and
    /// f16 activations; only for models of at most [`SWAP_HEADS`] query
    /// heads per KV head ([`Self::group`] chooses).
    pub(crate) attn_group8: Option<CudaFunction>,
}

/// Query heads per KV head that the transposed grouped kernel takes at
/// most (`SWAP_HEADS` in attention_swap.cuh: one n8 tile).
pub(crate) const SWAP_HEADS: usize = 8;

impl KvQuantKernels {
    /// Loads the kernels for K stored as `k` and V as `v` (not both f16)
    /// and heads of `head_dim` values.
    pub(crate) fn load(gpu: &Gpu, k: KvType, v: KvType, head_dim: usize) -> Result<Self> {
        let (Some(suffix), Some(image)) = (crate::kv_layout::kernel_suffix(k, v), pair_image(k, v)) else {
            return Err(crate::CudaError::Driver(format!("no quantized-cache kernels for a {k}/{v} cache")));
        };
        let m = gpu.ctx.load_module(crate::gpu::module_image(image)).map_err(drv_err)?;
        let dt = gpu.dtype.suffix();
        let f = |name: String| m.load_function(&name).map_err(drv_err);
        Ok(Self {
            rope_store: f(format!("rope_store_{dt}{suffix}"))?,
            attn_split: f(format!("attn_split_{head_dim}_{dt}{suffix}"))?,
            attn_tile: match (head_dim, gpu.has_tiles()) {
                (64 | 128, true) => Some(f(format!("attn_tile_{head_dim}_{dt}{suffix}"))?),
                _ => None,
            },
            attn_group: match head_dim {
                64 | 128 => Some(f(format!("attn_group_{head_dim}_{dt}{suffix}"))?),
                _ => None,
            },
            attn_group8: match head_dim {
                64 | 128 if dt == "f16" && k != KvType::F16 && v != KvType::F16 => {
                    Some(f(format!("attn_group8_{head_dim}_f16{suffix}"))?)
                }
                _ => None,
            },
        })
    }

    /// The grouped decode kernel for `nh` query heads over `nkv` KV heads:
    /// the transposed one where it exists, `swap` allows it
    /// (`CudaOptions::group_swap`) and a KV head has at most
    /// [`SWAP_HEADS`] query heads (H200, 8B shape, q8_0 at 32k keys:
    /// 186.7 against 166.7 decode tok/s; BENCHMARKS.md).
    pub(crate) fn group(&self, nh: usize, nkv: usize, swap: bool) -> Option<&CudaFunction> {
        match &self.attn_group8 {
            Some(f) if swap && swap_fits(nh, nkv) => Some(f),
            _ => self.attn_group.as_ref(),
        }
    }
}

/// Whether `nh` query heads over `nkv` KV heads put at most
/// [`SWAP_HEADS`] heads in each block of the grouped decode attention.
pub(crate) fn swap_fits(nh: usize, nkv: usize) -> bool {
    nkv > 0 && nh.div_ceil(nkv) <= SWAP_HEADS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_of_up_to_eight_heads_take_the_transposed_kernel() {
        assert!(swap_fits(32, 8)); // Llama 3 8B
        assert!(swap_fits(14, 2)); // Qwen2.5 0.5B: 7
        assert!(swap_fits(64, 8)); // gpt-oss, Llama 70B: 8
        assert!(!swap_fits(16, 1)); // 16: the raw-fragment kernel
        assert!(!swap_fits(8, 0));
    }
}
